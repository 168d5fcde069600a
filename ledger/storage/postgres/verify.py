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

``repair_rows`` (one transaction, a new epoch) moves every batch holding a bad row
or torn apart to ``tl_quarantine``, rewrites the boundary projection from the
rows, and recomputes the head row. A bad row that may be a reset keeps the
floor where it was (fail closed). It rebuilds the recall index when check
reported it, or when it repaired rows of a workspace that has one.

``check`` and ``repair`` give both as the reports of every engine
(``ledger.core.checks``, ``ledger.storage.rowcheck``): the PostgreSQL
workspace's ``verify`` and ``repair``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ledger.core.checks import Progress, check_policy
from ledger.core.errors import RecoveryError, WorkspaceNotFound
from ledger.core.rows import now_ms
from ledger.core.rules import fold, new_epoch
from ledger.core.windows import Boundary, batch_boundaries
from ledger.storage import rowcheck
from ledger.storage.postgres import recall_check
from ledger.storage.postgres.rewrites import quarantine
from ledger.storage.rowcheck import Problem, RowRepair, report

if TYPE_CHECKING:
    from ledger.core.checks import CheckReport
    from ledger.storage.postgres.handle import PgHandle

ACTIONS = {
    "bad-row": "tledger repair {ws} (its batch goes to tl_quarantine)",
    "torn-batch": "tledger repair {ws} (the batch goes to tl_quarantine)",
    "seq-gap": "none: tl_quarantine does not hold the missing rows",
    "projection": "tledger repair {ws} (recomputes the boundary column)",
    "head": "tledger repair {ws} (recomputes the head row)",
}


@dataclass
class Verified(rowcheck.Verified):
    projection: dict[int, str | None] = field(default_factory=dict)  # seq -> right value
    newest: tuple[int, str] | None = None  # the newest boundary the rows show
    floor: int | None = None  # the newest manual reset the rows show
    last: int | None = None  # the last seq
    gaps: list[tuple[int, int]] = field(default_factory=list)  # (seq before, seq after)
    recall_index: bool = False  # the workspace has a recall index


def _batches(conn: Any, workspace: str) -> Iterator[list[tuple[int, str, str | None, bytes]]]:
    """Rows of one snapshot grouped by runs of the same batch id."""
    cur = conn.cursor(name="tl_verify")
    cur.itersize = 2000
    cur.execute("SELECT seq, batch_id, boundary, raw FROM tl_rows WHERE workspace = %s "
                "ORDER BY seq", (workspace,))
    run: list[tuple[int, str, str | None, bytes]] = []
    for seq, bid, b, raw in cur:
        if run and run[-1][1] != bid:
            yield run
            run = []
        run.append((seq, bid, b, bytes(raw)))
    if run:
        yield run


def verify_rows(conn: Any, workspace: str) -> Verified:
    out = Verified()
    prev: int | None = None
    window: Boundary | None = None
    floor: Boundary | None = None
    for run in _batches(conn, workspace):
        dicts: list[dict[str, Any] | None] = []
        bid = run[0][1]
        for seq, _, _, raw in run:
            if prev is not None and seq != prev + 1:
                out.gaps.append((prev, seq))
            prev = seq
            dicts.append(out.row(seq, bid, raw))
        ok = out.batch(bid, run[0][0], dicts)
        right: dict[int, str] = {}
        if ok is not None:
            right = {run[i][0]: reason for i, reason in batch_boundaries(ok)}
        for seq, _, stored, _ in run:
            want = right.get(seq)
            if stored != want and bid not in out.bad_batches:
                out.problems.append(Problem("projection", seq, f"boundary column {stored!r}, "
                                            f"the row says {want!r}"))
                out.projection[seq] = want
            if want is not None:
                window, floor = fold(window, floor, [Boundary(seq, seq, 0, want)])
    out.newest = (window.seq, window.reason) if window is not None else None
    out.floor, out.last = floor.seq if floor is not None else None, prev
    return out


def _explain_gaps(conn: Any, workspace: str, out: Verified) -> None:
    """A problem for each gap that ``tl_quarantine`` does not account for (module
    doc): a notice, since nothing can fill it."""
    for before, after in out.gaps:
        held = conn.execute(
            "SELECT count(DISTINCT seq) FROM tl_quarantine WHERE workspace = %s AND seq > %s "
            "AND seq < %s", (workspace, before, after)).fetchone()[0]
        if held < after - before - 1:
            missing = f"seq {before + 1}" if after == before + 2 else \
                f"seqs {before + 1}..{after - 1}"
            out.problems.append(Problem(
                "seq-gap", after, f"seq {after} follows seq {before}: {missing} missing and "
                "not in tl_quarantine (deleted outside transcript-ledger, or their "
                "quarantine entries were purged); nothing to repair", notice=True))


def verify(ws: PgHandle) -> Verified:
    """Everything in the module doc, from one snapshot."""
    with ws.db.read("check") as conn, conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        out = verify_rows(conn, ws.workspace)
        out.problems.extend(out.open_calls())
        _explain_gaps(conn, ws.workspace, out)
        head = ws.head_in(conn)
        if head is not None:
            out.recall_index = recall_check.exists(conn, ws.workspace)
            for code, message in recall_check.inspect(
                    conn, ws.workspace, head.epoch, head.next_seq,
                    head.floor.seq if head.floor is not None else 0):
                out.problems.append(Problem(code, None, message, notice=True,
                                            action=recall_check.ACTION))
    if head is not None:
        window, floor, last = out.newest, out.floor, out.last
        if last is not None and head.next_seq <= last:
            out.problems.append(Problem("head", None, f"head next seq {head.next_seq} is not "
                                        f"past the last row {last}"))
        if window is not None and head.window_seq != window[0]:
            out.problems.append(Problem("head", None, f"head window {head.window_seq}, the "
                                        f"rows say {window[0]}"))
        want_floor = floor
        if head.floor is not None and (floor is None or floor < head.floor.seq):
            # The floor row may have been purged: the head keeps it (fail closed).
            want_floor = head.floor.seq
        if (head.floor.seq if head.floor else None) != want_floor:
            out.problems.append(Problem("head", None, f"head floor {head.floor}, the rows say "
                                        f"{want_floor}"))
    return out


def repair_rows(ws: PgHandle, dry_run: bool) -> dict[str, Any]:
    """Settle what ``verify`` finds (module doc); a dry run writes nothing."""
    found = verify(ws)
    damage = [p for p in found.problems if not p.notice]
    stale_index = any(p.code.startswith("recall_index") for p in found.problems)
    result: dict[str, Any] = {"problems": [p.__dict__ for p in damage],
                              "quarantined_batches": sorted(found.bad_batches),
                              "changed": bool(damage), "epoch": None,
                              "recall_index": None}
    rebuild = stale_index or (bool(damage) and found.recall_index)
    if dry_run or not damage:
        if rebuild:
            result["recall_index"] = "would rebuild" if dry_run else "rebuilt"
            if not dry_run:
                recall_check.rebuild(ws.db, ws.workspace)
        return result
    with ws.db.write(f"repair workspace {ws.workspace!r}") as conn:
        st = ws.head_in(conn, lock=True)
        assert st is not None
        if found.bad_batches:
            quarantine(conn, ws.workspace, "batch_id = ANY(%(b)s)",
                       {"b": sorted(found.bad_batches)}, "repair: failed verification")
            conn.execute("DELETE FROM tl_batches WHERE workspace = %s AND batch_id = ANY(%s)",
                         (ws.workspace, sorted(found.bad_batches)))
        for seq, want in found.projection.items():
            conn.execute("UPDATE tl_rows SET boundary = %s WHERE workspace = %s AND seq = %s",
                         (want, ws.workspace, seq))
        window = conn.execute(
            "SELECT seq, boundary FROM tl_rows WHERE workspace = %s AND boundary IS NOT NULL "
            "ORDER BY seq DESC LIMIT 1", (ws.workspace,)).fetchone()
        floor = conn.execute(
            "SELECT max(seq) FROM tl_rows WHERE workspace = %s AND boundary = 'manual'",
            (ws.workspace,)).fetchone()[0]
        kept = [s for s in [*found.may_be_reset, st.floor.seq if st.floor else None]
                if s is not None]
        floor = max([s for s in (floor, *kept) if s is not None], default=None)
        last = conn.execute("SELECT max(seq) FROM tl_rows WHERE workspace = %s",
                            (ws.workspace,)).fetchone()[0] or 0
        window_seq = max(window[0] if window else 0, floor or 0)
        reason = (window[1] if window and window[0] == window_seq else "manual") \
            if window_seq else None
        epoch = new_epoch(st.epoch)
        conn.execute(
            "UPDATE tl_head SET next_seq = %s, epoch = %s, window_seq = %s, window_reason = %s,"
            " floor_seq = %s, updated_ms = %s WHERE workspace = %s",
            (max(st.next_seq, last + 1), epoch, window_seq, reason, floor, now_ms(),
             ws.workspace))
    result["epoch"] = epoch
    if rebuild:  # a projection of the repaired rows
        recall_check.rebuild(ws.db, ws.workspace)
        result["recall_index"] = "rebuilt"
    return result


def check(ws: PgHandle, progress: Progress | None = None) -> CheckReport:
    """``verify`` as the check report every engine gives (``progress`` is
    not reported: the rows are read in one snapshot)."""
    if not ws.exists():
        raise WorkspaceNotFound(f"workspace {ws.workspace!r} has no history in {ws.db.where}")
    found = verify(ws)
    return report(ws.workspace, found.problems, ACTIONS, found.rows, found.bytes, "database")


def repair(ws: PgHandle, policy: str = "salvage", dry_run: bool = False,
           progress: Progress | None = None) -> RowRepair:
    """``repair_rows`` as the repair report every engine gives; ``strict``
    refuses any damage, the other policies all move what fails verification
    to ``tl_quarantine`` (a row engine has no torn tail to cut)."""
    check_policy(policy)
    if policy == "strict" and not check(ws).ok:
        raise RecoveryError(f"workspace {ws.workspace!r}: damage found and policy "
                            "strict refuses to remove anything")
    out = repair_rows(ws, dry_run)
    result = RowRepair(ws.workspace, policy, dry_run, changed=out["changed"], epoch=out["epoch"],
                       problems=out["problems"], quarantined_batches=out["quarantined_batches"])
    if not dry_run:
        result.after = check(ws)
    return result
