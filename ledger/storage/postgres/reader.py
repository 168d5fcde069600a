"""The PostgreSQL engine's page reader for ``session_history`` (DESIGN.md 8).

Every call runs in one REPEATABLE READ, read-only transaction (``locked()``),
so the state it starts from and every row it reads come from one snapshot.
Positions, the bounded scan and the reader's rules are those of every row
engine (``ledger.storage.seqpages``); this module says how to list and fetch
rows here: by seq, lengths first (a row over LINE_CAP is never fetched).

Ranked search (``ranked``) answers from the recall index (``recall.py``):
``prepare_ranked`` brings it up to date before the call's snapshot is taken
(its own transactions), and ``ranked`` reads the candidates in the snapshot
when the index covers it (else it catches up again and reads them from a
fresh snapshot of the index). The rows the tool returns are read back in the
call's snapshot (``locate_at``), in batches of at most PREFETCH candidates and
PREFETCH_BYTES of rows, with their windows, in one statement each.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ledger.core import semantic
from ledger.core.bounds import LINE_CAP, SCAN_BYTES, Budget, SkipSink
from ledger.core.cursors import Position
from ledger.core.errors import CursorExpired, NotFound, Unavailable
from ledger.core.ranking import Query
from ledger.storage import vectors
from ledger.storage.engine import Candidate, Located
from ledger.storage.postgres.lineage import rows_sql
from ledger.storage.postgres.recall import PgRecall
from ledger.storage.postgres.workspace import HEAD_COLUMNS, state_of
from ledger.storage.seqpages import RowState, SeqReader, found

if TYPE_CHECKING:
    from ledger.storage.postgres.handle import PgHandle

PREFETCH = 16  # ranked candidates read back per round trip, at most
PREFETCH_BYTES = SCAN_BYTES  # and stored bytes per round trip (one row more when larger)


class PgRows:
    """``RowSource`` over one connection (one snapshot)."""

    def __init__(self, conn: Any, workspace: str, link: str | None) -> None:
        self.conn = conn
        self.workspace = workspace
        self.link = link  # forks read their source's rows (lineage.py)

    def lengths(self, first: int, stop: int, limit: int) -> list[tuple[int, int]]:
        got = self.conn.execute(
            "SELECT seq, octet_length(raw) FROM "
            + rows_sql(self.link, where="seq >= %(first)s AND seq < %(stop)s", order="seq",
                       limit="%(n)s") + " t ORDER BY seq LIMIT %(n)s",
            {"ws": self.workspace, "first": first, "stop": stop, "n": limit}).fetchall()
        return [(int(s), int(n)) for s, n in got]

    def fetch(self, seqs: list[int]) -> dict[int, bytes]:
        got = self.conn.execute(
            f"SELECT seq, raw FROM {rows_sql(self.link, where='seq = ANY(%(seqs)s)')} t",
            {"ws": self.workspace, "seqs": seqs}, binary=True).fetchall()
        return {s: bytes(raw) for s, raw in got}


class PgReader(SeqReader):
    """PostgreSQL's ``PageReader[RowState]`` for one workspace (module doc)."""

    def __init__(self, ws: PgHandle) -> None:
        self.ws = ws
        self.workspace = ws.workspace
        self.conn: Any = None
        self.recall = PgRecall(ws.db, ws.workspace, handle=ws)
        self._order: list[int] = []  # the ranked candidates of this call, best first
        self._lexical: list[Candidate] = []  # the lexical ones (``similar`` fuses them)
        self._fetched: dict[int, tuple[int, bytes | None, int]] = {}  # seq -> (len, raw, window)
        self._state: RowState | None = None  # the head in this call's snapshot, once read
        # What ``exists`` read for ``prepare_ranked``: the head's epoch, next
        # seq and floor with the index's mark (``PgRecall.current``'s form).
        self._pre: tuple[int, int, int, Any] | None = None

    @property
    def key(self) -> str:
        """The key the rows are stored under (``keys.py``)."""
        return self.ws.key

    @property
    def link(self) -> str | None:
        return self.ws.link

    # -- ranked search (module doc) ---------------------------------------------------

    def prepare_ranked(self) -> None:
        """Bring the index up to the head, from what ``exists`` read just
        before in this call when it did (no statement when the index covers
        it: ``ranked`` checks again in the call's snapshot)."""
        pre, self._pre = self._pre, None
        self.recall.catch_up(pre)

    def ranked(
        self, st: RowState, query: Query, after: int, high: int, window: int | None
    ) -> list[Candidate]:
        self._order, self._fetched = [], {}
        mark, terms = self.recall.lookup(self.conn, query)
        got: list[Candidate] | None = None
        floor = st.floor.seq if st.floor is not None else 0
        if mark is not None and mark.covers(st.epoch, st.next_seq, floor):
            got = self.recall.candidates(self.conn, mark, query, after, high, window, terms)
        else:  # appends (or a rewrite) since prepare_ranked: catch up again
            for _ in range(4):
                self.recall.catch_up()
                with self.ws.db.read("ranked search") as conn, conn.transaction():
                    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                    mark, terms = self.recall.lookup(conn, query)
                    if mark is not None and mark.epoch == st.epoch and \
                            mark.seen >= st.next_seq and mark.floor == floor:
                        got = self.recall.candidates(conn, mark, query, after, high, window,
                                                     terms)
                        break
        if got is None:
            raise Unavailable("the history kept changing during the ranked search; retry")
        self._order = [c[0] for c in got]
        self._lexical = got
        return got

    def read_order(self, seqs: list[int]) -> None:
        self._order = list(seqs)

    def similar(
        self, st: RowState, text: str, after: int, high: int, window: int | None
    ) -> list[Candidate]:
        """From the vectors in ``tl_vec`` (``vectors.py``), caught up with the
        recall index as a snapshot after ``ranked`` shows it; the rows read
        back follow the fused order."""
        embedder = self.ws.store.embedder
        if embedder is None:
            return []
        floor = st.floor.seq if st.floor is not None else 0
        with self.ws.db.read("ranked search") as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            mark = self.recall.mark(conn)
            if mark is None or (mark.epoch, mark.floor) != (st.epoch, floor):
                raise Unavailable("the history changed during the ranked search; retry")

            def docs_after(upto: int) -> list[vectors.Doc]:
                got = conn.execute("SELECT seq, win FROM tl_recall_docs WHERE workspace = %s "
                                   "AND seq > %s ORDER BY seq", (self.key, upto))
                return [(int(s), int(w), (int(s), 0)) for s, w in got.fetchall()]

            def read(seq: int) -> bytes | None:
                got = conn.execute(
                    "SELECT CASE WHEN octet_length(raw) <= %(cap)s THEN raw END FROM "
                    + rows_sql(self.link, where="seq = %(seq)s") + " t",
                    {"cap": LINE_CAP, "ws": self.key, "seq": seq},
                    binary=True).fetchone()
                return bytes(got[0]) if got is not None and got[0] is not None else None

            backend = self.ws.vector_backend()
            backend.conn = conn  # the state and new records read in this snapshot
            try:
                vs = vectors.ready(backend, embedder, st.epoch, floor, mark.upto,
                                   docs_after, vectors.texts_of_rows(read))
            finally:
                backend.conn = None
        found = vs.similar(vectors.query_vector(embedder, text), after, high, window)
        self._order = [c[0] for c in semantic.fuse(self._lexical, found,
                                                      semantic.weight(embedder))]
        return found

    def locate_at(
        self, st: RowState, seq: int, hint: tuple[int, int], result: SkipSink, budget: Budget
    ) -> Located:
        """Read back with the next candidates after it (module doc); every
        byte fetched counts against the call's ``budget``."""
        if seq not in self._fetched:
            self._prefetch(seq, budget)
        got = self._fetched.get(seq)
        if got is None:
            raise NotFound(f"no retrievable row {seq}")
        n, raw, _ = got
        if raw is None and n <= LINE_CAP:  # past the byte budget of its batch
            if budget.bytes_read + n > SCAN_BYTES:
                return Located(resume=Position(seq, 0))
            self._prefetch(seq, budget, fresh=True)
            n, raw, _ = self._fetched[seq]
        budget.rows += 1
        return found(seq, n, raw, result)

    def _prefetch(self, seq: int, budget: Budget, fresh: bool = False) -> None:
        try:
            at = self._order.index(seq)
        except ValueError:
            at = -1
        seqs = [seq] if at < 0 or fresh else self._order[at : at + PREFETCH]
        if not fresh:
            seqs = [s for s in seqs if s not in self._fetched or s == seq]
        room = max(min(PREFETCH_BYTES, SCAN_BYTES - budget.bytes_read), 0)
        got = self.conn.execute(
            "SELECT seq, n, CASE WHEN n <= %(cap)s AND run <= %(budget)s THEN raw END, win "
            "FROM (SELECT r.seq, octet_length(r.raw) AS n, r.raw, sum(CASE WHEN "
            "octet_length(r.raw) <= %(cap)s THEN octet_length(r.raw) ELSE 0 END) OVER "
            "(ORDER BY array_position(%(seqs)s::bigint[], r.seq)) AS run, "
            "(SELECT max(b.seq) FROM "
            + rows_sql(self.link, where="boundary IS NOT NULL AND seq < r.seq",
                       order="seq DESC", limit="1")
            + " b) AS win FROM "
            + rows_sql(self.link, where="seq = ANY(%(seqs)s::bigint[])") + " r) x",
            {"cap": LINE_CAP, "budget": room, "seqs": seqs, "ws": self.ws.key},
            binary=True).fetchall()
        for s, n, raw, win in got:
            if raw is not None:
                budget.bytes_read += len(raw)
            self._fetched[int(s)] = (int(n), bytes(raw) if raw is not None else None,
                                     int(win or 0))

    def exists(self) -> bool:
        """Whether the workspace has a history: its head read with the recall
        index's mark in one statement, kept for ``prepare_ranked`` (a ranked
        call then takes no second connection to learn that the index is
        current). A head not found under the key, or a pointer, is resolved
        as ``PgWorkspace.head_in`` does it."""
        self._pre = None
        with self.ws.db.read("exists") as conn:
            got = self.recall.head_and_mark(conn)
        if got is None or got[0][5] is not None:
            return self.ws.exists()
        head, mark = got
        st = state_of(head[:5])
        self._pre = (st.epoch, st.next_seq, st.floor.seq if st.floor is not None else 0, mark)
        return True

    @contextmanager
    def locked(self) -> Iterator[None]:
        """The call's snapshot: a repeatable read, read-only transaction,
        begun in the same round trip as the head's read (the state ``state``
        gives; a head not found or a pointer is read again there)."""
        with self.ws.db.read("session_history") as conn:
            with conn.pipeline():
                conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                cur = conn.execute(f"SELECT {HEAD_COLUMNS}, alias FROM tl_head "
                                   "WHERE workspace = %s", (self.key,))
            got = cur.fetchone()
            if got is not None and got[5] is None:
                self._state = state_of(got[:5])
            self.conn = conn
            try:
                yield
            except BaseException:
                self._end(conn, "ROLLBACK")
                raise
            else:
                self._end(conn, "COMMIT")
            finally:
                self.conn = None
                self._state = None
                self._order, self._fetched = [], {}  # of this call's snapshot only

    @staticmethod
    def _end(conn: Any, how: str) -> None:
        """End the call's transaction (a broken connection has none left)."""
        if not conn.broken:
            conn.execute(how)

    def state(self) -> RowState:
        """The head in the call's snapshot (``locked``: repeatable read, read
        only), read once: the check after a page reads the same row again."""
        if self._state is not None:
            return self._state
        st = self.ws.head_in(self.conn)
        if st is None:
            raise CursorExpired("the history is gone; start a new query")
        self._state = st
        return st

    def binding(self, st: RowState) -> str:
        return f"pg{st.epoch}"

    def source(self) -> PgRows:
        return PgRows(self.conn, self.key, self.link)

    def is_boundary(self, seq: int) -> bool:
        got = self.conn.execute(
            "SELECT 1 FROM "
            + rows_sql(self.link, where="seq = %(seq)s AND boundary IS NOT NULL") + " t",
            {"ws": self.key, "seq": seq}).fetchone()
        return got is not None

    def boundary_before(self, seq: int) -> int:
        fetched = self._fetched.get(seq)
        if fetched is not None and fetched[1] is not None:
            return fetched[2]  # read with the row (locate_at)
        got = self.conn.execute(
            "SELECT max(seq) FROM "
            + rows_sql(self.link, where="boundary IS NOT NULL AND seq < %(seq)s",
                       order="seq DESC", limit="1") + " t",
            {"ws": self.key, "seq": seq}).fetchone()
        return int(got[0]) if got and got[0] is not None else 0

    def row_at(self, seq: int) -> tuple[int, bytes | None] | None:
        got = self.conn.execute(
            "SELECT octet_length(raw), CASE WHEN octet_length(raw) <= %(cap)s THEN raw END "
            f"FROM {rows_sql(self.link, where='seq = %(seq)s')} t",
            {"cap": LINE_CAP, "ws": self.key, "seq": seq}, binary=True).fetchone()
        if got is None:
            return None
        n, raw = got
        return int(n), bytes(raw) if raw is not None else None
