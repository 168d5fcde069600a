"""The PostgreSQL engine's page reader for ``session_history`` (DESIGN.md 8).

Every call runs in one REPEATABLE READ, read-only transaction (``locked()``),
so the state it starts from and every row it reads come from one snapshot.
Positions, the bounded scan and the reader's rules are those of every row
engine (``ledger.storage.seqpages``); this module says how to list and fetch
rows here: by seq, lengths first (a row over LINE_CAP is never fetched).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ledger.core.bounds import LINE_CAP
from ledger.core.errors import CursorExpired
from ledger.storage.seqpages import RowState, SeqReader

if TYPE_CHECKING:
    from ledger.storage.postgres.workspace import PgWorkspace


class PgRows:
    """``RowSource`` over one connection (one snapshot)."""

    def __init__(self, conn: Any, workspace: str) -> None:
        self.conn = conn
        self.workspace = workspace

    def lengths(self, first: int, stop: int, limit: int) -> list[tuple[int, int]]:
        got = self.conn.execute(
            "SELECT seq, octet_length(raw) FROM tl_rows WHERE workspace = %s AND seq >= %s "
            "AND seq < %s ORDER BY seq LIMIT %s", (self.workspace, first, stop, limit)).fetchall()
        return [(int(s), int(n)) for s, n in got]

    def fetch(self, seqs: list[int]) -> dict[int, bytes]:
        got = self.conn.execute(
            "SELECT seq, raw FROM tl_rows WHERE workspace = %s AND seq = ANY(%s)",
            (self.workspace, seqs), binary=True).fetchall()
        return {s: bytes(raw) for s, raw in got}


class PgReader(SeqReader):
    """Page access to one workspace (``ledger.storage.engine.PageReader``)."""

    def __init__(self, ws: PgWorkspace) -> None:
        self.ws = ws
        self.workspace = ws.workspace
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

    def state(self) -> RowState:
        st = self.ws._head(self.conn)
        if st is None:
            raise CursorExpired("the history is gone; start a new query")
        return st

    def binding(self, st: RowState) -> str:
        return f"pg{st.epoch}"

    def source(self) -> PgRows:
        return PgRows(self.conn, self.workspace)

    def is_boundary(self, seq: int) -> bool:
        got = self.conn.execute(
            "SELECT 1 FROM tl_rows WHERE workspace = %s AND seq = %s AND boundary IS NOT NULL",
            (self.workspace, seq)).fetchone()
        return got is not None

    def boundary_before(self, seq: int) -> int:
        got = self.conn.execute(
            "SELECT max(seq) FROM tl_rows WHERE workspace = %s AND boundary IS NOT NULL "
            "AND seq < %s", (self.workspace, seq)).fetchone()
        return int(got[0]) if got and got[0] is not None else 0

    def row_at(self, seq: int) -> tuple[int, bytes | None] | None:
        got = self.conn.execute(
            "SELECT octet_length(raw), CASE WHEN octet_length(raw) <= %s THEN raw END "
            "FROM tl_rows WHERE workspace = %s AND seq = %s",
            (LINE_CAP, self.workspace, seq), binary=True).fetchone()
        if got is None:
            return None
        n, raw = got
        return int(n), bytes(raw) if raw is not None else None
