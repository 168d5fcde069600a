"""The rewrite primitive on PostgreSQL (``replace``, ``ledger.storage.
primitives``): one transaction under the head row's lock that checks the
head against the rule's, takes out each edit's seq range (to
``tl_quarantine``, or for good), puts the edit's rows in, forgets the batch
ids left without rows, and writes the settled head with a new epoch (so every
open cursor expires). The rules over it -- reject, truncate, purge,
rebaseline, and repair -- are ``ledger.storage.rewrites`` and
``ledger.storage.rowspace``, shared with the memory engine.

Plus ``backup`` (a file-engine directory: the same bytes, readable anywhere)
and ``stat``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ledger.core import rules
from ledger.core.errors import Conflict, WorkspaceNotFound
from ledger.core.rows import now_ms
from ledger.storage.copydir import refuse_existing, write_workspace_dir
from ledger.storage.engine import BackupResult, StatReport
from ledger.storage.postgres import lineage
from ledger.storage.postgres.vectors import TABLES as VECTOR_TABLES
from ledger.storage.primitives import Edit, Replaced, holds, settle
from ledger.storage.seqpages import RowState as PgState
from ledger.storage.seqpages import boundary

if TYPE_CHECKING:
    from ledger.storage.postgres.handle import PgHandle


def quarantine(conn: Any, workspace: str, condition: str, params: dict[str, Any],
               reason: str) -> tuple[int, int, list[str] | None]:
    """Move the rows of ``workspace`` that match ``condition`` (SQL over
    ``tl_rows`` with named parameters) to ``tl_quarantine``; returns how many,
    their bytes (with newlines) and their batch ids. Two statements, each on
    the workspace's shard alone: the ids are the workspace's largest plus one,
    given under the head row's lock the caller holds (schema.py says why not
    the sequence)."""
    args = {**params, "ws": workspace, "ts": now_ms(), "reason": reason}
    conn.execute(
        "INSERT INTO tl_quarantine (workspace, id, ts_ms, seq, reason, raw) "
        "SELECT workspace, (SELECT coalesce(max(id), 0) FROM tl_quarantine WHERE "
        "workspace = %(ws)s) + row_number() OVER (ORDER BY seq), %(ts)s, seq, %(reason)s, raw "
        f"FROM tl_rows WHERE workspace = %(ws)s AND {condition}", args)
    got = conn.execute(
        f"WITH gone AS (DELETE FROM tl_rows WHERE workspace = %(ws)s AND {condition} "
        "RETURNING batch_id, raw) SELECT count(*), coalesce(sum(octet_length(raw) + 1), 0), "
        "array_agg(DISTINCT batch_id) FROM gone", args).fetchone()
    return int(got[0]), int(got[1]), got[2]


def replace(ws: PgHandle, expect: PgState, edits: Sequence[Edit],
            put_aside: str | None, hold: int = 0) -> Replaced:
    """``replace`` (module doc); Conflict when the head is not ``expect``."""
    with ws.db.write(f"rewrite workspace {ws.workspace!r}") as conn:
        st = ws.head_in(conn, lock=True)
        if st is None:
            raise WorkspaceNotFound(f"workspace {ws.workspace!r} has no history in "
                                    f"{ws.db.where}")
        if not holds(st, expect):
            raise Conflict(f"workspace {ws.workspace!r} changed; read it again")
        link, key, citus = ws.link, ws.key, ws.db.citus
        if edits:  # shared rows never change under a reference (lineage.py)
            first = min(e.first for e in edits)
            lineage.materialise_forks(conn, key, first, citus)
            if lineage.materialise_own(conn, key, first, citus) and citus:
                link = None  # the prefix is its own now; the reference is gone
        removed = nbytes = 0
        gone_batches: set[str] = set()
        kept_batches: set[str] = set()
        for e in edits:
            back = [p.row.seq for p in e.rows]  # taken out and put back: not put aside
            if back:
                conn.execute("DELETE FROM tl_rows WHERE workspace = %s AND seq = ANY(%s)",
                             (key, back))
            cond, args = "seq BETWEEN %(first)s AND %(last)s", {"first": e.first, "last": e.last}
            if put_aside is not None:
                n, b, bids = quarantine(conn, key, cond, args, put_aside)
            else:
                n, b, bids = conn.execute(
                    f"WITH gone AS (DELETE FROM tl_rows WHERE workspace = %(ws)s AND {cond} "
                    "RETURNING batch_id, raw) SELECT count(*), coalesce(sum(octet_length(raw) "
                    "+ 1), 0), array_agg(DISTINCT batch_id) FROM gone",
                    {**args, "ws": key}).fetchone()
            removed, nbytes = removed + int(n), nbytes + int(b)
            gone_batches.update(x for x in bids or () if x is not None)
            if e.rows:
                bid = [str(p.row.batch.get("id", "")) for p in e.rows]
                kept_batches.update(bid)
                with conn.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO tl_rows (workspace, seq, batch_id, boundary, raw) VALUES "
                        "(%s, %s, %s, %s, %s)",
                        [(key, p.row.seq, b_id, p.boundary, p.row.line)
                         for p, b_id in zip(e.rows, bid, strict=True)])
        # No vector of a row this rewrite removes outlives it (vectors.py).
        for table in VECTOR_TABLES:
            conn.execute(f"DELETE FROM {table} WHERE workspace = %s", (key,))
        forget = sorted(gone_batches - kept_batches)
        if forget:
            conn.execute("DELETE FROM tl_batches WHERE workspace = %s AND batch_id = ANY(%s)",
                         (key, forget))
        epoch = st.epoch
        if removed or any(e.rows for e in edits) or not edits:
            here = {"ws": key}
            last = conn.execute(
                "SELECT seq, boundary FROM " + lineage.rows_sql(
                    link, where="boundary IS NOT NULL", order="seq DESC", limit="1")
                + " t ORDER BY seq DESC LIMIT 1", here).fetchone()
            manual = conn.execute(
                "SELECT seq FROM " + lineage.rows_sql(
                    link, where="boundary = 'manual'", order="seq DESC", limit="1")
                + " t ORDER BY seq DESC LIMIT 1", here).fetchone()
            window, floor = settle(st, boundary(*last) if last else None,
                                   boundary(manual[0], "manual") if manual else None, hold,
                                   edits)
            top = conn.execute(
                "SELECT max(seq) FROM " + lineage.rows_sql(link, order="seq DESC", limit="1")
                + " t", here).fetchone()[0]
            epoch = rules.new_epoch(st.epoch)
            conn.execute(
                "UPDATE tl_head SET epoch = %s, window_seq = %s, window_reason = %s, "
                "floor_seq = %s, next_seq = %s, updated_ms = %s WHERE workspace = %s",
                (epoch, window.seq if window else 0, window.reason if window else None,
                 floor.seq if floor else None, max(st.next_seq, (top or 0) + 1), now_ms(),
                 key))
    return Replaced(epoch, removed, nbytes,
                    [f"tl_quarantine ({removed} rows)"] if put_aside is not None and removed
                    else [])


def backup(ws: PgHandle, dest: str) -> BackupResult:
    """A copy of this workspace as a file-engine workspace directory ``dest``
    (new): FORMAT and one segment holding every row's bytes, read from one
    snapshot (REPEATABLE READ). Copy it under a file root as ROOT/WS, or
    ``tledger migrate`` it back to a database."""
    ws.require()
    refuse_existing(dest)
    with ws.db.read("backup") as conn, conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        cur = conn.cursor(name="tl_backup")  # server-side: flat memory
        cur.execute(f"SELECT raw FROM {lineage.rows_sql(ws.link)} t ORDER BY seq",
                    {"ws": ws.key})
        total = write_workspace_dir(dest, (bytes(raw) for (raw,) in cur))
    return BackupResult(ws.workspace, dest, 2, total)


def stat(ws: PgHandle) -> StatReport:
    ws.require()
    with ws.db.read("stat") as conn:
        st = ws.head_in(conn)
        counts = conn.execute(
            "SELECT count(*), coalesce(sum(octet_length(raw) + 1), 0) FROM "
            f"{lineage.rows_sql(ws.link)} t", {"ws": ws.key}).fetchone()
        q = conn.execute("SELECT coalesce(sum(octet_length(raw)), 0) FROM tl_quarantine "
                         "WHERE workspace = %s", (ws.key,)).fetchone()
        bounds = conn.execute(  # by the partial index on boundary rows
            "SELECT count(*) FROM "
            + lineage.rows_sql(ws.link, where="boundary IS NOT NULL") + " t",
            {"ws": ws.key}).fetchone()
    assert st is not None
    return st.stat(ws.workspace, engine="postgresql", database=ws.db.where,
                   boundaries=int(bounds[0]), rows=counts[0], nbytes=int(counts[1]),
                   quarantine_bytes=int(q[0]))
