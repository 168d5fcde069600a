"""The file engine's ``verify`` (``tledger check``): read-only verification
of a workspace directory.

What is verified, line by line and streaming (memory is bounded by the
longest line and the largest batch, never by the history): framing and every
row's checksum (``ledger.core.format.rows.body_of``), that the body decodes as a row
(into :class:`CheckRow`; unknown fields are skipped, not built), UTF-8,
batch completeness (the ``n`` rows of a batch adjacent, ``i`` = 0..n-1, in
one segment), exact duplicates of lines and batches, sequences, reset
candidates among unreadable lines, and then the receipt and stamps against
what the segments say, stray temp files, and interrupted rewrites.

Every finding has a severity. **damage**: bytes that fail verification (torn
or unreadable lines, checksum mismatches, invalid UTF-8, incomplete or
duplicated batches), a receipt whose stamps match but whose content
disagrees with the log, an interrupted rewrite. **notice**: a missing,
pending or stale receipt over segments that all verify (an interrupted commit
or an untracked edit the next write re-baselines), reused sequences, stray
temp files, leftover tombstones, a tool call and its result split by a
boundary (``tool_pair_split``: the result is served as user text).

Nothing is created or written, so ``check`` works on a read-only copy. The
shared lock is held only while the receipt, the stamps and the active
segment are captured; sealed segments never change in place, so each is
opened afterwards and its stamp compared with the snapshot (a concurrent
rewrite is reported as a notice: run check again).
"""

from __future__ import annotations

import os
import stat as stat_mod
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ledger.core.checks import DAMAGE, NOTICE, CheckReport, Finding, Progress
from ledger.core.errors import (
    FormatError,
    LedgerError,
    Unavailable,
    UnsafePath,
    WorkspaceNotFound,
)
from ledger.core.format import files as ffmt
from ledger.core.searchable import hidden, row_text
from ledger.core.windows import Boundary
from ledger.storage.files import recall, rewrite, vectors
from ledger.storage.files import segments as segs
from ledger.storage.files.index import BoundaryIndex
from ledger.storage.files.lock import locked
from ledger.storage.files.pairs import SplitPairs
from ledger.storage.files.reader import FileReader
from ledger.storage.files.receipt import read_receipt, receipt_status
from ledger.storage.files.scan import (
    MAX_FINDINGS_PER_CODE,
    ScanResult,
    byte_progress,
    scan_paths,
)
from ledger.storage.files.state import covers, recorded_floor

if TYPE_CHECKING:
    from ledger.storage.files.ports import FileHistory


@dataclass
class FileReport(CheckReport):
    """The file engine's check report: the scan it ran (repair and tests
    read it)."""

    scan: ScanResult | None = None


def damage_findings(workspace: str, scan: ScanResult) -> Iterator[Finding]:
    action = f"tledger repair {workspace} (bytes go to quarantine)"
    counts: dict[str, int] = {}
    for d in scan.damage:
        counts[d.code] = counts.get(d.code, 0) + 1
        if counts[d.code] > MAX_FINDINGS_PER_CODE:
            continue
        msg = d.reason + ("; may be a reset: it counts as a privacy floor" if d.may_be_reset
                          else "")
        yield Finding(DAMAGE, d.code, msg, action, ffmt.segment_name(d.segment), d.offset,
                      d.length, d.seq)
    for code, n in counts.items():
        if n > MAX_FINDINGS_PER_CODE:
            yield Finding(DAMAGE, code, f"{n - MAX_FINDINGS_PER_CODE} more {code} findings "
                          "not listed", action)


def check(history: FileHistory, *, progress: Progress | None = None,
          projections: list[Finding] | None = None) -> FileReport:
    """Verify ``history`` without writing anything (module doc). An OS error
    (a file it may not read, an I/O error) is ``Unavailable`` naming the file.
    ``projections``: the recall index's and its vectors' findings, when the
    caller made them in this same call and neither changed since (repair's
    check of a result it did not change), instead of opening and verifying
    them again."""
    try:
        return _check(history, progress, projections)
    except OSError as exc:
        raise Unavailable(
            f"workspace {history.workspace!r}: check cannot read "
            f"{exc.filename or 'the history'}: {exc.strerror or exc}; nothing was changed"
        ) from exc


def _check(history: FileHistory, progress: Progress | None,
           projections: list[Finding] | None = None) -> FileReport:
    if not history.exists():
        raise WorkspaceNotFound(
            f"workspace {history.workspace!r} has no history under {history.store.root}"
        )
    path = history.path
    ws = history.workspace
    findings: list[Finding] = []
    with locked(path, ws, history.store.lock_timeout, shared=True):
        numbers = segs.list_segments(path)
        odd = odd_segments(path, numbers)
        stamps = dict(segs.stamps(path, [n for n in numbers if n not in odd]))
        stamps.update((n, ffmt.ZERO_STAMP) for n in odd)
        receipt = read_receipt(path)
        status = receipt_status(path)
        temps = segs.stray_temps(path)
        marker = os.path.lexists(os.path.join(path, rewrite.MARKER_NAME))
        tombs = rewrite.native_tombstones(path)
        format_odd = odd_format(path)
        format_text = None if format_odd else _read_format(path)
    if format_text is not None and format_text != ffmt.FORMAT_TEXT:
        raise FormatError(
            f"workspace {ws!r}: FORMAT is {format_text[:40]!r}, this build checks "
            f"{ffmt.FORMAT_TEXT!r}; use a build that knows that format"
        )
    total = sum(s.size for s in stamps.values())
    pairs = SplitPairs()
    scan = scan_paths(
        [(n, segs.segment_path(path, n)) for n in numbers if n not in odd],
        expected=stamps, progress=byte_progress(progress, total), pairs=pairs,
    )
    findings.extend(_odd_findings(path, ws, odd))
    if format_odd:
        findings.append(Finding(DAMAGE, "not_a_file",
                                f"{os.path.join(path, ffmt.FORMAT_NAME)} is {format_odd}, not a "
                                "regular file", f"move it away, then tledger repair {ws} "
                                "(writes FORMAT)", ffmt.FORMAT_NAME))
    if marker:
        plan = rewrite.plan_recovery(path)
        would = plan.action if plan is not None else "settled"
        findings.append(Finding(
            DAMAGE, "rewrite_interrupted",
            f"an interrupted rewrite left {rewrite.MARKER_NAME}; it will be {would}",
            f"tledger repair {ws} (or any write) settles it", rewrite.MARKER_NAME))
    elif tombs:
        findings.append(Finding(
            NOTICE, "stale_tombstones",
            f"{len(tombs)} tombstone(s) of a rewrite that died before changing anything",
            "the next rewrite or repair removes them"))
    findings.extend(damage_findings(ws, scan))
    for number in scan.changed_during_scan:
        findings.append(Finding(NOTICE, "changed_during_check",
                                "segment changed while check ran (a concurrent rewrite)",
                                "run check again", ffmt.segment_name(number)))
    for number, offset, seq in scan.reused:
        findings.append(Finding(NOTICE, "reused_seq",
                                f"seq {seq} is not above every seq before it (repaired or "
                                "imported content, or reordered lines)",
                                "none needed: such rows are kept",
                                ffmt.segment_name(number), offset, None, seq))
    if scan.reused_count > len(scan.reused):
        findings.append(Finding(NOTICE, "reused_seq",
                                f"{scan.reused_count - len(scan.reused)} more reused seqs",
                                "none needed"))
    if scan.reused_ids:
        findings.append(Finding(NOTICE, "reused_batch_id",
                                f"{scan.reused_ids} batch id(s) used by more than one batch",
                                "none needed"))
    receipt_found = list(_receipt_findings(ws, receipt, status, numbers, stamps, scan))
    if any(f.code == "receipt_disagrees" for f in receipt_found) and not scan.hidden_resolved:
        scan.resolve_hidden()
        receipt_found = list(_receipt_findings(ws, receipt, status, numbers, stamps, scan))
    findings.extend(receipt_found)
    lost = lost_floor(path, receipt, scan)
    if lost is not None:
        findings.append(Finding(
            DAMAGE, "floor_lost",
            f"the receipt or INDEX records a privacy floor at {_pos(lost.segment, lost.offset)}"
            f"{f' (seq {lost.seq})' if lost.readable else ''} that the log no longer holds at "
            "or after its place; window reads and session_history are refused",
            f"tledger repair {ws} (puts a manual reset in its place)",
            ffmt.segment_name(lost.segment), lost.offset))
    for name in temps:
        findings.append(Finding(NOTICE, "stray_temp_file",
                                "temp file of a writer that died before its rename "
                                "(an uncommitted batch)",
                                "the next write removes it; repair quarantines it", name))
    if format_text is None and not format_odd and numbers:
        findings.append(Finding(NOTICE, "format_missing", "FORMAT file is missing",
                                "the next write or repair writes it"))
    if not scan.damage:
        findings.extend(_split_pairs(pairs))
    if projections is not None:
        findings.extend(projections)
    else:
        try:
            findings.extend(_recall_findings(history))
            findings.extend(vector_findings(history))
        except UnsafePath as exc:
            # A segment made a link or special file after the scan above
            # (the index's read of the log refuses it as every read does).
            later = odd_segments(path, segs.list_segments(path))
            findings.extend(_odd_findings(path, ws, {n: w for n, w in later.items()
                                                     if n not in odd}))
            if not later.keys() - odd.keys():  # moved away again meanwhile
                findings.append(Finding(DAMAGE, "not_a_file", str(exc),
                                        f"tledger check {ws} again"))
        except LedgerError:
            pass  # a log whose state cannot be read: its damage is reported above
    return FileReport(ws, findings, len(scan.segments), scan.rows, scan.bytes, status, scan)


def _split_pairs(pairs: SplitPairs) -> Iterator[Finding]:
    """Notices for tool results whose call is in an earlier window (a
    boundary between a call and its result), and for calls of the active
    window without a result, found by the scan itself
    (``ledger.storage.files.pairs``). Nothing is lost: the provider view
    serves such a result as user text."""
    for s in pairs.found:
        yield Finding(
            NOTICE, "tool_pair_split",
            f"the result of tool call {s.call_id!r} (seq {s.seq}) is in the window of "
            f"boundary {s.boundary}, its call (seq {s.call_seq}) in an earlier window; the "
            "model gets the result as user text",
            "none needed (nothing is lost); runtimes carry the call into the new window "
            "instead (ledger.rollover.engine.carried_rows)",
            ffmt.segment_name(s.segment), s.offset, None, s.seq)
    if pairs.more:
        yield Finding(NOTICE, "tool_pair_split",
                      f"{pairs.more} more split tool pairs not listed", "none needed")
    yield from open_call_findings(pairs.open_calls(), pairs.boundary)


def open_call_findings(waiting: dict[str, list[int]], boundary: int) -> Iterator[Finding]:
    """Notices for tool calls of the active window without a result: a
    process that died mid-tool, an approval never answered. Not damage; the
    next user message settles them (``Conversation``), or
    ``cancel_open_calls(reason)``."""
    open_ = sorted((seq, cid) for cid, seqs in waiting.items() for seq in seqs)
    for seq, cid in open_[:MAX_FINDINGS_PER_CODE]:
        yield Finding(NOTICE, "open_tool_call",
                      f"tool call {cid!r} (seq {seq}) in the active window (boundary "
                      f"{boundary}) has no result",
                      "the next user message settles it with an error result, or "
                      "Conversation.cancel_open_calls(reason)", None, None, None, seq)
    if len(open_) > MAX_FINDINGS_PER_CODE:
        yield Finding(NOTICE, "open_tool_call",
                      f"{len(open_) - MAX_FINDINGS_PER_CODE} more open tool calls not listed",
                      "the next user message settles them")


def _odd_findings(path: str, ws: str, odd: dict[int, str]) -> Iterator[Finding]:
    """Damage for each segment that is not a regular file (``odd_segments``)."""
    for n, what in odd.items():
        yield Finding(DAMAGE, "not_a_file",
                      f"{segs.segment_path(path, n)} is {what}, not a regular file",
                      f"move {ffmt.segment_name(n)} away (or restore the file), then "
                      f"tledger repair {ws}", ffmt.segment_name(n))


def odd_segments(path: str, numbers: list[int]) -> dict[int, str]:
    """Segments that are not regular files (a symlink, a directory, a FIFO,
    a device), with what each is (lstat: nothing is followed or opened)."""
    out = {}
    for n in numbers:
        try:
            mode = os.lstat(segs.segment_path(path, n)).st_mode
        except FileNotFoundError:
            continue
        if not stat_mod.S_ISREG(mode):
            out[n] = segs.describe_mode(mode)
    return out


def odd_format(path: str) -> str | None:
    """What FORMAT is when it is there and not a regular file, else None."""
    try:
        mode = os.lstat(os.path.join(path, ffmt.FORMAT_NAME)).st_mode
    except FileNotFoundError:
        return None
    return None if stat_mod.S_ISREG(mode) else segs.describe_mode(mode)


def _shared_lock(history: FileHistory, held: bool) -> AbstractContextManager[None]:
    """The workspace lock taken shared, or nothing when the caller ``held`` it
    already (repair, under its own lock: the lock is not reentrant)."""
    if held:
        return nullcontext()
    return locked(history.path, history.workspace, history.store.lock_timeout, shared=True)


def _recall_findings(history: FileHistory, held: bool = False) -> Iterator[Finding]:
    """The recall index (a projection for ranked search): notices only, as
    nothing stored is lost with it; repair rebuilds it."""
    if not any(os.path.lexists(os.path.join(history.path, ffmt.RECALL_NAME) + suffix)
               for suffix in recall.SUFFIXES):
        return
    with _shared_lock(history, held):
        st = history.state()
        reader = FileReader(history)

        def read_row(seq: int) -> dict[str, Any] | None:
            try:
                got = reader.locate(st, seq, _NoSkips())
            except LedgerError:
                return None
            return got.row

        found = recall.inspect(history.path, st, read_row)
    for code, message in found:
        if code == "recall_index_unsafe":  # ranked search refuses it until it is moved
            yield Finding(DAMAGE, code, message, f"tledger repair {history.workspace} "
                          "removes it and builds the index again", ffmt.RECALL_NAME)
            continue
        yield Finding(NOTICE, code, message,
                      f"tledger repair {history.workspace} rebuilds it (so does the next "
                      "ranked search, for a stale or damaged one)", ffmt.RECALL_NAME)


def vector_findings(history: FileHistory, held: bool = False) -> Iterator[Finding]:
    """The semantic channel's vectors (a projection beside the recall
    index, ``ledger.storage.files.vectors``): notices, as nothing stored is
    lost with them; a link in their place is damage, as for the index.
    Repair removes them; the next ranked search computes them again."""
    if not os.path.lexists(os.path.join(history.path, ffmt.VECTORS_NAME)):
        return
    with _shared_lock(history, held):
        st = history.state()
        reader = FileReader(history)

        def read_text(seq: int) -> str | None:
            try:
                row = reader.locate(st, seq, _NoSkips()).row
            except LedgerError:
                return None
            return None if row is None or hidden(row) else row_text(row)

        found = vectors.inspect(history.path, st, read_text)
    fix = f"tledger repair {history.workspace} removes them (so does the next ranked search " \
        "with an embedder, for stale or damaged ones)"
    for code, message in found:
        yield Finding(DAMAGE if code == "recall_vectors_unsafe" else NOTICE, code, message,
                      fix, ffmt.VECTORS_NAME)


class _NoSkips:
    def add_skipped(self, seq: int | None, nbytes: int) -> None:
        pass


def _read_format(path: str) -> bytes | None:
    try:
        fd = os.open(os.path.join(path, ffmt.FORMAT_NAME),
                     os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        # Empty: the writer that created it lost power before the bytes reached
        # the disk (durability off). It claims no format; treat it as missing.
        return os.read(fd, 64) or None
    finally:
        os.close(fd)


def lost_floor(path: str, receipt: ffmt.Receipt | None, scan: ScanResult) -> Boundary | None:
    """The newest floor that the receipt, or INDEX for a sealed segment whose
    stamp changed since, recorded and the log no longer holds at or after its
    place (a cut, or damage past recognition), else None."""
    records = [recorded_floor(receipt)]
    numbers = scan.segments
    if len(numbers) > 1:
        index = BoundaryIndex(path)
        for n, stamp in segs.stamps(path, numbers[:-1]):
            records.append(index.recorded_floor(n, stamp))
    lost = None
    for recorded in records:
        if recorded is None:
            continue
        for _ in range(2):
            f = scan.last_floor
            floor = None if f is None else Boundary(f[2], f[0], f[1], "manual",
                                                    readable=f[2] >= 0)
            if covers(floor, recorded, scan.min_seq):
                break
            if scan.hidden_resolved:
                if lost is None or (recorded.segment, recorded.offset) > (
                    lost.segment, lost.offset
                ):
                    lost = recorded
                break
            scan.resolve_hidden()  # a reset behind a duplicate key may be the newer floor
    return lost


def _receipt_findings(ws: str, receipt: ffmt.Receipt | None, status: str, numbers: list[int],
                      stamps: dict[int, ffmt.Stamp], scan: ScanResult) -> Iterator[Finding]:
    rebase = f"the next write re-baselines it (or tledger repair {ws})"
    if not numbers and receipt is None:
        return
    if status in ("missing", "malformed"):
        yield Finding(NOTICE, f"receipt_{status}", f"receipt is {status}; cursors expire", rebase,
                      ffmt.RECEIPT_NAME)
        return
    assert receipt is not None
    if not receipt.stable:
        yield Finding(NOTICE, "receipt_pending",
                      "receipt is pending (a write was interrupted, or its receipt was not "
                      "published); cursors expire", rebase, ffmt.RECEIPT_NAME)
        return
    all_stamps = [(n, stamps[n]) for n in numbers]
    count, digest = ffmt.sealed_digest(all_stamps[:-1])
    active = numbers[-1] if numbers else 0
    if not (receipt.active_segment == active
            and receipt.active == (stamps[active] if active else ffmt.ZERO_STAMP)
            and receipt.sealed_count == count and receipt.sealed_digest == digest):
        yield Finding(NOTICE, "receipt_stale",
                      "receipt stamps do not match the segments (an untracked edit, a copy, or "
                      "a lost write); cursors expire", rebase, ffmt.RECEIPT_NAME)
        return
    problems = []
    want_w = scan.last_boundary
    if (receipt.window_segment, receipt.window_offset) != (
        (want_w[0], want_w[1]) if want_w else (0, 0)
    ):
        problems.append(f"window at {_pos(receipt.window_segment, receipt.window_offset)}, "
                        f"the log says {_pos(*want_w[:2]) if want_w else 'none'}")
    want_f = scan.last_floor
    if (receipt.floor_segment, receipt.floor_offset) != (
        (want_f[0], want_f[1]) if want_f else (0, 0)
    ):
        problems.append(f"privacy floor at {_pos(receipt.floor_segment, receipt.floor_offset)}, "
                        f"the log says {_pos(*want_f[:2]) if want_f else 'none'}")
    if scan.max_seq and receipt.next_seq <= scan.max_seq:
        yield Finding(NOTICE, "receipt_next_seq",
                      f"receipt's next seq {receipt.next_seq} is not above the highest seq in "
                      f"the log ({scan.max_seq}): the next append would reuse a seq",
                      f"tledger repair {ws} (raises it)", ffmt.RECEIPT_NAME)
    if problems:
        yield Finding(DAMAGE, "receipt_disagrees",
                      "receipt stamps match but its content disagrees with the log: "
                      + "; ".join(problems),
                      f"tledger repair {ws} (re-baselines the receipt)", ffmt.RECEIPT_NAME)


def _pos(segment: int, offset: int) -> str:
    return f"{ffmt.segment_name(segment)}@{offset}" if segment else "none"
