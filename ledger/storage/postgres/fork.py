"""The fork primitives on PostgreSQL and Citus (``ledger.storage.forking``):
``copy_prefix`` -- one transaction under the source's head row lock that
makes the fork's rows up to the fork point a reference to its source's (one
``tl_lineage`` row, plus the copied tail of a fork of a fork: ``lineage.py``),
on Citus under a storage key in its source's shard with a pointer at its id
(``keys.py``), then adds the origin event and writes the fork's head -- and
``origin_seqs`` (the fork event's batch, by its id).

A purge, truncate, repair or delete of either side never changes a byte the
other reads: shared rows are copied to the side that keeps them before any
rewrite reaches them (``lineage.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ledger.core import rules
from ledger.core.errors import Conflict, WorkspaceNotFound
from ledger.core.forks import ForkRefused
from ledger.core.rows import Row, now_ms
from ledger.storage.forking import FORK_BATCH_PREFIX
from ledger.storage.postgres import keys, lineage
from ledger.storage.primitives import holds
from ledger.storage.seqpages import RowState

if TYPE_CHECKING:
    from ledger.storage.postgres.handle import PgHandle


def copy_prefix(ws: PgHandle, target: str, expect: RowState, at: int, event: Row) -> None:
    src = ws.workspace
    citus = ws.db.citus
    with ws.db.write(f"fork workspace {src!r} into {target!r}") as conn:
        st = ws.head_in(conn, lock=True)
        if st is None:
            raise WorkspaceNotFound(f"workspace {src!r} has no history in {ws.db.where}")
        if not holds(st, expect):
            raise Conflict(f"workspace {src!r} changed; read it again")
        key, link = ws.key, ws.link  # resolved by the head read (keys.py)
        args = {"ws": key, "at": at}
        last = conn.execute(
            "SELECT seq, boundary FROM " + lineage.rows_sql(
                link, where="boundary IS NOT NULL AND seq <= %(at)s", order="seq DESC",
                limit="1") + " t ORDER BY seq DESC LIMIT 1", args).fetchone()
        manual = conn.execute(
            "SELECT seq FROM " + lineage.rows_sql(
                link, where="boundary = 'manual' AND seq <= %(at)s", order="seq DESC",
                limit="1") + " t ORDER BY seq DESC LIMIT 1", args).fetchone()
        now = now_ms()
        refused = ForkRefused(f"workspace {target!r} already exists in {ws.db.where}; a fork "
                              "needs a new workspace id; nothing was forked")
        tkey = target
        if citus:  # stored under a key in the source's shard; the id points at it
            tkey = keys.choose(conn, target, key, ws.db.where)
            if conn.execute(
                    "INSERT INTO tl_head (workspace, next_seq, epoch, created_ms, updated_ms, "
                    "alias) VALUES (%s, 0, 0, %s, %s, %s) ON CONFLICT (workspace) DO NOTHING "
                    "RETURNING workspace", (target, now, now, tkey)).fetchone() is None:
                raise refused
        made = conn.execute(
            "INSERT INTO tl_head (workspace, next_seq, epoch, window_seq, window_reason, "
            "floor_seq, created_ms, updated_ms) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (workspace) DO NOTHING RETURNING workspace",
            (tkey, event.seq + 1, rules.new_epoch(), last[0] if last else 0,
             last[1] if last else None, manual[0] if manual else None, now, now)).fetchone()
        if made is None:
            raise refused
        _refer(conn, key, tkey, at, citus)
        bid = str(event.batch.get("id", ""))
        conn.execute("INSERT INTO tl_rows (workspace, seq, batch_id, boundary, raw) VALUES "
                     "(%s, %s, %s, NULL, %s)", (tkey, event.seq, bid, event.line))
        conn.execute("INSERT INTO tl_batches (workspace, batch_id, first_seq, n) VALUES "
                     "(%s, %s, %s, 1)", (tkey, bid, event.seq))


def _refer(conn: Any, src: str, target: str, at: int, citus: bool) -> None:
    """Make ``target``'s rows up to ``at`` a reference (``lineage.py``): to
    ``src``'s own rows, or, when ``src`` is itself a fork, to its source's up
    to its reference and a copy of ``src``'s own rows after that (its tail).
    (Storage keys: ``keys.py``.) The caller holds ``src``'s head row lock;
    the head row of a further source is locked here (its rewrites
    materialise under it). On Citus the reference is indexed by its source
    too (``tl_forks``)."""
    ref = lineage.reference_of(conn, src)
    while ref is not None:
        conn.execute("SELECT 1 FROM tl_head WHERE workspace = %s FOR UPDATE", (ref[0],))
        again = lineage.reference_of(conn, src)  # its rewrite may have just materialised it
        if again == ref:
            break
        ref = again
    if ref is None:
        source, upto = src, at
    else:
        source, upto = ref[0], min(ref[1], at)
        if at > ref[1]:  # the source fork's own rows between its reference and ``at``
            lineage.copy_rows(conn, src, target, ref[1] + 1, at)
    conn.execute(
        "INSERT INTO tl_lineage (workspace, source, upto) VALUES (%s, %s, %s) ON CONFLICT "
        "(workspace) DO UPDATE SET source = EXCLUDED.source, upto = EXCLUDED.upto",
        (target, source, upto))
    if citus:
        conn.execute("INSERT INTO tl_forks (workspace, fork, upto) VALUES (%s, %s, %s)",
                     (source, target, upto))


def origin_seqs(ws: PgHandle) -> list[int]:
    with ws.db.read("find the fork event") as conn:
        got = conn.execute(
            "SELECT first_seq FROM " + lineage.batches_sql(
                ws.link, where="n = 1 AND left(batch_id, %(n)s) = %(prefix)s")
            + " b ORDER BY first_seq",
            {"ws": ws.key, "n": len(FORK_BATCH_PREFIX),
             "prefix": FORK_BATCH_PREFIX}).fetchall()
    return [int(seq) for (seq,) in got]
