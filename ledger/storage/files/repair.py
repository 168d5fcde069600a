"""The file engine's ``repair`` (``tledger repair``): make a damaged
workspace directory consistent without losing a byte.

Under the exclusive workspace lock:

1. settle an interrupted rewrite (``ledger.storage.files.rewrite.recover_interrupted``:
   commit or roll back);
2. scan every segment with the streaming scanner (``scan.py``);
3. choose what leaves the log by **policy** (after RocksDB's WAL recovery
   modes):

   ``salvage`` (default)
       keep every verifiable complete batch; everything else goes. An
       incomplete batch leaves as a whole, so a half-written rollover is
       removed without being duplicated and its queued trigger is not
       resurrected.
   ``tail``
       only a damaged tail may be cut: everything from the first damage to
       the end must hold no verifiable batch, else the repair is refused.
   ``prefix``
       keep the consistent prefix before the first damage; everything after
       it goes (verified batches included).
   ``strict``
       refuse if anything is damaged.

4. put every removed byte range into ``quarantine/`` (manifest: source,
   offset, length, reason, digest) *before* the log changes;
5. where removed bytes may be a reset (an unreadable line that is a reset
   candidate, or a readable reset row), put one valid manual ``reset`` row
   in their place (``meta.recovered`` names the quarantine entry), so the
   privacy floor survives and the result checks clean. Its seq is the first
   free seq after the last verified row before it, or that row's seq (a
   reused sequence, a notice) when there is no free one;
6. rewrite the damaged segments by temp + rename as one transaction with a
   marker (``ledger.storage.files.rewrite.commit_rewrite``): pending receipt first, a new
   epoch at the end; stray temp files are moved into the quarantine; a
   pending, stale or wrong receipt is re-baselined.

A history without damage stays byte-identical (only its receipt may be
re-baselined), and a second repair changes nothing. ``--dry-run`` takes the
shared lock, writes nothing and reports what would change.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from ledger.core.checks import Finding, Progress, RepairReport, check_policy
from ledger.core.errors import FormatError, LedgerError, RecoveryError, WorkspaceNotFound
from ledger.core.format import files as ffmt
from ledger.core.rows import new_id, prepare_batch
from ledger.storage.files import check as chk
from ledger.storage.files import recall, rewrite, vectors
from ledger.storage.files import segments as segs
from ledger.storage.files.lock import locked
from ledger.storage.files.receipt import read_receipt, receipt_status, write_receipt
from ledger.storage.files.retention import Quarantine
from ledger.storage.files.scan import ScanResult, byte_progress, scan_paths

if TYPE_CHECKING:
    from ledger.storage.files.ports import FileHistory


@dataclass
class Removal:
    """A byte range of one segment that leaves the log."""

    segment: int
    offset: int
    length: int
    reasons: list[str]
    may_be_reset: bool
    prev_seq: int | None
    next_seq: int | None
    whole_segment: bool = False
    entry: str | None = None
    reset_seq: int | None = None  # seq of the manual reset put in its place

    def to_dict(self) -> dict[str, Any]:
        return {"segment": ffmt.segment_name(self.segment), "offset": self.offset,
                "length": self.length, "reason": "; ".join(self.reasons),
                "may_be_reset": self.may_be_reset, "quarantine": self.entry,
                "reset_seq": self.reset_seq}


@dataclass
class FileRepair(RepairReport):
    """The file engine's repair report: the byte ranges removed (each to a
    quarantine entry), an interrupted rewrite settled, stray temp files, the
    receipt and FORMAT."""

    removals: list[Removal] = field(default_factory=list)
    resolution: dict[str, Any] | None = None
    temps: list[str] = field(default_factory=list)
    receipt: str | None = None  # "re-baselined" (or "would re-baseline")
    format_written: bool = False

    def details(self) -> dict[str, Any]:
        return {
            "refused": self.refused, "removed": [r.to_dict() for r in self.removals],
            "removed_bytes": sum(r.length for r in self.removals),
            "interrupted_rewrite": self.resolution, "stray_temp_files": self.temps,
            "receipt": self.receipt, "format_written": self.format_written,
        }

    def text(self) -> str:
        would = "would " if self.dry_run else ""
        out = []
        if self.resolution is not None:
            out.append(f"interrupted rewrite: {would}{self.resolution['action']}")
        for r in self.removals:
            where = f"{ffmt.segment_name(r.segment)}@{r.offset}"
            entry = f" -> quarantine/{r.entry}" if r.entry else ""
            reset = (f"; manual reset seq {r.reset_seq} in its place"
                     if r.reset_seq is not None else "")
            if r.length == 0:
                out.append(f"{would}put a manual reset (seq {r.reset_seq}) at {where}: "
                           f"{'; '.join(r.reasons)}")
                continue
            out.append(f"{would}remove {where} ({r.length} bytes): {'; '.join(r.reasons)}"
                       f"{entry}{reset}")
        for t in self.temps:
            out.append(f"{would}move stray temp file {t} to quarantine")
        if self.receipt:
            out.append(f"receipt: {self.receipt}")
        if self.format_written:
            out.append(f"{would}write FORMAT")
        if self.refused:
            out.append(f"refused: {self.refused}")
        removed = sum(r.length for r in self.removals)
        if self.dry_run:
            verdict = "would change" if self.changed else "nothing to change"
        elif self.refused:
            verdict = "not repaired"
        else:
            verdict = "repaired" if self.changed else "nothing to repair"
        tail = ""
        if self.after is not None:
            tail = "; check after: " + ("ok" if self.after.ok else
                                        f"{self.after.damage} damage remain")
        out.append(f"{self.workspace}: {verdict} (policy {self.policy}; {removed} bytes "
                   f"{'would go' if self.dry_run else 'went'} to quarantine"
                   f"{'' if self.epoch is None else f'; epoch {self.epoch}'}){tail}")
        return "\n".join(out)


def plan_removals(scan: ScanResult, policy: str) -> tuple[list[Removal], str | None]:
    """The ranges a policy removes, merged where adjacent, and a refusal
    reason (the policy cannot make the history consistent) or None."""
    if not scan.damage:
        return [], None
    if policy == "strict":
        first = scan.damage[0]
        return [], (f"{len(scan.damage)} damaged span(s), the first at "
                    f"{ffmt.segment_name(first.segment)}@{first.offset}: {first.reason} "
                    "(strict repairs nothing that is damaged)")
    if policy in ("tail", "prefix"):
        first = scan.damage[0]
        if policy == "tail" and scan.kept_after_first_damage:
            return [], (f"damage at {ffmt.segment_name(first.segment)}@{first.offset} "
                        f"({first.reason}) is followed by {scan.kept_after_first_damage} "
                        "verified batch(es): not a torn tail; use --policy salvage or prefix")
        size = scan.sizes[first.segment]
        reasons = [first.reason]
        if policy == "prefix" and scan.kept_after_first_damage:
            reasons.append(f"after the first damage ({scan.kept_after_first_damage} verified "
                           "batches cut by the prefix policy)")
        out = [Removal(first.segment, first.offset, size - first.offset, reasons,
                       scan.reset_after_first_damage, first.prev_seq, None)]
        for n in scan.segments:
            if n > first.segment:
                out.append(Removal(n, 0, scan.sizes[n], ["after the first damage"],
                                   scan.reset_after_first_damage, first.prev_seq, None,
                                   whole_segment=True))
        return out, None
    merged: list[Removal] = []
    for d in scan.damage:
        last = merged[-1] if merged else None
        if last is not None and last.segment == d.segment and last.offset + last.length == d.offset:
            last.length += d.length
            if d.reason not in last.reasons:
                last.reasons.append(d.reason)
            last.may_be_reset = last.may_be_reset or d.may_be_reset
            last.next_seq = d.next_seq
        else:
            merged.append(Removal(d.segment, d.offset, d.length, [d.reason], d.may_be_reset,
                                  d.prev_seq, d.next_seq))
    return merged, None


def _assign_reset_seqs(removals: list[Removal], policy: str) -> None:
    last: int | None = None
    for r in removals:
        if not r.may_be_reset or (policy in ("tail", "prefix") and r.whole_segment):
            continue
        base = max(r.prev_seq or 0, last or 0)
        cand = base + 1
        r.reset_seq = cand if r.next_seq is None or cand < r.next_seq else base
        last = r.reset_seq


def _keep_floor(removals: list[Removal], lost: Any, scan: ScanResult,
                paths: list[tuple[int, str]], policy: str) -> list[Removal]:
    """Make the repaired log hold a manual reset at or before the place of a
    floor the receipt recorded and the log lost (``lost``): the removal that
    covers that place gets one, or a zero-length removal (an insertion) is
    made at the first line start at or after it. Rows before the recorded
    floor so stay unreachable; nothing is removed for it."""
    reason = (f"privacy floor recorded (receipt or INDEX) at "
              f"{ffmt.segment_name(lost.segment)}@{lost.offset} is missing from the log")
    numbers = [n for n, _ in paths if n in scan.sizes]
    if not numbers:
        return removals
    later = [n for n in numbers if n >= lost.segment]
    if later and later[0] == lost.segment:
        number, offset = lost.segment, min(lost.offset, scan.sizes[lost.segment])
        data = segs.read_file(dict(paths)[number])
        if 0 < offset < len(data) and data[offset - 1 : offset] != b"\n":
            nl = data.find(b"\n", offset)
            offset = len(data) if nl < 0 else nl + 1
    elif later:
        number, offset = later[0], 0
    else:
        number, offset = numbers[-1], scan.sizes[numbers[-1]]
    if policy in ("tail", "prefix") and removals:
        first = removals[0]
        if (number, offset) >= (first.segment, first.offset):
            first.may_be_reset = True
            first.reasons.append(reason)
            return removals
    for r in removals:
        if r.segment == number and r.offset <= offset <= r.offset + r.length:
            r.may_be_reset = True
            r.reasons.append(reason)
            return removals
    seq = lost.seq if lost.readable else lost.after + 1
    insert = Removal(number, offset, 0, [reason], True, None, None, reset_seq=None)
    insert.prev_seq, insert.next_seq = seq - 1, None
    return sorted([*removals, insert], key=lambda r: (r.segment, r.offset))


def _reset_line(seq: int, recovered: str | list[str], max_row_bytes: int) -> bytes:
    row = {"kind": "reset", "role": "system", "parts": [], "reset": {"reason": "manual"},
           "meta": {"recovered": recovered}}
    _, lines = prepare_batch([row], seq, new_id("b_"), max_row_bytes, internal=True)
    return lines[0]


def _virtual_paths(path: str, numbers: list[int],
                   res: rewrite.Resolution | None) -> list[tuple[int, str]]:
    """The segment files as they will be once ``res`` is applied (dry run)."""
    current = {n: segs.segment_path(path, n) for n in numbers}
    if res is not None and res.action in ("rolled-back", "settled-tombstones"):
        for target in res.restored:
            n = ffmt.segment_number(os.path.basename(target))
            if n is not None:
                current[n] = target + rewrite.TOMBSTONE_SUFFIX
    return sorted(current.items())


def repair(history: FileHistory, *, policy: str = "salvage", dry_run: bool = False,
           progress: Progress | None = None) -> FileRepair:
    """Repair ``history`` by ``policy`` (module doc); see RepairReport.exit_code."""
    check_policy(policy)
    if not history.exists():
        raise WorkspaceNotFound(
            f"workspace {history.workspace!r} has no history under {history.store.root}"
        )
    report = FileRepair(history.workspace, policy, dry_run)
    projections: list[Finding] | None = None
    try:
        with locked(history.path, history.workspace, history.store.lock_timeout, shared=dry_run):
            _repair_locked(history, report, progress)
            if not dry_run:
                projections = _settle_projections(history, report)
    except (OSError, segs.CommitStepError) as exc:
        cause = exc.cause if isinstance(exc, segs.CommitStepError) else exc
        raise RecoveryError(
            f"workspace {history.workspace!r}: repair stopped: "
            f"{cause.filename + ': ' if cause.filename else ''}{cause.strerror or cause}; "
            "whatever it changed is whole (rewrites are transactions), run it again once "
            "the cause is fixed"
        ) from exc
    if not dry_run:
        # After the lock is released: check takes it shared.
        report.after = chk.check(history, projections=projections)
    return report


def _settle_projections(history: FileHistory, report: FileRepair) -> list[Finding] | None:
    """Under the repair's lock, after the log's repair: rebuild the recall
    index and remove the vectors where they are stale. Each is opened and
    verified at most once per repair (the index not at all once the log
    changed: it is stale whatever it holds). Returns their findings (none)
    when repair changed nothing, for the check of the result to use instead
    of verifying the same files again; else None."""
    path = history.path
    recall_found: list[Finding] | None = None  # None: stale
    if not report.changed:
        try:
            recall_found = list(chk._recall_findings(history, held=True))
        except LedgerError:
            pass  # a log too damaged to read a state from: rebuilt
    if recall_found != [] and any(os.path.lexists(os.path.join(path, ffmt.RECALL_NAME) + suffix)
                                  for suffix in recall.SUFFIXES):
        # The recall index is a projection: built again from the repaired log.
        recall.rebuild(path, history.state())
        report.changed = True
    vectors_found: list[Finding] | None = None
    try:  # the vectors hold for any log whose rows' texts they match: checked here
        vectors_found = list(chk.vector_findings(history, held=True))
    except LedgerError:
        pass
    if vectors_found != [] and os.path.lexists(vectors.vectors_path(path)):
        vectors.discard(path)  # computed again by the next ranked search
        report.changed = True
    unchanged = not report.changed and recall_found == [] and vectors_found == []
    return [] if unchanged else None


def _repair_locked(history: FileHistory, report: FileRepair,
                   progress: Progress | None) -> None:
    path = history.path
    dry_run = report.dry_run
    policy = report.policy
    odd = [f"{segs.segment_path(path, n)} is {what}"
           for n, what in chk.odd_segments(path, segs.list_segments(path)).items()]
    format_odd = chk.odd_format(path)
    if format_odd:
        odd.append(f"{os.path.join(path, ffmt.FORMAT_NAME)} is {format_odd}")
    if odd:
        # Not bytes that can be put in quarantine: a person must look at them.
        report.refused = (f"{'; '.join(odd)}, not a regular file; nothing was changed: move "
                          "it away (or restore the file) and run repair again")
        return
    fmt_text = chk._read_format(path)
    if fmt_text is not None and fmt_text != ffmt.FORMAT_TEXT:
        raise FormatError(
            f"workspace {history.workspace!r}: FORMAT is {fmt_text[:40]!r}; this build "
            "cannot repair that format"
        )
    if dry_run:
        res = rewrite.plan_recovery(path)
    else:
        res = rewrite.recover_interrupted(path, history.store.durability)
    if res is not None:
        report.resolution = res.to_dict()
        report.changed = True
    numbers = segs.list_segments(path)
    if dry_run:
        if res is not None:
            numbers = sorted(set(numbers) | {
                n for n in (ffmt.segment_number(os.path.basename(t)) for t in res.restored)
                if n is not None})
        paths = _virtual_paths(path, numbers, res)
    else:
        paths = [(n, segs.segment_path(path, n)) for n in numbers]
    total = sum(os.path.getsize(p) for _, p in paths if os.path.exists(p))
    scan = scan_paths(paths, progress=byte_progress(progress, total))
    removals, refused = plan_removals(scan, policy)
    if refused:
        report.refused = refused
        if dry_run:
            report.changed = report.changed or bool(scan.damage)
        return
    lost = chk.lost_floor(path, read_receipt(path), scan)
    if lost is not None:
        where = f"{ffmt.segment_name(lost.segment)}@{lost.offset}"
        if policy == "strict":
            report.refused = (f"the privacy floor recorded at {where} is missing "
                              "from the log (strict repairs nothing); use --policy salvage, "
                              "which puts a manual reset in its place")
            report.changed = dry_run
            return
        removals = _keep_floor(removals, lost, scan, paths, policy)
    _assign_reset_seqs(removals, policy)
    report.removals = removals
    report.temps = segs.stray_temps(path)
    receipt_needs = _receipt_needs_rebaseline(path, numbers, scan) or res is not None
    report.format_written = fmt_text is None and bool(numbers)
    if removals or report.temps or receipt_needs or report.format_written:
        report.changed = True
    if removals or receipt_needs:
        report.receipt = "would re-baseline" if dry_run else "re-baselined"
    if dry_run or not report.changed:
        return
    _apply(history, report, scan)


def _receipt_needs_rebaseline(path: str, numbers: list[int], scan: ScanResult) -> bool:
    receipt = read_receipt(path)
    status = receipt_status(path)
    stamps = dict(segs.stamps(path, numbers))
    found = list(chk._receipt_findings("", receipt, status, numbers, stamps, scan))
    if any(f.code == "receipt_disagrees" for f in found):
        scan.resolve_hidden()
        found = list(chk._receipt_findings("", receipt, status, numbers, stamps, scan))
    return bool(found)


def _apply(history: FileHistory, report: FileRepair, scan: ScanResult) -> None:
    path = history.path
    durability = history.store.durability
    q = Quarantine(path, durability=durability)
    if report.format_written:
        segs.commit_file(path, ffmt.FORMAT_NAME, [ffmt.FORMAT_TEXT], durability=durability,
                         new_file=True)
    for name in report.temps:
        q.put_file(os.path.join(path, name), source=name, offset=0,
                   reason="stray temp file of a writer that died before its rename "
                          "(an uncommitted batch)", move=True)
    by_segment: dict[int, list[Removal]] = {}
    for r in report.removals:
        by_segment.setdefault(r.segment, []).append(r)
    contents: dict[int, bytes] = {}
    # Quarantine first (fsynced): a crash from here on leaves the bytes in
    # both places, never in neither.
    for n, rs in by_segment.items():
        seg_path = segs.segment_path(path, n)
        if len(rs) == 1 and rs[0].whole_segment:
            rs[0].entry = q.put_file(seg_path, source=ffmt.segment_name(n), offset=0,
                                     reason="; ".join(rs[0].reasons))
            continue
        data = segs.read_file(seg_path)
        contents[n] = data
        for r in rs:
            if r.length == 0:
                continue  # an insertion (a lost floor's reset): no bytes to keep
            r.entry = q.put(data[r.offset : r.offset + r.length], source=ffmt.segment_name(n),
                            offset=r.offset, reason="; ".join(r.reasons))
    changes: dict[int, list[bytes] | None] = {}
    prefix_entries = [r.entry for r in report.removals if r.entry]
    for n, rs in by_segment.items():
        if n not in contents:
            changes[n] = None
            continue
        data = contents[n]
        out: list[bytes] = []
        pos = 0
        for r in sorted(rs, key=lambda r: r.offset):
            out.append(data[pos : r.offset])
            if r.reset_seq is not None:
                recovered: str | list[str] = r.entry or f"{ffmt.RECEIPT_NAME}: {r.reasons[0]}"
                if report.policy in ("tail", "prefix") and len(prefix_entries) > 1:
                    recovered = [e for e in prefix_entries if e is not None]
                out.append(_reset_line(r.reset_seq, recovered, history.store.max_row_bytes))
            pos = r.offset + r.length
        out.append(data[pos:])
        body = [c for c in out if c]
        changes[n] = body if body else None
    st = history.state()
    if changes:
        outcome = rewrite.commit_rewrite(history, st, changes, op=f"repair ({report.policy})")
        report.epoch = outcome.epoch
    else:
        history.forget_derived()
        report.epoch = history.rebaseline_locked(history.state(), force_new_epoch=True,
                                                  rewritten=True)
    _raise_next_seq(path, scan.max_seq)


def _raise_next_seq(path: str, max_seq: int) -> None:
    """Keep the high-water mark above every seq in the log. (A re-baseline
    derives next seq from the newest segment's last row, which is not its
    highest when lines were reordered.)"""
    receipt = read_receipt(path)
    if receipt is not None and receipt.stable and receipt.next_seq <= max_seq:
        write_receipt(path, msgspec.structs.replace(receipt, next_seq=max_seq + 1))
