"""The fork primitives on PostgreSQL and Citus (``ledger.storage.forking``):
``copy_prefix`` -- one transaction under the source's head row lock that
makes the fork's rows up to the fork point a reference to its source's (one
``tl_lineage`` row, plus the copied tail of a fork of a fork: ``lineage.py``)
on plain PostgreSQL, or copies them server-side (``INSERT ... SELECT``: no
row travels to the client) on Citus, then adds the origin event and writes
the fork's head -- and ``origin_seqs`` (the fork event's batch, by its id).

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
from ledger.storage.postgres import lineage
from ledger.storage.primitives import holds
from ledger.storage.seqpages import RowState

if TYPE_CHECKING:
    from ledger.storage.postgres.handle import PgHandle


def copy_prefix(ws: PgHandle, target: str, expect: RowState, at: int, event: Row) -> None:
    src = ws.workspace
    shared = ws.db.shared
    with ws.db.write(f"fork workspace {src!r} into {target!r}") as conn:
        st = ws.head_in(conn, lock=True)
        if st is None:
            raise WorkspaceNotFound(f"workspace {src!r} has no history in {ws.db.where}")
        if not holds(st, expect):
            raise Conflict(f"workspace {src!r} changed; read it again")
        args = {"ws": src, "at": at}
        last = conn.execute(
            "SELECT seq, boundary FROM " + lineage.rows_sql(
                shared, where="boundary IS NOT NULL AND seq <= %(at)s", order="seq DESC",
                limit="1") + " t ORDER BY seq DESC LIMIT 1", args).fetchone()
        manual = conn.execute(
            "SELECT seq FROM " + lineage.rows_sql(
                shared, where="boundary = 'manual' AND seq <= %(at)s", order="seq DESC",
                limit="1") + " t ORDER BY seq DESC LIMIT 1", args).fetchone()
        now = now_ms()
        made = conn.execute(
            "INSERT INTO tl_head (workspace, next_seq, epoch, window_seq, window_reason, "
            "floor_seq, created_ms, updated_ms) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (workspace) DO NOTHING RETURNING workspace",
            (target, event.seq + 1, rules.new_epoch(), last[0] if last else 0,
             last[1] if last else None, manual[0] if manual else None, now, now)).fetchone()
        if made is None:
            raise ForkRefused(f"workspace {target!r} already exists in {ws.db.where}; a fork "
                              "needs a new workspace id; nothing was forked")
        if shared:
            _refer(conn, src, target, at)
        else:  # Citus: the prefix goes into the fork's own shard group (lineage.py)
            lineage.copy_rows(conn, src, target, -(1 << 62), at)
        bid = str(event.batch.get("id", ""))
        conn.execute("INSERT INTO tl_rows (workspace, seq, batch_id, boundary, raw) VALUES "
                     "(%s, %s, %s, NULL, %s)", (target, event.seq, bid, event.line))
        conn.execute("INSERT INTO tl_batches (workspace, batch_id, first_seq, n) VALUES "
                     "(%s, %s, %s, 1)", (target, bid, event.seq))


def _refer(conn: Any, src: str, target: str, at: int) -> None:
    """Make ``target``'s rows up to ``at`` a reference (``lineage.py``): to
    ``src``'s own rows, or, when ``src`` is itself a fork, to its source's up
    to its reference and a copy of ``src``'s own rows after that (its tail).
    The caller holds ``src``'s head row lock; the head row of a further
    source is locked here (its rewrites materialise under it)."""
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


def origin_seqs(ws: PgHandle) -> list[int]:
    with ws.db.read("find the fork event") as conn:
        got = conn.execute(
            "SELECT first_seq FROM " + lineage.batches_sql(
                ws.db.shared, where="n = 1 AND left(batch_id, %(n)s) = %(prefix)s")
            + " b ORDER BY first_seq",
            {"ws": ws.workspace, "n": len(FORK_BATCH_PREFIX),
             "prefix": FORK_BATCH_PREFIX}).fetchall()
    return [int(seq) for (seq,) in got]
