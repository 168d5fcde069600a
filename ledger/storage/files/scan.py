"""The read-only scan of a workspace's segments behind the file engine's
check and repair (``check.py``, ``repair.py``): each line verified and
classified (readable row, torn tail, unreadable line that may hide a reset,
duplicate batch), with the damage it finds.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import filterfalse
from operator import itemgetter
from typing import Any

import msgspec

from ledger.core.checks import Progress
from ledger.core.format import files as ffmt
from ledger.core.format import rows as fmt
from ledger.core.windows import classify_reset
from ledger.storage.files import segments as segs
from ledger.storage.files.pairs import PairParts, SplitPairs

RECENT_BATCHES = 4096  # exact duplicate batches are detected among this many recent ones
MAX_FINDINGS_PER_CODE = 1000


def byte_progress(progress: Progress | None, total: int) -> Callable[[int], None] | None:
    """A callback for :func:`scan_paths` that reports the bytes scanned so far,
    out of ``total``, to ``progress`` (None without one)."""
    if progress is None:
        return None
    done = 0

    def tick(n: int) -> None:
        nonlocal done
        done += n
        progress(done, total)

    return tick


class CheckBatch(msgspec.Struct, gc=False):
    id: str
    n: int
    i: int


class CheckRow(msgspec.Struct, gc=False):
    """The part of a stored row that verification needs; the rest is skipped.
    Not tracked by the garbage collector (``gc=False``: decoded JSON holds
    no reference cycle), which makes decoding a chunk cheaper."""

    seq: int
    batch: CheckBatch
    kind: str = "message"
    reset: Any = None  # only read on reset rows; a caller's odd value elsewhere is fine


class PairCheckRow(CheckRow, gc=False):
    """CheckRow and, for check's split-pair notice, the parts' types and ids
    (``ledger.storage.files.pairs``); a chunk whose parts do not decode this
    way goes line by line, where rows decode as plain CheckRow."""

    parts: PairParts | None = None


_decode_row = msgspec.json.Decoder(CheckRow).decode
_too_deep = fmt.too_deep
with_headroom = fmt.with_headroom


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
    min_seq: int | None = None  # the lowest seq of a kept row (None: no row)
    reused: list[tuple[int, int, int]] = field(default_factory=list)  # (segment, offset, seq)
    reused_count: int = 0
    reused_ids: int = 0
    last_boundary: tuple[int, int, int] | None = None  # (segment, offset, seq)
    last_floor: tuple[int, int, int] | None = None
    kept_after_first_damage: int = 0  # verified batches after the first damage
    reset_after_first_damage: bool = False  # any reset or candidate at/after it
    last_kept_seq: int | None = None
    changed_during_scan: list[int] = field(default_factory=list)
    # Resets hidden behind duplicate keys in fast-path chunks are looked for
    # only when they can matter (damage, or a receipt that disagrees); this
    # does it once.
    hidden_resolved: bool = False
    # What :meth:`resolve_hidden` reads: the fast-path chunks (segment,
    # offset, length) and each segment's path. Kept here rather than in a
    # closure over the scanner, which made the result, the closure and the
    # scanner a cycle: a check's call-id and batch maps then lived on until a
    # later collection of the oldest generation walked them.
    fast_chunks: list[tuple[int, int, int]] = field(default_factory=list, repr=False)
    paths: dict[int, str] = field(default_factory=dict, repr=False)

    @property
    def first_damage(self) -> Damage | None:
        return self.damage[0] if self.damage else None

    def resolve_hidden(self) -> None:
        """Look, once, for resets hidden behind duplicate keys in the
        fast-path chunks after the newest boundary or floor found so far
        (only those can move either), then settle what the damage spans."""
        if self.hidden_resolved:
            return
        self.hidden_resolved = True
        marks = [(p[0], p[1]) for p in (self.last_floor, self.last_boundary) if p is not None]
        after = min(marks) if len(marks) == 2 else (-1, -1)
        for number, base, length in self.fast_chunks:
            if (number, base + length) <= after:
                continue
            fd = segs.open_regular(self.paths[number])
            try:
                buf = os.pread(fd, length, base)
            finally:
                os.close(fd)
            for line in segs.split_lines(buf, base):
                data = line.data
                if not may_hide_reset(data):
                    continue
                row = _decode_row(data)
                if row.kind == "reset" or not _is_reset(data, row.kind):
                    continue
                pos = (number, line.offset)
                for attr in ("last_floor", "last_boundary"):
                    cur = getattr(self, attr)
                    if cur is None or pos > (cur[0], cur[1]):
                        setattr(self, attr, (number, line.offset, row.seq))
        self._settle()

    def _settle(self) -> None:
        if not self.damage:
            return
        first = self.damage[0]
        if any(d.may_be_reset for d in self.damage):
            self.reset_after_first_damage = True
        for pos in (self.last_floor, self.last_boundary):
            # A reset anywhere at or after the first damage counts (prefix/tail cut it).
            if pos is not None and (pos[0], pos[1]) >= (first.segment, first.offset):
                self.reset_after_first_damage = True


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
    "too_deep": f"nested deeper than {fmt.MAX_DEPTH} levels (the limit for a row)",
}


def _classify_unreadable(data: bytes) -> str:
    """Why a line without a verified body is unreadable (format functions only)."""
    if fmt.too_deep(data):
        return "too_deep"
    row = fmt.decode_unframed(data)
    if row is not None:
        return "checksum_mismatch" if fmt.CHECKSUM_KEY in row else "unframed_line"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return "invalid_utf8"
    return "unreadable_line"


def may_hide_reset(data: bytes) -> bool:
    """Whether ``fmt.readable_row_is_reset`` can say more than ``kind``.

    A row that decodes hides a reset only behind a second top-level ``kind``
    key (last one wins). In valid JSON that key is written either raw --
    ``"kind"`` then occurs twice -- or with a ``\\u006X`` escape of one of its
    letters (raw control characters are not allowed in JSON strings). A line
    with neither needs no regex search. (tests/recovery/test_scan.py holds this
    against the format's own function.)
    """
    return data.count(b'"kind"') > 1 or b"\\u006" in data


# Each line inside an array of its own (``fmt.one_per_line``): no value runs on
# into the next line.
_decode_lines = msgspec.json.Decoder(tuple[CheckRow]).decode_lines
_decode_pair_lines = msgspec.json.Decoder(tuple[PairCheckRow]).decode_lines
_FIRST = itemgetter(0)
# Read and verified a chunk at a time: 1 MiB stays in the CPU caches across
# the chunk's passes (split, checksums, decode, UTF-8); 4 MiB
# chunks made check about 10% slower (bench/RESULTS.md, issue 31).
CHUNK = 1 << 20


class _Slow(Exception):
    """A chunk that needs the line-by-line path."""


class _Scanner:
    """Streams segments in log order; see the module doc.

    Whole chunks of lines take a fast path (split, verify every checksum,
    ``decode_lines`` into :class:`CheckRow`, UTF-8 once per non-ASCII line);
    a chunk where anything fails is redone line by line to say what and where.
    Either way every row goes through :meth:`_row`, the one state machine for
    batches, duplicates, sequences and boundaries.

    A reset hidden behind a duplicate ``kind`` key (``fmt.readable_row_is_reset``)
    needs a search of the line. The line-by-line path does it for every row;
    the fast path does it only where the answer matters: for rows that end
    up in a damaged span (at once), and, after the scan, for rows after the
    newest boundary and floor found otherwise (:meth:`resolve_hidden`).
    """

    def __init__(self, pairs: SplitPairs | None = None) -> None:
        self.res = ScanResult()
        self.pairs = pairs
        self.decode_lines: Callable[[Any], list[Any]] = (
            _decode_lines if pairs is None else _decode_pair_lines)
        self.recent: OrderedDict[str, tuple[int, int, int]] = OrderedDict()
        self.pending_next: list[Damage] = []

    # --- per segment state -------------------------------------------------

    def _begin(self, number: int) -> None:
        self.number = number
        self.units: list[Damage] = []
        self.run_id: str | None = None
        self.run_n = self.run_start = self.run_end = 0
        self.run_lines: list[bytes] = []
        self.run_rows: list[CheckRow] = []
        self.run_offsets: list[int] = []
        self.orphan: Damage | None = None
        self.orphan_id: str | None = None
        self.pending_reset: tuple[int, int, dict[str, Any]] | None = None
        self.seg_rows = 0

    def _boundary(self, offset: int, seq: int, reason: str) -> None:
        self.res.last_boundary = (self.number, offset, seq)
        if reason == "manual":
            self.res.last_floor = (self.number, offset, seq)

    def _unit(self, d: Damage) -> Damage:
        d.prev_seq = self.res.last_kept_seq
        self.pending_next.append(d)
        self.units.append(d)
        return d

    def _run_reset(self) -> bool:
        return any(_is_reset(line, row.kind)
                   for line, row in zip(self.run_lines, self.run_rows, strict=True))

    def _abort_run(self) -> None:
        if self.run_id is None:
            return
        rows = self.run_rows
        self._unit(Damage(
            self.number, self.run_start, self.run_end - self.run_start, "incomplete_batch",
            f"incomplete batch {self.run_id!r}: {len(rows)} of {self.run_n} rows",
            self._run_reset(), rows[0].seq if rows else None, len(rows),
        ))
        self.run_id = None

    def _flush_reset(self, nxt: dict[str, Any] | None) -> None:
        p_off, p_seq, p_row = self.pending_reset  # type: ignore[misc]
        self._boundary(p_off, p_seq, classify_reset(p_row, nxt))
        self.pending_reset = None

    def _bad(self, off: int, ln: int, data: bytes, code: str) -> None:
        if self.pending_reset is not None:
            self._flush_reset(None)
        cand = fmt.raw_may_be_reset(data)
        if cand:
            self._boundary(off, ffmt.FLOOR_UNREADABLE, "manual")
        elif code != "malformed_row" and fmt.damage_may_hide_reset(data):
            cand = True  # damage may have destroyed a reset's marker: a floor too
            self._boundary(off, ffmt.FLOOR_DAMAGED, "manual")
        self._abort_run()
        self.orphan = None
        self._unit(Damage(self.number, off, ln, code, _CODE_TEXT[code], cand, None, 0))

    def _row(self, off: int, ln: int, data: bytes, row: CheckRow, hidden: bool | None) -> None:
        """One verified row. ``hidden``: whether it hides a reset behind a
        duplicate key, or None when not looked at yet (the fast path)."""
        self.seg_rows += 1
        b = row.batch
        kind = row.kind
        if self.pending_reset is not None:
            self._flush_reset({"kind": kind, "batch": {"id": b.id, "n": b.n, "i": b.i}})
        if kind == "reset":
            info = row.reset
            self.pending_reset = (off, row.seq, {
                "kind": "reset",
                "reset": {"reason": info.get("reason") if isinstance(info, dict) else None},
                "batch": {"id": b.id, "n": b.n, "i": b.i},
            })
        elif hidden:
            self._boundary(off, row.seq, "manual")
        if self.run_id is not None:
            k = len(self.run_rows)
            if b.id == self.run_id and b.i == k and b.n == self.run_n:
                self.run_lines.append(data)
                self.run_rows.append(row)
                self.run_offsets.append(off)
                self.run_end = off + ln
                if k + 1 == self.run_n:
                    self._complete()
                return
            if b.id == self.run_id and 0 <= b.i < k and self.run_lines[b.i][-18:-2] == data[-18:-2]:
                self._unit(Damage(self.number, off, ln, "duplicate_line",
                                  f"exact duplicate of row {b.i} of batch {b.id!r}",
                                  _is_reset(data, kind), row.seq, 1))
                return
            self._abort_run()
        if b.i != 0 or b.n < 1:
            if b.n < 1 or not 0 <= b.i < b.n:
                self.orphan = None
                self._unit(Damage(self.number, off, ln, "malformed_row",
                                  f"batch {b.id!r} has i={b.i}, n={b.n}",
                                  _is_reset(data, kind), row.seq, 1))
                return
            o = self.orphan
            if o is not None and self.orphan_id == b.id and o.end == off:
                o.length += ln
                o.rows += 1
                o.may_be_reset = o.may_be_reset or _is_reset(data, kind)
            else:
                self.orphan = self._unit(Damage(
                    self.number, off, ln, "incomplete_batch",
                    f"incomplete batch {b.id!r}: row {b.i} of {b.n} without the rows before it",
                    _is_reset(data, kind), row.seq, 1))
                self.orphan_id = b.id
            return
        self._start_run(off, ln, data, row)
        if b.n == 1:
            self._complete()

    def _start_run(self, off: int, ln: int, data: bytes, row: CheckRow) -> None:
        """Row 0 of a batch at ``off``: its rows are collected until the batch ends."""
        self.orphan = None
        self.run_id, self.run_n = row.batch.id, row.batch.n
        self.run_start, self.run_end = off, off + ln
        self.run_lines = [data]
        self.run_rows = [row]
        self.run_offsets = [off]

    def _complete(self) -> None:
        res = self.res
        run_id = self.run_id
        assert run_id is not None
        lines = self.run_lines
        sig = hash(lines[0][-18:-2]) if len(lines) == 1 else hash(
            b"".join([line[-18:-2] for line in lines]))
        prior = self.recent.get(run_id)
        rows = self.run_rows
        self.run_id = None
        if prior is not None and prior[0] == sig:
            self._unit(Damage(
                self.number, self.run_start, self.run_end - self.run_start, "duplicate_batch",
                f"exact duplicate of batch {run_id!r} "
                f"({ffmt.segment_name(prior[1])} offset {prior[2]})",
                self._run_reset(), rows[0].seq, len(rows),
            ))
            return
        if prior is not None:
            res.reused_ids += 1
        recent = self.recent
        recent[run_id] = (sig, self.number, self.run_start)
        if len(recent) > RECENT_BATCHES:
            recent.popitem(last=False)
        if self.pending_next:
            for d in self.pending_next:
                d.next_seq = rows[0].seq
            self.pending_next = []
        if res.damage or self.units:
            res.kept_after_first_damage += 1
        top = res.max_seq
        for row, o in zip(rows, self.run_offsets, strict=True):
            s = row.seq
            if s > top:
                top = s
            elif top:
                res.reused_count += 1
                if len(res.reused) < MAX_FINDINGS_PER_CODE:
                    res.reused.append((self.number, o, s))
        res.max_seq = top
        low = min(row.seq for row in rows)
        if res.min_seq is None or low < res.min_seq:
            res.min_seq = low
        res.last_kept_seq = rows[-1].seq
        res.kept_rows += len(rows)

    # --- reading ---------------------------------------------------------------

    def scan_segment(self, number: int, fd: int, progress: Callable[[int], None] | None) -> None:
        self._begin(number)
        for base, buf, end, complete in segs.iter_runs_fd(fd, 0, CHUNK):
            if complete:
                try:
                    self._fast(base, buf, end)
                    self.res.fast_chunks.append((number, base, end))
                except _Slow:
                    self._slow(base, buf[:end])
            else:
                self._slow(base, buf)
            if progress is not None:
                progress(end)
        if self.pending_reset is not None:
            self._flush_reset(None)
        self._abort_run()
        self.res.rows += self.seg_rows
        self.units.sort(key=lambda d: d.offset)
        self.res.damage.extend(self.units)

    def _fast(self, base: int, buf: bytes, end: int) -> None:
        """Whole lines ``buf[:end]`` read from ``base`` (the bytes after
        ``end`` are the start of the next run: split off)."""
        # Each line with its newline (cut by memchr); a row that leaves the
        # inlined cases below goes on without it, as the slow path's do.
        lines = fmt.lines_of(buf, end)
        try:
            if not fmt.all_verified_lines(lines):
                raise _Slow
            data = fmt.one_per_line(lines)
            # None: a line may nest deeper than the limit (or the caller's
            # stack is too deep to tell): decided line by line.
            rows = fmt.shallow_lines(self.decode_lines, data, data)
            if rows is None:
                if any(map(_too_deep, lines)):
                    raise _Slow
                rows = with_headroom(self.decode_lines, data)
            if len(rows) != len(lines):
                raise _Slow
            rows = list(map(_FIRST, rows))
            # UTF-8 of the lines with a byte past ASCII (msgspec does not
            # read the strings it skips), picked out in C line by line (no
            # pass over the whole chunk first: most chunks hold such a line).
            for line in filterfalse(bytes.isascii, lines):
                line.decode("utf-8")
        except (msgspec.DecodeError, UnicodeDecodeError):
            raise _Slow from None
        off = base
        res = self.res
        recent = self.recent
        number = self.number
        row_fn = self._row
        # The common cases -- a whole batch of one or more rows, or the start
        # or next row of a longer one, in a stretch with no damage, no reset
        # and rising seqs -- are what _row and _complete do, inlined (most of
        # the scan's Python time); everything else goes through _row.
        # ``plain``: no damage found and no reset pending, so the inlined
        # cases apply; only _row and _complete change that.
        plain = self.pending_reset is None and not res.damage and not self.units
        i = 0
        count = len(rows)
        while i < count:
            line = lines[i]
            row = rows[i]
            ln = len(line)
            b = row.batch
            if not plain or row.kind == "reset":
                row_fn(off, ln, line[:-1], row, None)
                plain = self.pending_reset is None and not res.damage and not self.units
            elif self.run_id is None:
                k = b.n
                if b.i != 0 or k < 1:
                    row_fn(off, ln, line[:-1], row, None)
                    plain = self.pending_reset is None and not res.damage and not self.units
                elif recent.get(b.id) is not None or row.seq <= res.max_seq:
                    row_fn(off, ln, line[:-1], row, None)
                    plain = self.pending_reset is None and not res.damage and not self.units
                else:
                    end = i + k
                    top = row.seq
                    whole = end <= count
                    if whole and k > 1:
                        bid = b.id
                        for m in range(1, k):
                            r2 = rows[i + m]
                            b2 = r2.batch
                            if (b2.id != bid or b2.i != m or b2.n != k or r2.kind == "reset"
                                    or r2.seq <= top):
                                whole = False
                                break
                            top = r2.seq
                    if whole:
                        # The whole batch is here, in order: kept as _complete keeps it.
                        # (each checksum's hex at [-19:-3], before '"}\n', as _complete's)
                        if k == 1:
                            sig = hash(line[-19:-3])
                        else:
                            batch_lines = lines[i:end]
                            sig = hash(b"".join([x[-19:-3] for x in batch_lines]))
                            ln = sum(map(len, batch_lines))
                        recent[b.id] = (sig, number, off)
                        if len(recent) > RECENT_BATCHES:
                            recent.popitem(last=False)
                        res.max_seq = res.last_kept_seq = top
                        if res.min_seq is None:
                            res.min_seq = row.seq  # the first kept row, above every seq before
                        res.kept_rows += k
                        self.seg_rows += k
                        self.orphan = None
                        off += ln
                        i = end
                        continue
                    self.seg_rows += 1
                    self._start_run(off, ln, line[:-1], row)
            elif b.id == self.run_id and b.i == len(self.run_rows) and b.n == self.run_n:
                self.seg_rows += 1
                self.run_lines.append(line[:-1])
                self.run_rows.append(row)
                self.run_offsets.append(off)
                self.run_end = off + ln
                if b.i + 1 == b.n:
                    self._complete()
                    plain = self.pending_reset is None and not res.damage and not self.units
            else:
                row_fn(off, ln, line[:-1], row, None)
                plain = self.pending_reset is None and not res.damage and not self.units
            off += ln
            i += 1
        if self.pairs is not None:
            self.pairs.rows(number, base, lines, rows)

    def _slow(self, base: int, buf: bytes) -> None:
        for line in segs.split_lines(buf, base):
            data = line.data
            ln = len(data) + 1 if line.complete else len(data)
            if not line.complete:
                self._bad(line.offset, ln, data, "torn_line")
                continue
            body = fmt.body_of(data)
            if body is None:
                self._bad(line.offset, ln, data, _classify_unreadable(data))
                continue
            if _too_deep(body):
                self._bad(line.offset, ln, data, "too_deep")
                continue
            try:
                row = with_headroom(_decode_row, body)
            except msgspec.DecodeError:
                self._bad(line.offset, ln, data, "malformed_row")
                continue
            if not data.isascii():
                try:
                    data.decode("utf-8")
                except UnicodeDecodeError:
                    self._bad(line.offset, ln, data, "invalid_utf8")
                    continue
            hidden = row.kind != "reset" and _is_reset(data, row.kind)
            self._row(line.offset, ln, data, row, hidden)
            if self.pairs is not None:
                self.pairs.line(self.number, line.offset, body, row.seq, row.kind)

def _is_reset(line: bytes, kind: str) -> bool:
    """``fmt.readable_row_is_reset`` for a verified row, searched only when
    the line could hide a reset (see may_hide_reset)."""
    return kind == "reset" or (
        may_hide_reset(line) and fmt.readable_row_is_reset(line, {"kind": kind})
    )


def scan_paths(paths: list[tuple[int, str]], *, expected: dict[int, ffmt.Stamp] | None = None,
               progress: Callable[[int], None] | None = None,
               pairs: SplitPairs | None = None) -> ScanResult:
    """Scan segments given as (number, path) in log order; with ``pairs``,
    also feed it every verified row (check's split-pair notice)."""
    sc = _Scanner(pairs)
    for number, path in paths:
        try:
            fd = segs.open_regular(path)
        except FileNotFoundError:
            sc.res.changed_during_scan.append(number)
            continue
        try:
            st = os.fstat(fd)
            if (expected is not None and number in expected
                    and ffmt.Stamp.of(st) != expected[number]):
                sc.res.changed_during_scan.append(number)
            sc.res.segments.append(number)
            sc.res.sizes[number] = st.st_size
            sc.res.bytes += st.st_size
            sc.scan_segment(number, fd, progress)
        finally:
            os.close(fd)
    res = sc.res
    res.paths = dict(paths)
    if res.damage:
        res.resolve_hidden()  # repair's policies need every reset at or after the first damage
    return res



