"""``tledger check``: read-only verification of a history.

What is verified, line by line and streaming (memory is bounded by the
longest line and the largest batch, never by the history): framing and every
row's checksum (``ledger.format.body_of``), that the body decodes as a row
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
temp files, leftover tombstones.

Nothing is created or written, so ``check`` works on a read-only copy. The
shared lock is held only while the receipt, the stamps and the active
segment are captured; sealed segments never change in place, so each is
opened afterwards and its stamp compared with the snapshot (a concurrent
rewrite is reported as a notice: run check again).
"""

from __future__ import annotations

import os
import stat as stat_mod
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec

from ledger import format as fmt
from ledger import rewrite
from ledger import segments as segs
from ledger.errors import FormatError, WorkspaceNotFound
from ledger.history import History
from ledger.lock import locked
from ledger.receipt import read_receipt, receipt_status
from ledger.windows import classify_reset

DAMAGE = "damage"
NOTICE = "notice"
RECENT_BATCHES = 1 << 16  # duplicate batches are detected among this many recent ones
MAX_FINDINGS_PER_CODE = 1000

Progress = Callable[[int, int], None]


class CheckBatch(msgspec.Struct):
    id: str
    n: int
    i: int


class CheckRow(msgspec.Struct):
    """The part of a stored row that verification needs; the rest is skipped."""

    seq: int
    batch: CheckBatch
    kind: str = "message"
    reset: Any = None  # only read on reset rows; a caller's odd value elsewhere is fine


_decode_row = msgspec.json.Decoder(CheckRow).decode


@dataclass
class Finding:
    severity: str
    code: str
    message: str
    action: str
    segment: str | None = None
    offset: int | None = None
    length: int | None = None
    seq: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"severity": self.severity, "code": self.code, "segment": self.segment,
                "offset": self.offset, "length": self.length, "seq": self.seq,
                "message": self.message, "action": self.action}


@dataclass
class Damage:
    """A span of one segment that fails verification (what repair removes)."""

    segment: int
    offset: int
    length: int
    code: str
    reason: str
    may_be_reset: bool
    seq: int | None
    rows: int
    prev_seq: int | None = None  # last verified seq before it in log order
    next_seq: int | None = None  # first verified seq after it

    @property
    def end(self) -> int:
        return self.offset + self.length


@dataclass
class ScanResult:
    """What a scan of every segment found."""

    segments: list[int] = field(default_factory=list)
    sizes: dict[int, int] = field(default_factory=dict)
    damage: list[Damage] = field(default_factory=list)
    rows: int = 0
    kept_rows: int = 0
    bytes: int = 0
    max_seq: int = 0
    reused: list[tuple[int, int, int]] = field(default_factory=list)  # (segment, offset, seq)
    reused_count: int = 0
    reused_ids: int = 0
    last_boundary: tuple[int, int, int] | None = None  # (segment, offset, seq)
    last_floor: tuple[int, int, int] | None = None
    kept_after_first_damage: int = 0  # verified batches after the first damage
    reset_after_first_damage: bool = False  # any reset or candidate at/after it
    last_kept_seq: int | None = None
    changed_during_scan: list[int] = field(default_factory=list)

    @property
    def first_damage(self) -> Damage | None:
        return self.damage[0] if self.damage else None


_CODE_TEXT = {
    "torn_line": "torn line (no newline at the end of the segment)",
    "checksum_mismatch": "checksum mismatch",
    "unframed_line": "line without a checksum (written or edited outside the store)",
    "unreadable_line": "unreadable line (not a JSON object)",
    "invalid_utf8": "invalid UTF-8",
    "malformed_row": "checksum verifies but the row is malformed (no integer seq or batch)",
    "incomplete_batch": "incomplete batch",
    "duplicate_line": "exact duplicate of a line of the same batch",
    "duplicate_batch": "exact duplicate of an earlier batch",
}


def _classify_unreadable(data: bytes) -> str:
    """Why a line without a verified body is unreadable (format functions only)."""
    row = fmt.decode_unframed(data)
    if row is not None:
        return "checksum_mismatch" if fmt.CHECKSUM_KEY in row else "unframed_line"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return "invalid_utf8"
    return "unreadable_line"


def _may_hide_reset(data: bytes) -> bool:
    """Cheap pre-test for ``fmt.readable_row_is_reset`` on a row that verifies.

    In a line that decodes as JSON, the word ``reset`` of a hidden duplicate
    ``"kind":"reset"`` key can only be written raw or with ``\\u`` escapes
    (raw control characters are not valid inside JSON strings), so a line
    holding neither needs no regex search.
    """
    return b"reset" in data or b"\\u" in data


class _Scanner:
    """Streams segments in log order; see the module doc."""

    def __init__(self) -> None:
        self.res = ScanResult()
        self.recent: OrderedDict[str, tuple[int, int, int]] = OrderedDict()
        self.pending_next: list[Damage] = []

    def scan_segment(self, number: int, fd: int, progress: Callable[[int], None] | None) -> None:
        res = self.res
        units: list[Damage] = []
        kept: list[tuple[int, int, int]] = []  # (offset, first_seq, last_seq) of whole batches
        run_id: str | None = None
        run_n = run_next = run_start = run_end = 0
        run_sums: list[bytes] = []
        run_seqs: list[int] = []
        run_offsets: list[int] = []
        run_reset = False
        orphan: Damage | None = None
        orphan_id: str | None = None
        pending_reset: tuple[int, int, dict[str, Any]] | None = None
        seg_rows = 0
        done = 0
        last_report = 0

        def boundary(offset: int, seq: int, reason: str) -> None:
            res.last_boundary = (number, offset, seq)
            if reason == "manual":
                res.last_floor = (number, offset, seq)

        def abort_run() -> None:
            nonlocal run_id
            if run_id is None:
                return
            units.append(Damage(
                number, run_start, run_end - run_start, "incomplete_batch",
                f"incomplete batch {run_id!r}: {run_next} of {run_n} rows",
                run_reset, run_seqs[0] if run_seqs else None, len(run_seqs),
            ))
            run_id = None

        def unit(offset: int, length: int, code: str, cand: bool, seq: int | None = None,
                 rows: int = 0, reason: str | None = None) -> None:
            units.append(Damage(number, offset, length, code, reason or _CODE_TEXT[code], cand,
                                seq, rows))

        for line in segs.iter_lines_fd(fd):
            data = line.data
            off = line.offset
            ln = len(data) + 1 if line.complete else len(data)
            done += ln
            if progress is not None and done - last_report >= (4 << 20):
                progress(done - last_report)
                last_report = done
            row = None
            code = None
            if not line.complete:
                code = "torn_line"
            else:
                body = fmt.body_of(data)
                if body is None:
                    code = _classify_unreadable(data)
                else:
                    try:
                        row = _decode_row(body)
                    except msgspec.DecodeError:
                        code = "malformed_row"
                    else:
                        if not data.isascii():
                            try:
                                data.decode("utf-8")
                            except UnicodeDecodeError:
                                row, code = None, "invalid_utf8"
            if row is None:
                assert code is not None
                if pending_reset is not None:
                    p_off, p_seq, p_row = pending_reset
                    boundary(p_off, p_seq, classify_reset(p_row, None))
                    pending_reset = None
                cand = fmt.raw_may_be_reset(data)
                if cand:
                    boundary(off, fmt.FLOOR_UNREADABLE, "manual")
                abort_run()
                orphan = None
                unit(off, ln, code, cand)
                continue
            seg_rows += 1
            b = row.batch
            seq = row.seq
            kind = row.kind
            is_reset = kind == "reset" or (
                _may_hide_reset(data) and fmt.readable_row_is_reset(data, {"kind": kind})
            )
            if pending_reset is not None:
                p_off, p_seq, p_row = pending_reset
                nxt = {"kind": kind, "batch": {"id": b.id, "n": b.n, "i": b.i}}
                boundary(p_off, p_seq, classify_reset(p_row, nxt))
                pending_reset = None
            if is_reset:
                if kind == "reset":
                    info = row.reset
                    reason = info.get("reason") if isinstance(info, dict) else None
                    pending_reset = (off, seq, {
                        "kind": "reset", "reset": {"reason": reason},
                        "batch": {"id": b.id, "n": b.n, "i": b.i},
                    })
                else:
                    boundary(off, seq, "manual")
            # -- batch runs
            if run_id is not None:
                if b.id == run_id and b.i == run_next and b.n == run_n:
                    run_next += 1
                    run_end = off + ln
                    run_sums.append(data[-18:-2])
                    run_seqs.append(seq)
                    run_offsets.append(off)
                    run_reset = run_reset or is_reset
                elif b.id == run_id and 0 <= b.i < run_next and run_sums[b.i] == data[-18:-2]:
                    unit(off, ln, "duplicate_line", is_reset, seq, 1,
                         f"exact duplicate of row {b.i} of batch {b.id!r}")
                    continue
                else:
                    abort_run()
            if run_id is None:
                if b.n < 1 or not 0 <= b.i < b.n:
                    orphan = None
                    unit(off, ln, "malformed_row", is_reset, seq, 1,
                         f"batch {b.id!r} has i={b.i}, n={b.n}")
                    continue
                if b.i != 0:
                    if orphan is not None and orphan_id == b.id and orphan.end == off:
                        orphan.length += ln
                        orphan.rows += 1
                        orphan.may_be_reset = orphan.may_be_reset or is_reset
                    else:
                        orphan = Damage(number, off, ln, "incomplete_batch",
                                        f"incomplete batch {b.id!r}: row {b.i} of {b.n} without "
                                        "the rows before it", is_reset, seq, 1)
                        orphan_id = b.id
                        units.append(orphan)
                    continue
                orphan = None
                run_id, run_n, run_next = b.id, b.n, 1
                run_start, run_end = off, off + ln
                run_sums = [data[-18:-2]]
                run_seqs = [seq]
                run_offsets = [off]
                run_reset = is_reset
            if run_next == run_n:
                sig = hash(b"".join(run_sums))
                prior = self.recent.get(run_id)
                if prior is not None and prior[0] == sig:
                    units.append(Damage(
                        number, run_start, run_end - run_start, "duplicate_batch",
                        f"exact duplicate of batch {run_id!r} "
                        f"({fmt.segment_name(prior[1])} offset {prior[2]})",
                        run_reset, run_seqs[0], len(run_seqs),
                    ))
                else:
                    if prior is not None:
                        res.reused_ids += 1
                    self.recent[run_id] = (sig, number, run_start)
                    self.recent.move_to_end(run_id)
                    if len(self.recent) > RECENT_BATCHES:
                        self.recent.popitem(last=False)
                    kept.append((run_start, run_seqs[0], run_seqs[-1]))
                    for s, o in zip(run_seqs, run_offsets, strict=True):
                        if s <= res.max_seq and res.max_seq:
                            res.reused_count += 1
                            if len(res.reused) < MAX_FINDINGS_PER_CODE:
                                res.reused.append((number, o, s))
                        if s > res.max_seq:
                            res.max_seq = s
                    res.kept_rows += len(run_seqs)
                run_id = None
        if pending_reset is not None:
            p_off, p_seq, p_row = pending_reset
            boundary(p_off, p_seq, classify_reset(p_row, None))
        abort_run()
        if progress is not None and done > last_report:
            progress(done - last_report)
        res.rows += seg_rows
        self._settle_segment(number, units, kept)

    def _settle_segment(self, number: int, units: list[Damage],
                        kept: list[tuple[int, int, int]]) -> None:
        res = self.res
        units.sort(key=lambda d: d.offset)
        events: list[tuple[int, int, Any]] = [(d.offset, 1, d) for d in units]
        events += [(k[0], 0, k) for k in kept]
        events.sort(key=lambda e: (e[0], e[1]))
        for _, is_damage, item in events:
            if is_damage:
                d = item
                d.prev_seq = res.last_kept_seq
                self.pending_next.append(d)
                if not res.damage:
                    res.reset_after_first_damage = d.may_be_reset
                res.damage.append(d)
                if d.may_be_reset:
                    res.reset_after_first_damage = True
            else:
                _, first, last = item
                for d in self.pending_next:
                    d.next_seq = first
                self.pending_next = []
                res.last_kept_seq = last
                if res.damage:
                    res.kept_after_first_damage += 1
        if res.damage and (res.last_floor is not None or res.last_boundary is not None):
            # A reset anywhere at or after the first damage counts (prefix/tail cut it).
            fd = res.damage[0]
            for pos in (res.last_floor, res.last_boundary):
                if pos is not None and (pos[0], pos[1]) >= (fd.segment, fd.offset):
                    res.reset_after_first_damage = True


def scan_paths(paths: list[tuple[int, str]], *, expected: dict[int, fmt.Stamp] | None = None,
               progress: Callable[[int], None] | None = None) -> ScanResult:
    """Scan segments given as (number, path) in log order."""
    sc = _Scanner()
    for number, path in paths:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except FileNotFoundError:
            sc.res.changed_during_scan.append(number)
            continue
        try:
            st = os.fstat(fd)
            if expected is not None and number in expected and fmt.Stamp.of(st) != expected[number]:
                sc.res.changed_during_scan.append(number)
            sc.res.segments.append(number)
            sc.res.sizes[number] = st.st_size
            sc.res.bytes += st.st_size
            sc.scan_segment(number, fd, progress)
        finally:
            os.close(fd)
    return sc.res


@dataclass
class Report:
    """The result of ``check``: findings plus what was scanned."""

    workspace: str
    findings: list[Finding]
    segments: int
    rows: int
    bytes: int
    receipt: str
    scan: ScanResult | None = None

    @property
    def damage(self) -> int:
        return sum(1 for f in self.findings if f.severity == DAMAGE)

    @property
    def notices(self) -> int:
        return sum(1 for f in self.findings if f.severity == NOTICE)

    @property
    def ok(self) -> bool:
        return self.damage == 0

    def to_dict(self) -> dict[str, Any]:
        return {"workspace": self.workspace, "ok": self.ok, "damage": self.damage,
                "notices": self.notices, "segments": self.segments, "rows": self.rows,
                "bytes": self.bytes, "receipt": self.receipt,
                "findings": [f.to_dict() for f in self.findings]}

    def text(self) -> str:
        lines = []
        for f in self.findings:
            where = f.segment or "-"
            if f.offset is not None:
                where += f"@{f.offset}"
            seq = f" seq={f.seq}" if f.seq is not None else ""
            length = f" ({f.length} bytes)" if f.length is not None else ""
            lines.append(f"{f.severity:6} {where}{seq}: {f.message}{length} -- {f.action}")
        verdict = "damaged" if self.damage else "ok"
        lines.append(
            f"{self.workspace}: {verdict}: {self.damage} damage, {self.notices} notices "
            f"({self.segments} segments, {self.rows} rows, {self.bytes} bytes; receipt "
            f"{self.receipt})"
        )
        return "\n".join(lines)


def damage_findings(workspace: str, scan: ScanResult) -> Iterator[Finding]:
    action = f"tledger repair {workspace} (bytes go to quarantine)"
    counts: dict[str, int] = {}
    for d in scan.damage:
        counts[d.code] = counts.get(d.code, 0) + 1
        if counts[d.code] > MAX_FINDINGS_PER_CODE:
            continue
        msg = d.reason + ("; may be a reset: it counts as a privacy floor" if d.may_be_reset
                          else "")
        yield Finding(DAMAGE, d.code, msg, action, fmt.segment_name(d.segment), d.offset,
                      d.length, d.seq)
    for code, n in counts.items():
        if n > MAX_FINDINGS_PER_CODE:
            yield Finding(DAMAGE, code, f"{n - MAX_FINDINGS_PER_CODE} more {code} findings "
                          "not listed", action)


def check(history: History, *, progress: Progress | None = None) -> Report:
    """Verify ``history`` without writing anything (module doc)."""
    if not history.exists():
        raise WorkspaceNotFound(
            f"workspace {history.workspace!r} has no history under {history.store.root}"
        )
    path = history.path
    ws = history.workspace
    findings: list[Finding] = []
    with locked(path, ws, history.store.lock_timeout, shared=True):
        numbers = segs.list_segments(path)
        stamps = dict(segs.stamps(path, numbers))
        receipt = read_receipt(path)
        status = receipt_status(path)
        temps = segs.stray_temps(path)
        marker = os.path.lexists(os.path.join(path, rewrite.MARKER_NAME))
        tombs = rewrite.native_tombstones(path)
        format_text = _read_format(path)
        odd = [n for n in numbers if not stat_mod.S_ISREG(
            os.lstat(segs.segment_path(path, n)).st_mode)]
    if format_text is not None and format_text != fmt.FORMAT_TEXT:
        raise FormatError(
            f"workspace {ws!r}: FORMAT is {format_text[:40]!r}, this build checks "
            f"{fmt.FORMAT_TEXT!r}; use a build that knows that format"
        )
    total = sum(s.size for s in stamps.values())
    done = 0

    def tick(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress(done, total)

    scan = scan_paths(
        [(n, segs.segment_path(path, n)) for n in numbers if n not in odd],
        expected=stamps, progress=tick if progress is not None else None,
    )
    for n in odd:
        findings.append(Finding(DAMAGE, "not_a_file", "segment is not a regular file",
                                f"move {fmt.segment_name(n)} away and run tledger repair {ws}",
                                fmt.segment_name(n)))
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
                                "run check again", fmt.segment_name(number)))
    for number, offset, seq in scan.reused:
        findings.append(Finding(NOTICE, "reused_seq",
                                f"seq {seq} is not above every seq before it (repaired or "
                                "imported content, or reordered lines)",
                                "none needed: such rows are kept",
                                fmt.segment_name(number), offset, None, seq))
    if scan.reused_count > len(scan.reused):
        findings.append(Finding(NOTICE, "reused_seq",
                                f"{scan.reused_count - len(scan.reused)} more reused seqs",
                                "none needed"))
    if scan.reused_ids:
        findings.append(Finding(NOTICE, "reused_batch_id",
                                f"{scan.reused_ids} batch id(s) used by more than one batch",
                                "none needed"))
    findings.extend(_receipt_findings(ws, receipt, status, numbers, stamps, scan))
    for name in temps:
        findings.append(Finding(NOTICE, "stray_temp_file",
                                "temp file of a writer that died before its rename "
                                "(an uncommitted batch)",
                                "the next write removes it; repair quarantines it", name))
    if format_text is None and numbers:
        findings.append(Finding(NOTICE, "format_missing", "FORMAT file is missing",
                                "the next write or repair writes it"))
    return Report(ws, findings, len(scan.segments), scan.rows, scan.bytes, status, scan)


def _read_format(path: str) -> bytes | None:
    try:
        fd = os.open(os.path.join(path, fmt.FORMAT_NAME),
                     os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, 64)
    finally:
        os.close(fd)


def _receipt_findings(ws: str, receipt: fmt.Receipt | None, status: str, numbers: list[int],
                      stamps: dict[int, fmt.Stamp], scan: ScanResult) -> Iterator[Finding]:
    rebase = f"the next write re-baselines it (or tledger repair {ws})"
    if not numbers and receipt is None:
        return
    if status in ("missing", "malformed"):
        yield Finding(NOTICE, f"receipt_{status}", f"receipt is {status}; cursors expire", rebase,
                      fmt.RECEIPT_NAME)
        return
    assert receipt is not None
    if not receipt.stable:
        yield Finding(NOTICE, "receipt_pending",
                      "receipt is pending (a write was interrupted, or its receipt was not "
                      "published); cursors expire", rebase, fmt.RECEIPT_NAME)
        return
    all_stamps = [(n, stamps[n]) for n in numbers]
    count, digest = fmt.sealed_digest(all_stamps[:-1])
    active = numbers[-1] if numbers else 0
    if not (receipt.active_segment == active
            and receipt.active == (stamps[active] if active else fmt.ZERO_STAMP)
            and receipt.sealed_count == count and receipt.sealed_digest == digest):
        yield Finding(NOTICE, "receipt_stale",
                      "receipt stamps do not match the segments (an untracked edit, a copy, or "
                      "a lost write); cursors expire", rebase, fmt.RECEIPT_NAME)
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
                      f"tledger repair {ws} (raises it)", fmt.RECEIPT_NAME)
    if problems:
        yield Finding(DAMAGE, "receipt_disagrees",
                      "receipt stamps match but its content disagrees with the log: "
                      + "; ".join(problems),
                      f"tledger repair {ws} (re-baselines the receipt)", fmt.RECEIPT_NAME)


def _pos(segment: int, offset: int) -> str:
    return f"{fmt.segment_name(segment)}@{offset}" if segment else "none"
