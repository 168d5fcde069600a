"""The fork primitives on PostgreSQL and Citus (``ledger.storage.forking``):
``copy_prefix`` -- one transaction under the source's head row lock that
copies the rows and batches up to the fork point server-side (``INSERT ...
SELECT``: no row travels to the client), adds the origin event and writes
the fork's head -- and ``origin_seqs`` (the fork event's batch, by its id).

A fork is a workspace like any other: its rows are its own (on Citus it is
distributed by its own id, like every workspace), so a purge, truncate,
repair or delete of either side never touches the other's rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ledger.core import rules
from ledger.core.errors import Conflict, WorkspaceNotFound
from ledger.core.forks import ForkRefused
from ledger.core.rows import Row, now_ms
from ledger.storage.forking import FORK_BATCH_PREFIX
from ledger.storage.primitives import holds
from ledger.storage.seqpages import RowState

if TYPE_CHECKING:
    from ledger.storage.postgres.handle import PgHandle


def copy_prefix(ws: PgHandle, target: str, expect: RowState, at: int, event: Row) -> None:
    src = ws.workspace
    with ws.db.write(f"fork workspace {src!r} into {target!r}") as conn:
        st = ws.head_in(conn, lock=True)
        if st is None:
            raise WorkspaceNotFound(f"workspace {src!r} has no history in {ws.db.where}")
        if not holds(st, expect):
            raise Conflict(f"workspace {src!r} changed; read it again")
        args = {"s": src, "t": target, "at": at}
        last = conn.execute(
            "SELECT seq, boundary FROM tl_rows WHERE workspace = %(s)s AND boundary IS NOT "
            "NULL AND seq <= %(at)s ORDER BY seq DESC LIMIT 1", args).fetchone()
        manual = conn.execute(
            "SELECT seq FROM tl_rows WHERE workspace = %(s)s AND boundary = 'manual' AND "
            "seq <= %(at)s ORDER BY seq DESC LIMIT 1", args).fetchone()
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
        conn.execute(
            "INSERT INTO tl_rows (workspace, seq, batch_id, boundary, raw) SELECT %(t)s, seq, "
            "batch_id, boundary, raw FROM tl_rows WHERE workspace = %(s)s AND seq <= %(at)s",
            args)
        conn.execute(
            "INSERT INTO tl_batches (workspace, batch_id, first_seq, n) SELECT %(t)s, "
            "batch_id, first_seq, n FROM tl_batches WHERE workspace = %(s)s AND "
            "first_seq <= %(at)s", args)
        bid = str(event.batch.get("id", ""))
        conn.execute("INSERT INTO tl_rows (workspace, seq, batch_id, boundary, raw) VALUES "
                     "(%s, %s, %s, NULL, %s)", (target, event.seq, bid, event.line))
        conn.execute("INSERT INTO tl_batches (workspace, batch_id, first_seq, n) VALUES "
                     "(%s, %s, %s, 1)", (target, bid, event.seq))


def origin_seqs(ws: PgHandle) -> list[int]:
    with ws.db.read("find the fork event") as conn:
        got = conn.execute(
            "SELECT first_seq FROM tl_batches WHERE workspace = %s AND n = 1 AND "
            "left(batch_id, %s) = %s ORDER BY first_seq",
            (ws.workspace, len(FORK_BATCH_PREFIX), FORK_BATCH_PREFIX)).fetchall()
    return [int(seq) for (seq,) in got]
