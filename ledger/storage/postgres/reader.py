"""The PostgreSQL engine's page reader for ``session_history`` (DESIGN.md 8).

Every call runs in one REPEATABLE READ, read-only transaction (``locked()``),
so the state it starts from and every row it reads come from one snapshot.

Positions are ``(seq, byte offset in the row)``: a row starts at ``(seq, 0)``
and ends at ``(seq, len + 1)`` (as a line with its newline would), so the
retrieval rules written for segment offsets apply unchanged: a page paused
at a row's start serves it next; paused at its end, the row after it.

The bounds hold per call and are counted on the bytes actually fetched: at
most SCAN_ROWS rows are examined and SCAN_BYTES bytes of rows read; a row
longer than LINE_CAP is never fetched (only its length is, to list it under
``skipped``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ledger.core import cursors
from ledger.core import format as fmt
from ledger.core.bounds import LINE_CAP, SCAN_BYTES, SCAN_ROWS, Budget, Event, SkipSink
from ledger.core.cursors import CursorData, Position
from ledger.core.errors import CursorExpired, NotFound
from ledger.core.windows import Boundary, window_marker
from ledger.storage.postgres.workspace import PgState

if TYPE_CHECKING:
    from ledger.storage.postgres.workspace import PgWorkspace

PAGE = 128  # rows per round trip


def _start_seq(p: Position) -> int:
    """The first seq a scan from ``p`` serves."""
    return p.segment + 1 if (p.skip or p.offset > 0) else p.segment


def _end_seq(p: Position) -> int:
    """One past the last seq a scan up to ``p`` serves."""
    return p.segment + 1 if p.offset > 0 else p.segment


@dataclass
class PgScan:
    conn: Any
    workspace: str
    start: Position
    end: Position
    budget: Budget = field(default_factory=Budget)
    paused: Position | None = None
    prefilter: Callable[[bytes], bool] | None = None

    def pause_at(self, pos: Position) -> None:
        self.paused = pos

    def events(self) -> Iterator[Event]:
        seq = _start_seq(self.start)
        stop = _end_seq(self.end)
        budget = self.budget
        while seq < stop:
            lengths = self.conn.execute(
                "SELECT seq, octet_length(raw) FROM tl_rows WHERE workspace = %s AND seq >= %s "
                "AND seq < %s ORDER BY seq LIMIT %s",
                (self.workspace, seq, stop, PAGE)).fetchall()
            if not lengths:
                break
            wanted: list[tuple[int, int]] = []
            planned = budget.bytes_read
            for s, n in lengths:
                if n <= LINE_CAP:
                    if planned + n + 1 > SCAN_BYTES:
                        break
                    planned += n + 1
                wanted.append((s, n))
            raws = self._fetch([s for s, n in wanted if n <= LINE_CAP])
            for s, n in wanted:
                if budget.rows >= SCAN_ROWS:
                    self.paused = Position(s, 0)
                    return
                budget.rows += 1
                if n > LINE_CAP:
                    yield Event(s, 0, n + 1, None, b"", True, s)
                else:
                    raw = raws[s]
                    budget.bytes_read += n + 1
                    if self.prefilter is None or self.prefilter(raw):
                        yield Event(s, 0, n + 1, fmt.decode_line(raw), raw)
                if self.paused is not None:
                    return
            if len(wanted) < len(lengths):  # the byte budget is spent
                self.paused = Position(lengths[len(wanted)][0], 0)
                return
            seq = lengths[-1][0] + 1
        self.paused = None

    def _fetch(self, seqs: list[int]) -> dict[int, bytes]:
        if not seqs:
            return {}
        got = self.conn.execute(
            "SELECT seq, raw FROM tl_rows WHERE workspace = %s AND seq = ANY(%s)",
            (self.workspace, seqs), binary=True).fetchall()
        return {s: bytes(raw) for s, raw in got}


class PgReader:
    """Page access to one workspace (``ledger.storage.engine.PageReader``)."""

    def __init__(self, ws: PgWorkspace) -> None:
        self.ws = ws
        self.conn: Any = None

    def exists(self) -> bool:
        return self.ws.exists()

    @contextmanager
    def locked(self) -> Iterator[None]:
        with self.ws.db.read("session_history") as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            self.conn = conn
            try:
                yield
            finally:
                self.conn = None

    def state(self) -> PgState:
        st = self.ws._head(self.conn)
        if st is None:
            raise CursorExpired("the history is gone; start a new query")
        return st

    def binding(self, st: PgState) -> str:
        return f"pg{st.epoch}"

    def floor_key(self, st: PgState) -> str:
        return "none" if st.floor is None else str(st.floor.seq)

    def floor(self, st: PgState) -> Boundary | None:
        return st.floor

    def fresh_pos(self, st: PgState) -> Position:
        if st.floor is not None:
            return Position(st.floor.seq, 0, True)
        return Position(0, 0)

    def fresh(self, st: PgState, action: str, digest: str) -> CursorData:
        return CursorData(
            v=cursors.VERSION, kid=cursors.KEY_ID, workspace=self.ws.workspace, action=action,
            args=digest, binding=self.binding(st), floor=self.floor_key(st),
            high=st.next_seq - 1, end=Position(st.next_seq, 0), pos=self.fresh_pos(st),
            window=window_marker(st.floor),
        )

    def carry_over(self, data: CursorData, st: PgState) -> CursorData:
        raise CursorExpired(
            "the history changed since this cursor was issued (a rewrite or a new privacy "
            "floor); start a new query"
        )

    def after_floor(self, st: PgState, part: int, offset: int) -> bool:
        return st.floor is None or (part, offset) > (st.floor.seq, 0)

    def scan(self, st: PgState, start: Position, end: Position) -> PgScan:
        return PgScan(self.conn, self.ws.workspace, start, end)

    def window_start(self, st: PgState, window: int) -> Position:
        if st.floor is not None:
            if window == st.floor.seq:
                return Position(window, 0, True)
            if window < st.floor.seq:
                raise NotFound(f"window {window} is not retrievable")
        elif window == 0:
            return Position(0, 0)
        got = self.conn.execute(
            "SELECT 1 FROM tl_rows WHERE workspace = %s AND seq = %s AND boundary IS NOT NULL",
            (self.ws.workspace, window)).fetchone()
        if got is None:
            raise NotFound(f"no retrievable window {window}")
        return Position(window, 0, True)

    def window_of(self, st: PgState, part: int, offset: int) -> int:
        got = self.conn.execute(
            "SELECT max(seq) FROM tl_rows WHERE workspace = %s AND boundary IS NOT NULL "
            "AND seq < %s", (self.ws.workspace, part)).fetchone()
        return int(got[0]) if got and got[0] is not None else 0

    def locate(self, st: PgState, seq: int, result: SkipSink) -> Any:
        got = self.conn.execute(
            "SELECT octet_length(raw), CASE WHEN octet_length(raw) <= %s THEN raw END "
            "FROM tl_rows WHERE workspace = %s AND seq = %s",
            (LINE_CAP, self.ws.workspace, seq), binary=True).fetchone()
        if got is None:
            raise NotFound(f"no retrievable row {seq}")
        n, raw = got
        row = fmt.decode_line(bytes(raw)) if raw is not None else None
        if row is None:
            result.add_skipped(seq, n)
            return None
        return seq, 0, row

    def seek(self, st: PgState, pos: Position, seq: int, result: SkipSink) -> Any:
        return self.locate(st, seq, result)
