"""``session_history`` pages for engines that keep rows by seq (PostgreSQL and
the in-memory engine), written once: the state they report (``RowState``),
the bounded scan, and the page reader's rules (``ledger.storage.engine``'s
``PageReader[RowState]``). Each engine supplies a ``RowSource`` (how to list
and fetch rows) and a few lookups (``SeqReader``'s hooks).

Positions are ``(seq, byte offset in the row)``: a row starts at ``(seq, 0)``
and ends at ``(seq, len + 1)`` (as a line with its newline would), so the
retrieval rules written for segment offsets hold unchanged: a page paused at
a row's start serves it next; paused at its end, the row after it. A
boundary is ``Boundary(seq, seq, 0, reason)``.

The bounds hold per call and are counted on the bytes actually fetched: at
most SCAN_ROWS rows are examined and SCAN_BYTES bytes of rows read; a row
longer than LINE_CAP is never fetched (only its length is, to list it under
``skipped``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol

from ledger.core import cursors
from ledger.core.bounds import LINE_CAP, SCAN_BYTES, SCAN_ROWS, Budget, Event, SkipSink
from ledger.core.cursors import CursorData, Position
from ledger.core.errors import CursorExpired, HistoryDamaged, NotFound
from ledger.core.format import rows as fmt
from ledger.core.ranking import Query
from ledger.core.rows import Row
from ledger.core.rules import FloorAt
from ledger.core.windows import Boundary, window_marker
from ledger.storage.engine import Candidate, Located, RowStat, StatReport

PAGE = 128  # rows listed per step of a scan


@dataclass(frozen=True)
class RowState:
    """A row engine's head: what ``History.snapshot()`` reports."""

    next_seq: int
    epoch: int
    window: Boundary | None
    floor: Boundary | None

    @property
    def window_seq(self) -> int:
        return self.window.seq if self.window is not None else 0

    def stat(
        self, workspace: str, *, engine: str, boundaries: int, rows: int, nbytes: int,
        quarantine_bytes: int, database: str | None = None, root: str | None = None,
    ) -> StatReport:
        """The ``stat`` document of a row engine's workspace with this head
        (the receipt is the head row: always stable; no segments)."""
        return StatReport(
            workspace=workspace, engine=engine,
            epoch=self.epoch,
            window=self.window_seq,
            windows=1 + boundaries,  # window 0, then one per boundary
            next_seq=self.next_seq,
            floor=None if self.floor is None else FloorAt(self.floor.seq, None, None),
            rows=rows,
            bytes=nbytes,
            quarantine_bytes=quarantine_bytes,
            detail=RowStat(database=database, root=root),
        )


def decode_row(workspace: str, seq: int, raw: bytes) -> Row:
    """Row ``seq`` from its stored bytes (no newline); HistoryDamaged when they
    fail verification or carry another seq."""
    data = fmt.decode_line(raw)
    if data is None or data.get("seq") != seq:
        raise HistoryDamaged(
            f"workspace {workspace!r}: row {seq} fails verification; run "
            f"`tledger check {workspace}` and `tledger repair {workspace}`"
        )
    return Row(raw, seq, 0, data)


def boundary(seq: int | None, reason: str | None) -> Boundary | None:
    """The boundary at row ``seq`` (None for none: no seq, or 0)."""
    return None if seq is None or seq <= 0 else Boundary(seq, seq, 0, reason or "manual")


class RowSource(Protocol):
    """How a scan reads an engine's rows."""

    def lengths(self, first: int, stop: int, limit: int) -> list[tuple[int, int]]:
        """(seq, byte length) of the rows with ``first <= seq < stop``, in
        order, at most ``limit``."""
        ...

    def fetch(self, seqs: list[int]) -> dict[int, bytes]:
        """The stored bytes of rows ``seqs`` (each exists)."""
        ...


def start_seq(p: Position) -> int:
    """The first seq a scan from ``p`` serves."""
    return p.part + 1 if (p.skip or p.offset > 0) else p.part


def end_seq(p: Position) -> int:
    """One past the last seq a scan up to ``p`` serves."""
    return p.part + 1 if p.offset > 0 else p.part


@dataclass
class SeqScan:
    """The row engines' ``PageScan``, over ``source``."""

    source: RowSource
    start: Position
    end: Position
    budget: Budget = field(default_factory=Budget)
    paused: Position | None = None
    prefilter: Callable[[bytes], bool] | None = None

    def pause_at(self, pos: Position) -> None:
        self.paused = pos

    def events(self) -> Iterator[Event]:
        seq = start_seq(self.start)
        stop = end_seq(self.end)
        budget = self.budget
        while seq < stop:
            lengths = self.source.lengths(seq, stop, PAGE)
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
            wanted_seqs = [s for s, n in wanted if n <= LINE_CAP]
            raws = self.source.fetch(wanted_seqs) if wanted_seqs else {}
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


class SeqReader(ABC):
    """The page reader of a row engine: ``PageReader[RowState]``.

    A subclass provides ``workspace`` and the abstract methods below (the
    hooks ``source``, ``is_boundary``, ``boundary_before`` and ``row_at``,
    and from the protocol ``exists``, ``locked``, ``state``, ``binding``,
    ``prepare_ranked`` and ``ranked``)."""

    workspace: str

    # --- hooks -------------------------------------------------------------------

    @abstractmethod
    def source(self) -> RowSource: ...

    @abstractmethod
    def is_boundary(self, seq: int) -> bool:
        """Whether row ``seq`` is a boundary (a reset)."""

    @abstractmethod
    def boundary_before(self, seq: int) -> int:
        """The seq of the newest boundary before row ``seq`` (0: none)."""

    @abstractmethod
    def row_at(self, seq: int) -> tuple[int, bytes | None] | None:
        """Row ``seq``'s byte length and bytes (None when over LINE_CAP), or
        None when there is no such row."""

    @abstractmethod
    def exists(self) -> bool: ...

    @abstractmethod
    def locked(self) -> AbstractContextManager[None]: ...

    @abstractmethod
    def state(self) -> RowState: ...

    @abstractmethod
    def binding(self, st: RowState) -> str: ...

    @abstractmethod
    def prepare_ranked(self) -> None: ...

    @abstractmethod
    def ranked(
        self, st: RowState, query: Query, after: int, high: int, window: int | None
    ) -> list[Candidate]: ...

    @abstractmethod
    def read_order(self, seqs: list[int]) -> None: ...

    @abstractmethod
    def similar(
        self, st: RowState, text: str, after: int, high: int, window: int | None
    ) -> list[Candidate]: ...

    # --- the rules -----------------------------------------------------------------

    def floor_key(self, st: RowState) -> str:
        return "none" if st.floor is None else str(st.floor.seq)

    def floor(self, st: RowState) -> Boundary | None:
        return st.floor

    def window_seq(self, st: RowState) -> int:
        return st.window_seq

    def fresh_pos(self, st: RowState) -> Position:
        if st.floor is not None:
            return Position(st.floor.seq, 0, True)
        return Position(0, 0)

    def fresh(self, st: RowState, action: str, digest: str) -> CursorData:
        return CursorData(
            v=cursors.VERSION, kid=cursors.KEY_ID, workspace=self.workspace, action=action,
            args=digest, binding=self.binding(st), floor=self.floor_key(st),
            high=st.next_seq - 1, end=Position(st.next_seq, 0), pos=self.fresh_pos(st),
            window=window_marker(st.floor),
        )

    def carry_over(self, data: CursorData, st: RowState) -> CursorData:
        """Never: rows never move without changing the binding."""
        raise CursorExpired(
            "the history changed since this cursor was issued (a rewrite or a new privacy "
            "floor); start a new query"
        )

    def after_floor(self, st: RowState, part: int, offset: int) -> bool:
        return st.floor is None or (part, offset) > (st.floor.seq, 0)

    def scan(self, st: RowState, start: Position, end: Position) -> SeqScan:
        return SeqScan(self.source(), start, end)

    def window_start(self, st: RowState, window: int) -> Position:
        if st.floor is not None:
            if window == st.floor.seq:
                return Position(window, 0, True)
            if window < st.floor.seq:
                raise NotFound(f"window {window} is not retrievable")
        elif window == 0:
            return Position(0, 0)
        if not self.is_boundary(window):
            raise NotFound(f"no retrievable window {window}")
        return Position(window, 0, True)

    def window_of(self, st: RowState, part: int, offset: int) -> int:
        return self.boundary_before(part)

    def locate(self, st: RowState, seq: int, result: SkipSink) -> Located:
        got = self.row_at(seq)
        if got is None:
            raise NotFound(f"no retrievable row {seq}")
        return found(seq, *got, result)

    def seek(self, st: RowState, pos: Position, seq: int, result: SkipSink) -> Located:
        """Never needed (``locate`` is one read), but answered as ``locate``."""
        return self.locate(st, seq, result)

    def locate_at(
        self, st: RowState, seq: int, hint: tuple[int, int], result: SkipSink, budget: Budget
    ) -> Located:
        """``locate``, its bytes counted in the call's ``budget``: a row that
        would not fit is not read (the page ends there)."""
        got = self.row_at(seq)
        if got is None:
            raise NotFound(f"no retrievable row {seq}")
        n, raw = got
        if raw is not None:
            if budget.bytes_read + n > SCAN_BYTES:
                return Located(resume=Position(seq, 0))
            budget.bytes_read += n
        budget.rows += 1
        return found(seq, n, raw, result)


def found(seq: int, n: int, raw: bytes | None, result: SkipSink) -> Located:
    """Row ``seq`` of ``n`` stored bytes ``raw`` (None: over LINE_CAP) as
    ``locate`` reports it: an unreadable or oversized one is listed under
    skipped."""
    row = fmt.decode_line(raw) if raw is not None else None
    if row is None:
        result.add_skipped(seq, n)
        return Located()
    return Located(row, seq, 0)
