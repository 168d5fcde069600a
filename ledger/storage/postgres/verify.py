"""``check`` and ``repair`` for a PostgreSQL workspace.

``verify`` reads every row of one snapshot (REPEATABLE READ, a server-side
cursor: memory stays flat) and reports, without writing anything:

- ``bad-row``: a row whose bytes fail their checksum, do not decode, or carry
  another seq than their key;
- ``seq-gap``: seqs that are not consecutive. A gap whose every missing seq is
  in ``tl_quarantine`` was left by ``repair`` (or a truncation) and is no
  finding at all: seqs are identities, so repair never renumbers, and a
  history it repaired checks clean (the file engine accepts the same gap). A
  gap nothing explains (rows deleted behind the store's back) is a *notice*:
  no repair can bring the rows back, so it must not fail ``check`` forever.
  Before the first row is fine: a purge removes a prefix;
- ``torn-batch``: a batch whose rows are not ``i = 0 .. n-1`` side by side;
- ``projection``: a boundary column that disagrees with the rows;
- ``head``: a head row whose next seq, window or floor disagrees with the rows;
- ``recall_index_*``: notices about the recall index of ranked search, read in
  the same snapshot (``recall_check.py``).

What the rows, the head and the gaps show is checked as on every row engine
(``ledger.storage.rowcheck``), and ``repair`` is theirs too
(``ledger.storage.rowspace.repair_rows``: one ``replace``, a new epoch, moves
every batch holding a bad row or torn apart to ``tl_quarantine``, rewrites a
wrong boundary column, and settles the head row; a bad row that may be a reset
keeps the floor at its seq, fail closed). Here: reading them in one snapshot,
the recall index's notices, and rebuilding the index when check reported it,
or when repair changed rows of a workspace that has one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ledger.core.checks import Progress
from ledger.core.errors import WorkspaceNotFound
from ledger.core.format import rows as fmt
from ledger.core.searchable import hidden, row_text
from ledger.storage import rowcheck
from ledger.storage.postgres import recall_check
from ledger.storage.postgres import vectors as pg_vectors
from ledger.storage.postgres.lineage import rows_sql
from ledger.storage.primitives import StoredRow
from ledger.storage.rowcheck import Problem, RowRepair, Verified, report
from ledger.storage.rowspace import repair_rows
from ledger.storage.seqpages import RowState

if TYPE_CHECKING:
    from ledger.core.checks import CheckReport
    from ledger.storage.postgres.handle import PgHandle

QUARANTINE = "tl_quarantine"

VECTORS_ACTION = ("tledger repair removes them; the next ranked search with an embedder "
                  "computes them again")


def _stored(conn: Any, workspace: str, link: str | None) -> Iterator[StoredRow]:
    """The rows of one snapshot, in seq order (a server-side cursor), a
    fork's shared prefix included (``lineage.py``)."""
    cur = conn.cursor(name="tl_verify")
    cur.itersize = 2000
    cur.execute(f"SELECT seq, batch_id, boundary, raw FROM {rows_sql(link)} t ORDER BY seq",
                {"ws": workspace})
    for seq, bid, b, raw in cur:
        yield StoredRow(seq, bid, b, bytes(raw))


def verify(ws: PgHandle) -> tuple[RowState, Verified]:
    """Everything in the module doc, from one snapshot."""
    with ws.db.read("check") as conn, conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        head = ws.head_in(conn)
        if head is None:
            raise WorkspaceNotFound(f"workspace {ws.workspace!r} has no history in "
                                    f"{ws.db.where}")
        out = rowcheck.verify_rows(_stored(conn, ws.key, ws.link))
        out.problems.extend(out.open_calls())

        def held(before: int, after: int) -> int:
            return int(conn.execute(
                "SELECT count(DISTINCT seq) FROM tl_quarantine WHERE workspace = %s AND "
                "seq > %s AND seq < %s", (ws.key, before, after)).fetchone()[0])

        rowcheck.explain_gaps(out, held, QUARANTINE)
        out.recall_index = recall_check.exists(conn, ws.key)
        for code, message in recall_check.inspect(
                conn, ws.key, head.epoch, head.next_seq,
                head.floor.seq if head.floor is not None else 0, ws.link):
            out.problems.append(Problem(code, None, message, notice=True,
                                        action=recall_check.ACTION))

        def text_of(seq: int) -> str | None:
            got = conn.execute(
                f"SELECT raw FROM {rows_sql(ws.link, where='seq = %(seq)s')} t",
                {"ws": ws.key, "seq": seq}, binary=True).fetchone()
            row = fmt.decode_line(bytes(got[0])) if got is not None else None
            return None if row is None or hidden(row) else row_text(row)

        for code, message in pg_vectors.inspect(
                conn, ws.key, head.epoch,
                head.floor.seq if head.floor is not None else 0, text_of):
            out.problems.append(Problem(code, None, message, notice=True,
                                        action=VECTORS_ACTION))
    rowcheck.check_head(out, head)
    return head, out


def check(ws: PgHandle, progress: Progress | None = None) -> CheckReport:
    """``verify`` as the check report every engine gives (``progress`` is
    not reported: the rows are read in one snapshot)."""
    _, found = verify(ws)
    return report(ws.workspace, found.problems, rowcheck.actions(QUARANTINE), found.rows,
                  found.bytes, "database")


def repair(ws: PgHandle, policy: str = "salvage", dry_run: bool = False,
           progress: Progress | None = None) -> RowRepair:
    """``repair_rows`` (module doc) as the repair report every engine gives;
    ``strict`` refuses any damage, the other policies all move what fails
    verification to ``tl_quarantine`` (a row engine has no torn tail to cut).
    The recall index is rebuilt when check reported it, or when rows of a
    workspace that has one changed."""
    out, found = repair_rows(ws, lambda: verify(ws), QUARANTINE, policy, dry_run)
    stale = any(p.code.startswith("recall_index") for p in found.problems)
    if not dry_run and (stale or (out.changed and found.recall_index)):
        recall_check.rebuild(ws.db, ws.key, ws.link)
    if not dry_run and any(p.code.startswith("recall_vectors") for p in found.problems):
        with ws.db.write(f"remove the vectors of {ws.workspace!r}") as conn:
            for table in pg_vectors.TABLES:  # computed again by the next ranked search
                conn.execute(f"DELETE FROM {table} WHERE workspace = %s", (ws.key,))
    if not dry_run:
        out.after = check(ws)
    return out
