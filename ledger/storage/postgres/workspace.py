"""One workspace on PostgreSQL: the state, reads, and the append transaction.

An append is one transaction (``Database.write``):

1. ``SELECT ... FOR UPDATE`` the head row (created on the first write): the
   per-workspace writer lock, held to COMMIT;
2. a caller's batch id already in ``tl_batches`` answers with its seqs;
3. the conditional rules (``check_expectations``);
4. the rows get their seqs (``renumber``) and go in with one multi-row
   INSERT, the batch into ``tl_batches``, the new next seq, window and floor
   into the head row;
5. COMMIT. Nothing before it is visible to anyone; a failure rolls it all
   back (``CommitFailed``); a connection lost during it is ``CommitUncertain``.

Durability: ``full`` and ``normal`` commit as the server is configured
(``synchronous_commit`` on by default: COMMIT returns after the WAL flush);
``off`` sets ``synchronous_commit = off`` for the batch (on Citus on the
worker too), so COMMIT returns before the flush and a server crash may lose
the newest batches -- whole batches, never part of one.

Positions for ``session_history`` are ``(seq, byte offset in the row)``: a
row starts at ``(seq, 0)`` and ends at ``(seq, len + 1)``, so the retrieval
rules written for segment offsets hold unchanged (``reader.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from ledger.core import rules
from ledger.core.batches import AppendResult, PendingBatch, check_expectations, refuse_on_empty
from ledger.core.checks import CheckReport, Loaded, Progress, QuarantineCleaned, RepairReport
from ledger.core.errors import HistoryDamaged, LedgerError, Unavailable, WorkspaceNotFound
from ledger.core.rows import Row, now_ms
from ledger.core.windows import Boundary
from ledger.storage.engine import (
    BackupResult,
    PageUse,
    QuarantineEntry,
    StatReport,
    StoreOptions,
    T,
    WorkspaceHandle,
)
from ledger.storage.forking import RowForks
from ledger.storage.postgres import keys
from ledger.storage.postgres.connect import Database
from ledger.storage.postgres.lineage import PG, batches_sql, rows_sql
from ledger.storage.postgres.vectors import PgVectors
from ledger.storage.primitives import Edit, Replaced
from ledger.storage.rewrites import RowRewrites
from ledger.storage.seqpages import RowState as PgState
from ledger.storage.seqpages import boundary, decode_row

PAGE_ROWS = 1000  # rows per round trip when streaming
WINDOW_TRIES = 20  # reads of the window that may each meet a new boundary

# durability="off": asynchronous commit for this transaction; on Citus the
# setting goes along to the worker that commits the batch (a placeholder
# setting, ignored, on plain PostgreSQL). One round trip.
SYNC_OFF = ("SET LOCAL citus.propagate_set_commands = 'local'; "
            "SET LOCAL synchronous_commit TO off")


def _batch_runs(rows: Iterable[Row]) -> Iterator[list[Row]]:
    """Rows grouped into runs of one batch id, in order."""
    run: list[Row] = []
    for row in rows:
        if run and row.batch.get("id") != run[-1].batch.get("id"):
            yield run
            run = []
        run.append(row)
    if run:
        yield run


def state_of(row: Sequence[Any]) -> PgState:
    next_seq, epoch, window_seq, window_reason, floor_seq = row
    return PgState(next_seq, epoch, boundary(window_seq, window_reason),
                   boundary(floor_seq, "manual"))


HEAD_COLUMNS = "next_seq, epoch, window_seq, window_reason, floor_seq"


decode = decode_row


class PgWorkspace(RowRewrites, RowForks, WorkspaceHandle):
    """One workspace of the PostgreSQL engine (module doc)."""

    def __init__(self, db: Database, store: StoreOptions, workspace: str) -> None:
        super().__init__(store, workspace)
        self.db = db
        self._vectors: PgVectors | None = None
        self._where: tuple[str, str | None] | None = None  # (key, link): keys.py

    # --- where the rows are (keys.py) -------------------------------------------

    @property
    def key(self) -> str:
        """The key this workspace's rows are stored under: its id, except for
        a fork made on Citus (``keys.py``)."""
        return self._resolved()[0]

    @property
    def link(self) -> str | None:
        """How a statement reads the rows this workspace shares with its
        source (``lineage.rows_sql``)."""
        return self._resolved()[1]

    def _resolved(self) -> tuple[str, str | None]:
        if self._where is None:
            if not self.db.citus:
                self._where = (self.workspace, PG)
            else:
                with self.db.read("find the workspace") as conn:
                    self._where = keys.resolve(conn, self.workspace, self.db.where)
        return self._where

    def _stale(self, conn: Any, pointer: bool) -> bool:
        """After a head read under the key found a pointer (``pointer``) or
        no head: resolve the key again on ``conn``; whether it changed (the
        workspace was deleted and made again, as or instead of a fork)."""
        if not self.db.citus or (not pointer and self.key == self.workspace):
            return False
        old = self._where
        self._where = keys.resolve(conn, self.workspace, self.db.where)
        return self._where != old

    def vector_backend(self) -> PgVectors:
        """The semantic channel's vectors (``vectors.py``), kept for the
        calls of this handle."""
        if self._vectors is None:
            self._vectors = PgVectors(self.db, self.key)
        return self._vectors

    # --- state ------------------------------------------------------------------

    def head_in(self, conn: Any, lock: bool = False) -> PgState | None:
        sql = f"SELECT {HEAD_COLUMNS}, alias FROM tl_head WHERE workspace = %s" + (
            " FOR UPDATE" if lock else "")
        while True:
            got = conn.execute(sql, (self.key,)).fetchone()
            pointer = got is not None and got[5] is not None
            if (got is None or pointer) and self._stale(conn, pointer):
                continue  # read the head under the new key
            return state_of(got[:5]) if got is not None and not pointer else None

    def exists(self) -> bool:
        with self.db.read("exists") as conn:
            return self.head_in(conn) is not None

    def require(self) -> None:
        if not self.exists():
            raise WorkspaceNotFound(
                f"workspace {self.workspace!r} has no history in {self.db.where}"
            )

    def snapshot(self) -> PgState:
        with self.db.read("snapshot") as conn:
            st = self.head_in(conn)
        if st is None:
            return PgState(1, 0, None, None)
        return st

    # --- reads ------------------------------------------------------------------

    def rows(self, after_seq: int | None = None) -> Iterator[Row]:
        """Every row after ``after_seq``, in pages of PAGE_ROWS by key; a
        rewrite between two pages (a new epoch) raises HistoryDamaged ("read
        again"), as in the file engine."""
        self.require()
        return self._rows(after_seq or 0)

    def _rows(self, last: int) -> Iterator[Row]:
        epoch: int | None = None
        sql = (
            "SELECT (SELECT epoch FROM tl_head WHERE workspace = %(ws)s), seq, raw FROM "
            + rows_sql(self.link, where="seq > %(last)s", order="seq", limit="%(n)s")
            + " t ORDER BY seq LIMIT %(n)s"
        )
        while True:
            with self.db.read("read rows") as conn:
                page = conn.execute(sql, {"ws": self.key, "last": last,
                                          "n": PAGE_ROWS}, binary=True).fetchall()
            if not page:
                return
            if epoch is None:
                epoch = page[0][0]
            elif page[0][0] != epoch:
                raise HistoryDamaged(
                    f"workspace {self.workspace!r}: a rewrite ran while reading (new epoch); "
                    "read again"
                )
            for _, seq, raw in page:
                yield decode(self.workspace, seq, bytes(raw))
            last = page[-1][1]
            if len(page) < PAGE_ROWS:
                return

    def get(self, seq: int) -> Row | None:
        with self.db.read("get") as conn:
            got = conn.execute(
                f"SELECT raw FROM {rows_sql(self.link, where='seq = %(seq)s')} t",
                {"ws": self.key, "seq": seq}, binary=True).fetchone()
        return decode(self.workspace, seq, bytes(got[0])) if got is not None else None

    def window_rows(self) -> list[Row]:
        """The rows after the newest boundary (``window_state``)."""
        return self.window_state()[0]

    def window_state(self) -> tuple[list[Row], PgState]:
        """The rows after the newest boundary and the head they were read
        under: the head's window seq, then one
        indexed range read from that seq as a constant, which also reads the
        head again in its own snapshot (on Citus both are one task on the
        workspace's worker). Two statements, not one join, because with the
        window seq as a join value the planner cannot estimate the range:
        it guesses a third of the workspace's rows, which at 1 GiB costs a
        JIT compilation on every turn (150-400 ms) and, when the statistics
        predate a workspace or a bulk load, a scan of every row of it
        (bench/RESULTS.md, issue 33). A clear or rollover that commits
        between the two shows as a changed window seq: read again."""
        with self.db.read("read the window") as conn:
            for _ in range(WINDOW_TRIES):
                head = conn.execute("SELECT window_seq, alias FROM tl_head WHERE workspace = %s",
                                    (self.key,)).fetchone()
                if head is None or head[1] is not None:  # none, or a pointer (keys.py)
                    if self._stale(conn, head is not None):
                        continue
                    break
                got = conn.execute(
                    "SELECT h.next_seq, h.epoch, h.window_seq, h.window_reason, h.floor_seq, "
                    "r.seq, r.raw FROM tl_head h LEFT JOIN "
                    + rows_sql(self.link, where="seq > %(w)s")
                    + " r ON true WHERE h.workspace = %(ws)s ORDER BY r.seq",
                    {"ws": self.key, "w": head[0]},
                    binary=True,  # bytea as bytes: no hex to encode or parse
                ).fetchall()
                if got and got[0][2] == head[0]:
                    return ([decode(self.workspace, seq, bytes(raw))
                             for *_, seq, raw in got if seq is not None], state_of(got[0][:5]))
        self.require()  # raises WorkspaceNotFound when it is gone
        raise Unavailable(f"workspace {self.workspace!r}: the window changed {WINDOW_TRIES} "
                          "times while it was read; read it again")

    def pages(self, use: PageUse[T]) -> T:
        from ledger.storage.postgres.reader import PgReader

        return use(PgReader(self))

    # --- append -------------------------------------------------------------------

    def append_batch(self, batch: PendingBatch) -> AppendResult:
        bid = batch.batch_id
        with self.db.write(f"append to workspace {self.workspace!r}", bid) as conn:
            if self.store.durability == "off":  # COMMIT returns before the WAL flush
                conn.execute(SYNC_OFF)
            st = self.head_in(conn, lock=True)
            fresh = st is None  # the empty state: epoch 0 to a reader
            if st is None:
                refuse_on_empty(self.workspace, batch)
                now = now_ms()
                conn.execute(
                    "INSERT INTO tl_head (workspace, next_seq, epoch, created_ms, updated_ms) "
                    "VALUES (%s, 1, %s, %s, %s) ON CONFLICT (workspace) DO NOTHING",
                    (self.key, rules.new_epoch(), now, now),
                )
                st = self.head_in(conn, lock=True)
                assert st is not None
            if batch.caller_id:
                found = conn.execute(
                    "SELECT first_seq, n FROM "
                    + batches_sql(self.link, where="batch_id = %(bid)s") + " b",
                    {"ws": self.key, "bid": bid},
                ).fetchone()
                if found is not None:
                    first, n = found
                    return AppendResult(list(range(first, first + n)), st.epoch,
                                        st.window_seq, bid)
            check_expectations(self.workspace, batch, st.next_seq, st.window_seq,
                               0 if fresh and st.next_seq == 1 else st.epoch)
            stored, lines = batch.encode(st.next_seq, self.store.max_row_bytes)
            bounds = rules.batch_bounds(stored, [(int(r["seq"]), 0) for r in stored])
            window, floor = rules.fold(st.window, st.floor, bounds)
            reasons = {b.seq - st.next_seq: b.reason for b in bounds}
            self._insert(conn, stored, lines, bid, reasons)
            next_seq = st.next_seq + len(lines)
            conn.execute(
                "INSERT INTO tl_batches (workspace, batch_id, first_seq, n) VALUES (%s, %s, %s, "
                "%s) ON CONFLICT (workspace, batch_id) DO NOTHING",
                (self.key, bid, st.next_seq, len(lines)),
            )
            conn.execute(
                "UPDATE tl_head SET next_seq = %s, window_seq = %s, window_reason = %s, "
                "floor_seq = %s, updated_ms = %s WHERE workspace = %s",
                (next_seq, window.seq if window else 0, window.reason if window else None,
                 floor.seq if floor else None, now_ms(), self.key),
            )
        return AppendResult([int(r["seq"]) for r in stored], st.epoch,
                            window.seq if window else 0, bid)

    def _insert(self, conn: Any, stored: list[dict[str, Any]], lines: list[bytes], bid: str,
                reasons: dict[int, str]) -> None:
        values = []
        params: list[Any] = []
        for i, (row, line) in enumerate(zip(stored, lines, strict=True)):
            values.append("(%s, %s, %s, %s, %s)")
            params += [self.key, row["seq"], bid, reasons.get(i),
                       line[:-1] if line.endswith(b"\n") else line]
        conn.execute("INSERT INTO tl_rows (workspace, seq, batch_id, boundary, raw) VALUES "
                     + ", ".join(values), params)

    def load_rows(self, rows: Iterable[Row]) -> Loaded:
        """Write verified rows byte for byte as this new workspace, in one
        transaction (COPY): a failure leaves no partial workspace. The
        boundary projection, batches and head row come from the rows."""
        count = total = 0
        with self.db.write(f"load workspace {self.workspace!r}") as conn:
            if self.head_in(conn, lock=True) is not None:
                raise LedgerError(f"workspace {self.workspace!r} already exists in "
                                  f"{self.db.where}; nothing was written")
            now = now_ms()
            conn.execute(
                "INSERT INTO tl_head (workspace, next_seq, epoch, created_ms, updated_ms) "
                "VALUES (%s, 1, %s, %s, %s)", (self.key, rules.new_epoch(), now, now))
            window: Boundary | None = None
            floor: Boundary | None = None
            batches: list[tuple[str, int, int]] = []
            last = 0
            with conn.cursor().copy("COPY tl_rows (workspace, seq, batch_id, boundary, raw) "
                                    "FROM STDIN") as copy:
                for run in _batch_runs(rows):
                    bounds = rules.batch_bounds([r.data for r in run], [(r.seq, 0) for r in run])
                    window, floor = rules.fold(window, floor, bounds)
                    reasons = {b.seq: b.reason for b in bounds}
                    bid = str(run[0].batch.get("id", ""))
                    if "\x00" in bid:  # appends refuse it now; a 0.2 file history may hold it
                        raise LedgerError(
                            f"workspace {self.workspace!r}: the batch at seq {run[0].seq} has "
                            f"the id {bid!r}, with a NUL, which PostgreSQL text cannot hold "
                            "(no engine accepts such an id since 0.3); it stays readable "
                            "where it is; nothing was written")
                    batches.append((bid, run[0].seq, len(run)))
                    for row in run:
                        copy.write_row((self.key, row.seq, bid, reasons.get(row.seq),
                                        row.line))
                        count += 1
                        total += len(row.line) + 1
                        last = row.seq
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO tl_batches (workspace, batch_id, first_seq, n) VALUES "
                    "(%s, %s, %s, %s) ON CONFLICT (workspace, batch_id) DO NOTHING",
                    [(self.key, b, first, n) for b, first, n in batches])
            conn.execute(
                "UPDATE tl_head SET next_seq = %s, window_seq = %s, window_reason = %s, "
                "floor_seq = %s WHERE workspace = %s",
                (last + 1, window.seq if window else 0, window.reason if window else None,
                 floor.seq if floor else None, self.key))
        return Loaded(count, total)

    def clean_quarantine(self, older_than_s: float) -> QuarantineCleaned:
        """Remove quarantine entries older than ``older_than_s`` seconds."""
        cutoff = now_ms() - int(older_than_s * 1000)
        with self.db.write(f"clean the quarantine of {self.workspace!r}") as conn:
            got = conn.execute(
                "WITH gone AS (DELETE FROM tl_quarantine WHERE workspace = %s AND ts_ms < %s "
                "RETURNING raw) SELECT count(*), coalesce(sum(octet_length(raw)), 0) FROM gone",
                (self.key, cutoff)).fetchone()
        return QuarantineCleaned(int(got[0]), int(got[1]))

    def list_quarantine(self) -> list[QuarantineEntry]:
        with self.db.read("list the quarantine") as conn:
            if self.head_in(conn) is None:
                raise WorkspaceNotFound(
                    f"workspace {self.workspace!r} has no history in {self.db.where}")
            got = conn.execute(
                "SELECT id, ts_ms, reason, octet_length(raw), seq FROM tl_quarantine WHERE "
                "workspace = %s ORDER BY id", (self.key,)).fetchall()
        return [QuarantineEntry(f"tl_quarantine:{i}", int(ts), reason, int(n), seq)
                for i, ts, reason, n, seq in got]

    def put_quarantine(self, data: bytes, *, source: str, offset: int, reason: str) -> str:
        """Put bytes that never entered the log aside (an import's unreadable or
        refused records); returns the entry name. The same bytes from the same
        source and offset are stored once (an import run again adds nothing)."""
        why = f"{source} offset {offset}: {reason}"
        with self.db.write(f"quarantine bytes of {self.workspace!r}") as conn:
            if self.head_in(conn, lock=True) is None:
                raise WorkspaceNotFound(
                    f"workspace {self.workspace!r} has no history in {self.db.where}")
            got = conn.execute(
                "SELECT id FROM tl_quarantine WHERE workspace = %s AND reason = %s AND raw = %s",
                (self.key, why, data)).fetchone()
            if got is None:
                got = conn.execute(
                    "INSERT INTO tl_quarantine (workspace, ts_ms, seq, reason, raw) VALUES "
                    "(%s, %s, NULL, %s, %s) RETURNING id",
                    (self.key, now_ms(), why, data)).fetchone()
        return f"tl_quarantine:{got[0]}"

    # --- verify and repair (verify.py) ----------------------------------------------

    def verify(self, progress: Progress | None = None) -> CheckReport:
        from ledger.storage.postgres.verify import check

        return check(self, progress)

    def repair(self, policy: str = "salvage", dry_run: bool = False,
               progress: Progress | None = None) -> RepairReport:
        from ledger.storage.postgres.verify import repair

        return repair(self, policy, dry_run, progress)

    # --- the primitives of the rewrites (ledger.storage.rewrites), backup, stat ------

    def head(self) -> PgState:
        with self.db.read("read the head") as conn:
            st = self.head_in(conn)
        if st is None:
            raise WorkspaceNotFound(
                f"workspace {self.workspace!r} has no history in {self.db.where}")
        return st

    def read(self, first: int, last: int) -> list[Row]:
        with self.db.read("read rows") as conn:
            got = conn.execute(
                "SELECT seq, raw FROM "
                + rows_sql(self.link, where="seq BETWEEN %(first)s AND %(last)s")
                + " t ORDER BY seq", {"ws": self.key, "first": first, "last": last},
                binary=True).fetchall()
        return [decode(self.workspace, seq, bytes(raw)) for seq, raw in got]

    def replace(self, expect: PgState, edits: Sequence[Edit],
                put_aside: str | None, hold: int = 0) -> Replaced:
        from ledger.storage.postgres.rewrites import replace

        return replace(self, expect, edits, put_aside, hold)

    # --- the primitives of the fork (ledger.storage.forking; fork.py) ------------------

    @property
    def max_row_bytes(self) -> int:
        return self.store.max_row_bytes

    def open_sibling(self, workspace: str) -> PgWorkspace:
        return type(self)(self.db, self.store, workspace)

    def copy_prefix(self, target: str, expect: PgState, at: int, event: Row) -> None:
        from ledger.storage.postgres.fork import copy_prefix

        copy_prefix(self, target, expect, at, event)

    def origin_seqs(self) -> list[int]:
        from ledger.storage.postgres.fork import origin_seqs

        return origin_seqs(self)

    def backup(self, dest: str) -> BackupResult:
        from ledger.storage.postgres.rewrites import backup

        return backup(self, dest)

    def stat(self) -> StatReport:
        from ledger.storage.postgres.rewrites import stat

        return stat(self)
