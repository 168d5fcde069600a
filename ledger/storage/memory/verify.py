"""``verify`` and ``repair`` of a memory workspace (the codes of
``ledger.storage.rowcheck``).

``verify`` reads the workspace under the root's lock and checks what the
engine keeps true: every row's bytes verify and decode to its seq
(``bad-row``), seqs rise (a row that does not follow the one before it is a
``bad-row``), and a gap is accounted for by the quarantine (else a
``seq-gap`` notice: nothing can bring the rows back); every batch is whole,
``i = 0 .. n-1`` side by side (``torn-batch``), and the batch index agrees
with the rows (``projection``); each row's boundary reason, and the list of
boundary rows, agree with the rows (``projection``); next seq, window and
floor agree with the rows (``head``; a floor whose row a purge removed stays,
fail closed); each quarantine entry is (time, seq or None, reason, bytes)
(``quarantine``).

``repair`` (nothing to do on a healthy workspace: it changes nothing) moves
every batch holding a bad row, or torn apart, to the quarantine, rebuilds the
boundary reasons, the batch index and the head from the rows with a new
epoch, and rewrites a malformed quarantine entry as a well-formed one holding
its bytes. A bad row that may be a reset keeps the floor at its seq.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ledger.core import rules
from ledger.core.checks import CheckReport, check_policy
from ledger.core.errors import RecoveryError
from ledger.core.rows import now_ms
from ledger.core.windows import Boundary
from ledger.storage import rowcheck
from ledger.storage.memory.space import Quarantined, Space, Stored
from ledger.storage.rowcheck import Problem, RowRepair, report
from ledger.storage.seqpages import boundary

if TYPE_CHECKING:
    from ledger.storage.memory.space import MemHandle

QUARANTINE = "the memory quarantine"
ACTIONS = {
    "bad-row": f"tledger repair {{ws}} (its batch goes to {QUARANTINE})",
    "torn-batch": f"tledger repair {{ws}} (the batch goes to {QUARANTINE})",
    "seq-gap": f"none: {QUARANTINE} does not hold the missing rows",
    "projection": "tledger repair {ws} (rebuilds the boundaries and the batch index)",
    "head": "tledger repair {ws} (recomputes next seq, window and floor)",
    "quarantine": "tledger repair {ws} (rewrites the entry around its bytes)",
}


@dataclass
class Verified(rowcheck.Verified):
    bad_entries: list[int] = field(default_factory=list)  # indexes into the quarantine


def _well_formed(entry: object) -> bool:
    return (isinstance(entry, tuple) and len(entry) == 4 and isinstance(entry[0], int)
            and (entry[1] is None or isinstance(entry[1], int)) and isinstance(entry[2], str)
            and isinstance(entry[3], bytes))


def _runs(rows: list[Stored]) -> list[list[Stored]]:
    out: list[list[Stored]] = []
    for r in rows:
        if out and out[-1][-1].batch_id == r.batch_id:
            out[-1].append(r)
        else:
            out.append([r])
    return out


def verify_space(sp: Space, quarantine: list[Quarantined]) -> Verified:
    """Everything in the module doc (call under the root's lock)."""
    out = Verified()
    held = {e[1] for e in quarantine if _well_formed(e) and e[1] is not None}
    prev: int | None = None
    window: Boundary | None = None
    floor: Boundary | None = None
    runs = _runs(sp.rows)
    last_run = {run[0].batch_id: run for run in runs}  # a reused id: the index has the newest
    for run in runs:
        bid = run[0].batch_id
        dicts = []
        for s in run:
            if prev is not None and s.seq <= prev:
                out.problems.append(Problem("bad-row", s.seq, f"seq {s.seq} follows seq {prev}",
                                            len(s.line)))
                out.bad_batches.add(bid)
            elif prev is not None and s.seq > prev + 1 and not all(
                    q in held for q in range(prev + 1, s.seq)):
                out.problems.append(Problem(
                    "seq-gap", s.seq, f"seq {s.seq} follows seq {prev}: seqs {prev + 1}.."
                    f"{s.seq - 1} are not all in {QUARANTINE} (a source with a gap was "
                    "loaded); nothing to repair", notice=True))
            prev = max(s.seq, prev or 0)
            dicts.append(out.row(s.seq, bid, s.line))
        ok = out.batch(bid, run[0].seq, dicts)
        if ok is None or bid in out.bad_batches:
            continue
        if last_run[bid] is run and sp.batches.get(bid) != (run[0].seq, len(run)):
            out.problems.append(Problem("projection", run[0].seq, f"the batch index holds "
                                        f"{sp.batches.get(bid)} for batch {bid!r}, the rows "
                                        f"say {(run[0].seq, len(run))}"))
        bounds = rules.batch_bounds(ok, [(s.seq, 0) for s in run])
        right = {b.seq: b.reason for b in bounds}
        for s in run:
            if s.boundary != right.get(s.seq):
                out.problems.append(Problem("projection", s.seq, f"boundary {s.boundary!r}, "
                                            f"the row says {right.get(s.seq)!r}"))
        window, floor = rules.fold(window, floor, bounds)
    if sp.bounds != [s.seq for s in sp.rows if s.boundary is not None]:
        out.problems.append(Problem("projection", None, "the list of boundary rows disagrees "
                                    "with the rows"))
    _head(sp, out, window, floor, prev)
    out.problems.extend(out.open_calls())
    for i, entry in enumerate(quarantine):
        if not _well_formed(entry):
            out.problems.append(Problem("quarantine", None, f"quarantine entry {i + 1} is not "
                                        "(time, seq, reason, bytes)"))
            out.bad_entries.append(i)
    return out


def _head(sp: Space, out: Verified, window: Boundary | None, floor: Boundary | None,
          last: int | None) -> None:
    if last is not None and sp.next_seq <= last:
        out.problems.append(Problem("head", None, f"next seq {sp.next_seq} is not past the "
                                    f"last row {last}"))
    if window is not None and (sp.window.seq if sp.window else 0) != window.seq:
        out.problems.append(Problem("head", None, f"window {sp.window.seq if sp.window else 0}, "
                                    f"the rows say {window.seq}"))
    want = floor.seq if floor is not None else None
    if sp.floor is not None and (want is None or want < sp.floor.seq):
        want = sp.floor.seq  # the floor row may have been purged: it stays (fail closed)
    if (sp.floor.seq if sp.floor else None) != want:
        out.problems.append(Problem("head", None, f"floor {sp.floor.seq if sp.floor else None}"
                                    f", the rows say {want}"))


def check(ws: MemHandle) -> CheckReport:
    """``verify_space`` as the check report every engine gives."""
    with ws.locked():
        found = verify_space(ws.space(), ws.quarantine())
    return report(ws.workspace, found.problems, ACTIONS, found.rows, found.bytes, "memory")


def repair(ws: MemHandle, policy: str, dry_run: bool) -> RowRepair:
    """Settle what ``verify_space`` finds (module doc); a dry run writes nothing."""
    check_policy(policy)
    with ws.locked():
        sp, q = ws.space(), ws.quarantine()
        found = verify_space(sp, q)
        damage = [p for p in found.problems if not p.notice]
        if policy == "strict" and damage:
            raise RecoveryError(f"workspace {ws.workspace!r}: damage found and policy "
                                "strict refuses to remove anything")
        result = RowRepair(ws.workspace, policy, dry_run, changed=bool(damage),
                           problems=[p.__dict__ for p in damage],
                           quarantined_batches=sorted(found.bad_batches), quarantine=QUARANTINE)
        if damage and not dry_run:
            result.epoch = _apply(sp, q, found)
    if not dry_run:
        result.after = check(ws)
    return result


def _apply(sp: Space, q: list[Quarantined], found: Verified) -> int:
    ts = now_ms()
    for i in found.bad_entries:
        e = q[i]
        data = next((x for x in e if isinstance(x, bytes)), None) if isinstance(e, tuple) else None
        q[i] = (ts, None, "repair: a malformed quarantine entry", data if data is not None
                else repr(e).encode("utf-8", "backslashreplace"))
    kept: list[Stored] = []
    for s in sp.rows:
        if s.batch_id in found.bad_batches:
            q.append((ts, s.seq, "repair: failed verification", s.line))
    good = [s for s in sp.rows if s.batch_id not in found.bad_batches]
    for run in _runs(good):
        dicts = [s.data for s in run]
        right = {b.seq: b.reason for b in rules.batch_bounds(dicts, [(s.seq, 0) for s in run])}
        kept += [Stored(s.seq, s.line, s.data, s.batch_id, right.get(s.seq)) for s in run]
    old_floor, next_seq = sp.floor, sp.next_seq
    sp.replace(kept)
    sp.recompute(max(next_seq, (kept[-1].seq + 1) if kept else 1))
    held = [s for s in [*found.may_be_reset, old_floor.seq if old_floor else None]
            if s is not None]
    if held and (sp.floor is None or sp.floor.seq < max(held)):
        sp.floor = boundary(max(held), "manual")
        if sp.window is None or sp.window.seq < max(held):
            sp.window = sp.floor
    return sp.epoch
