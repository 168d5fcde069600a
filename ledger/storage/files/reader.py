"""The file engine's page reader (``ledger.storage.engine.PageReader``, its
state a ``State``): bounded scans over the segments, lookups through the
INDEX projection, and what a cursor binds to (the receipt's epoch and layout,
else a digest of every stamp).

Positions are ``(segment number, byte offset)``. A line over LINE_CAP is
resumed past, mid-line if need be: the position then has ``skip`` set.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import msgspec

from ledger.core import cursors
from ledger.core.bounds import LINE_CAP, SCAN_BYTES, SCAN_ROWS, Budget, Event, SkipSink
from ledger.core.cursors import SEEKING, CursorData, Position
from ledger.core.errors import (
    CursorExpired,
    HistoryDamaged,
    LedgerError,
    NotFound,
    Unavailable,
)
from ledger.core.format import files as ffmt
from ledger.core.format import rows as fmt
from ledger.core.ranking import Query
from ledger.core.searchable import hidden, row_text
from ledger.core.windows import Boundary, window_marker
from ledger.storage import vectors
from ledger.storage.engine import Candidate, Located
from ledger.storage.files import segments as segs
from ledger.storage.files.lock import locked
from ledger.storage.files.recall import DAMAGE_ERRORS, Damaged, Mark, RecallIndex, layout_of
from ledger.storage.files.state import State
from ledger.storage.files.vectors import FileVectors

if TYPE_CHECKING:
    from ledger.storage.files.ports import FileHistory

_CHUNK = 256 * 1024
# What a semantic search says when the index changed under its reads
# (a read of it failed its checks meanwhile): the call may be retried.
_CHANGED_UNDER_VECTORS = "the recall index changed while the semantic channel read it; retry"


@dataclass
class Scan:
    """The file engine's ``PageScan``: lines of ``segments`` from ``start``
    up to ``end`` within one call's budget."""

    wsdir: str
    segments: list[int]
    start: Position
    end: Position
    budget: Budget = field(default_factory=Budget)
    paused: Position | None = None
    skip_from: int = -1
    skip_seq: int | None = None
    # True when a run of lines may hold a match (or a boundary); None: off.
    prefilter: Callable[[bytes], bool] | None = None

    def __post_init__(self) -> None:
        self.skip_from = self.start.skip_from
        self.skip_seq = self.start.skip_seq

    def events(self) -> Iterator[Event]:
        pos = self.start
        for number in self.segments:
            if number < pos.part or number > self.end.part:
                continue
            first = number == pos.part
            offset = pos.offset if first else 0
            skip = pos.skip if first else False
            path = segs.segment_path(self.wsdir, number)
            try:
                fd = segs.open_regular(path)
            except FileNotFoundError:
                raise CursorExpired("a segment vanished; start a new query") from None
            try:
                limit = self.end.offset if number == self.end.part else os.fstat(fd).st_size
                yield from self._segment(fd, number, offset, limit, skip)
            finally:
                os.close(fd)
            if self.paused is not None:
                return
        self.paused = None

    def _skip_pos(self, number: int, offset: int) -> Position:
        return Position(number, offset, True, 0, self.skip_from, self.skip_seq)

    def _segment(
        self, fd: int, number: int, offset: int, limit: int, skip: bool
    ) -> Iterator[Event]:
        budget = self.budget
        buf = b""  # holds the bytes [base, base + len(buf))
        base = offset
        i = 0  # the first byte of buf not yet consumed
        checked = 0  # buf[:checked] already went through the prefilter
        while True:
            if skip:
                pos = base + i
                if pos >= limit:
                    return
                want = min(_CHUNK, limit - pos, SCAN_BYTES - budget.bytes_read)
                if want <= 0:
                    self.paused = self._skip_pos(number, pos)
                    return
                data = os.pread(fd, want, pos)
                budget.bytes_read += len(data)
                if not data:
                    return
                nl = data.find(b"\n")
                if nl < 0:
                    buf, base, i = b"", pos + len(data), 0
                    continue
                end = pos + nl + 1
                buf, base, i = b"", end, 0
                skip = False
                if self.skip_from >= 0:
                    yield Event(number, self.skip_from, end, None, b"", True, self.skip_seq)
                    self.skip_from, self.skip_seq = -1, None
                else:
                    budget.rows += 1  # the floor line: read, so examined
                continue
            if self.prefilter is not None and i >= checked:
                # Skip whole runs of lines that cannot match, counting them.
                last = buf.rfind(b"\n", i)
                if last >= i:
                    region = buf[i : last + 1]
                    count = region.count(b"\n")
                    room = SCAN_ROWS - budget.rows
                    if 0 < room < count:
                        # Test just the lines this call may still examine.
                        pos = i
                        for _ in range(room):
                            pos = buf.find(b"\n", pos) + 1
                        last, region, count = pos - 1, buf[i:pos], room
                    if (
                        len(region) <= LINE_CAP
                        and budget.rows + count <= SCAN_ROWS
                        and not self.prefilter(region)
                    ):
                        budget.rows += count
                        i = last + 1
                        continue
                    checked = last + 1
            nl = buf.find(b"\n", i)
            if nl >= 0:
                if budget.rows >= SCAN_ROWS:
                    self.paused = Position(number, base + i)
                    return
                budget.rows += 1
                if nl - i > LINE_CAP:
                    seq = fmt.seq_prefix(buf[i : i + 32])
                    yield Event(number, base + i, base + nl + 1, None, b"", True, seq)
                elif self.prefilter is not None and not self.prefilter(buf[i:nl]):
                    pass  # cannot match: examined, not decoded
                else:
                    line = buf[i:nl]
                    yield Event(number, base + i, base + nl + 1, fmt.decode_line(line), line)
                if self.paused is not None:
                    return
                i = nl + 1
                continue
            if len(buf) - i > LINE_CAP:
                if budget.rows >= SCAN_ROWS:
                    self.paused = Position(number, base + i)
                    return
                budget.rows += 1
                self.skip_from, self.skip_seq = base + i, fmt.seq_prefix(buf[i : i + 32])
                base, buf, i = base + len(buf), b"", 0
                skip = True
                continue
            read_to = base + len(buf)
            if read_to >= limit:
                return  # a torn tail beyond the snapshot is not served
            want = min(_CHUNK, limit - read_to, SCAN_BYTES - budget.bytes_read)
            if want <= 0:
                self.paused = Position(number, base + i)
                return
            data = os.pread(fd, want, read_to)
            if not data:
                return
            budget.bytes_read += len(data)
            buf = buf[i:] + data
            base += i
            checked = max(checked - i, 0)
            i = 0

    def pause_at(self, pos: Position) -> None:
        self.paused = pos


class FileReader:
    """The file engine's ``PageReader[State]`` for one workspace (module doc)."""

    def __init__(self, ws: FileHistory) -> None:
        self.ws = ws
        self._recall: RecallIndex | None = None
        self._vectors: FileVectors | None = None

    def prepare_ranked(self) -> None:
        """Nothing: ``ranked`` brings the recall index up to date under the lock."""

    def ranked(
        self, st: State, query: Query, after: int, high: int, window: int | None
    ) -> list[Candidate]:
        """From the recall index (``ledger.storage.files.recall``), brought
        up to the log (under ``locked()``)."""
        return self._index().search(st, layout_of(st), query, after, high, window,
                                    self.ws.appended)

    def read_order(self, seqs: list[int]) -> None:
        """Nothing: each row is read back where the index saw it."""

    def similar(
        self, st: State, text: str, after: int, high: int, window: int | None
    ) -> list[Candidate]:
        """From the vectors beside the recall index (``ledger.storage.files.
        vectors``), caught up with it (under ``locked()``, after ``ranked``)."""
        embedder = self.ws.store.embedder
        if embedder is None:
            return []
        recall, mark = self.refresh_recall(st)
        if self._vectors is None:
            self._vectors = FileVectors(self.ws.path)
        try:
            vs = vectors.ready(self._vectors, embedder, mark.epoch, mark.floor, mark.upto,
                               recall.docs_after, lambda docs: self._texts(st, docs))
        except OSError as exc:
            raise Unavailable(f"the semantic channel's vectors cannot be kept: {exc}") from None
        except (Damaged, *DAMAGE_ERRORS):
            raise Unavailable(_CHANGED_UNDER_VECTORS) from None
        found = vs.similar(vectors.query_vector(embedder, text), after, high, window)
        # Read where the index has each row now (and its size), as the
        # lexical candidates are: a vector's place is where the row was when
        # embedded, before any merge since.
        try:
            at = recall.places_of(mark, [c[0] for c in found if c[0] not in recall.sizes])
        except (Damaged, *DAMAGE_ERRORS):
            raise Unavailable(_CHANGED_UNDER_VECTORS) from None
        return [(seq, win, cos, at.get(seq, hint)) for seq, win, cos, hint in found]

    def _texts(self, st: State, docs: Sequence[vectors.Doc]) -> dict[int, str]:
        """The searched text of each row, read where the index saw its line
        (else looked up); rows no longer there, unreadable, hidden or over
        LINE_CAP are left out."""
        out: dict[int, str] = {}
        by_segment: dict[int, list[vectors.Doc]] = {}
        for d in docs:
            by_segment.setdefault(d[2][0], []).append(d)
        for number, group in by_segment.items():
            fd = None
            if number in st.segments:
                try:
                    fd = segs.open_regular(segs.segment_path(self.ws.path, number))
                except OSError:
                    fd = None
            try:
                for seq, _win, (_seg, off) in group:
                    row = None
                    if fd is not None:
                        for line in segs.iter_lines_fd(fd, off, 64 * 1024):
                            if line.complete and len(line.data) <= LINE_CAP:
                                got = fmt.decode_line(line.data)
                                if got is not None and got.get("seq") == seq:
                                    row = got
                            break
                    if row is None:
                        try:
                            row = self.locate(st, seq, _NoSkips()).row
                        except LedgerError:
                            row = None
                    if row is not None and not hidden(row):
                        out[seq] = row_text(row)
            finally:
                if fd is not None:
                    os.close(fd)
        return out

    def refresh_recall(self, st: State) -> tuple[RecallIndex, Mark]:
        """Bring the recall index up to the log (under ``locked()``)."""
        recall = self._index()
        return recall, recall.refresh(st, layout_of(st), self.ws.appended)

    def _index(self) -> RecallIndex:
        if self._recall is None:
            # A projection: at durability "off" it is not synced either (a
            # power loss can only make it rebuild or rank less well; every
            # row served is read again from the log).
            sync = "OFF" if self.ws.store.durability == "off" else "NORMAL"
            self._recall = RecallIndex(self.ws.path, sync)
            self._recall.moves = self.ws.index.merge_record
        return self._recall

    def exists(self) -> bool:
        return bool(self.ws.exists())

    def locked(self) -> AbstractContextManager[None]:
        self.ws.settle_interrupted()  # before the shared lock: settling takes it exclusively
        return locked(self.ws.path, self.ws.workspace, self.ws.store.lock_timeout, shared=True)

    def state(self) -> State:
        st = self.ws.read_state()
        try:
            self.ws.refuse_damaged_floor(st)
        except HistoryDamaged as exc:
            raise Unavailable(str(exc)) from exc
        return st

    def binding(self, st: State) -> str:
        """The verified receipt's epoch and layout, else a digest of every
        segment's stamp."""
        return _binding(st)

    def floor_key(self, st: State) -> str:
        return _floor_key(st)

    def fresh_pos(self, st: State) -> Position:
        return _fresh_pos(st)

    def floor(self, st: State) -> Boundary | None:
        return st.floor

    def window_seq(self, st: State) -> int:
        return st.window_seq

    def after_floor(self, st: State, part: int, offset: int) -> bool:
        return st.floor is None or _after(part, offset, st.floor)

    def scan(self, st: State, start: Position, end: Position) -> Scan:
        return Scan(self.ws.path, st.segments, start, end)

    def seek(self, st: State, pos: Position, seq: int, result: SkipSink) -> Located:
        return self._scan_for(pos.part, _segment_size(st, pos.part), pos, seq, result, Budget())

    def carry_over(self, data: CursorData, st: State) -> CursorData:
        return self._carry_over(data, st, _binding(st), _floor_key(st))

    def fresh(self, st: State, action: str, digest: str) -> CursorData:
        return self._fresh(st, action, digest, _binding(st), _floor_key(st))

    def _carry_over(
        self, data: CursorData, st: State, binding: str, floor_key: str
    ) -> CursorData:
        """Only a cursor of an older layout of the same epoch is carried over:
        moved to the current positions through the INDEX records of the merges
        in between (a merge moves rows without changing a byte). Anything else
        -- another epoch, a missing record, a floor that is not the moved old
        one -- expires it."""
        old = _layout_of(data.binding)
        new = _layout_of(binding)
        records: list[ffmt.MergeRecord] = []
        if old is not None and new is not None and old[0] == new[0] and old[1] < new[1]:
            for layout in range(old[1] + 1, new[1] + 1):
                rec = self.ws.index.merge_record(new[0], layout)
                if rec is None:
                    records = []
                    break
                records.append(rec)
        if records:
            pos, end, floor = data.pos, data.end, data.floor
            for rec in records:
                base = dict(rec.sources)
                pos = _moved(pos, rec.into, base)
                end = _moved(end, rec.into, base)
                floor = _moved_floor(floor, rec.into, base)
            if floor == floor_key:
                return msgspec.structs.replace(data, binding=binding, floor=floor, pos=pos,
                                               end=end)
        raise CursorExpired(
            "the history changed since this cursor was issued (a rewrite, an untracked "
            "edit or a new privacy floor); start a new query"
        )

    def _fresh(
        self, st: State, action: str, digest: str, binding: str, floor_key: str
    ) -> CursorData:
        numbers = st.segments
        if st.floor is not None:
            start = Position(st.floor.segment, st.floor.offset, True)
            window = window_marker(st.floor)
        else:
            start = Position(numbers[0] if numbers else 0, 0)
            window = 0
        end_size = st.active_stamp.size if st.active_stamp is not None else 0
        end = Position(st.active, end_size)
        return CursorData(
            v=cursors.VERSION,
            kid=cursors.KEY_ID,
            workspace=self.ws.workspace,
            action=action,
            args=digest,
            binding=binding,
            floor=floor_key,
            high=st.next_seq - 1,
            end=end,
            pos=start,
            window=window,
        )

    def window_start(self, st: State, window: int) -> Position:
        if st.floor is not None:
            floor_name = window_marker(st.floor)
            if window == floor_name:
                return Position(st.floor.segment, st.floor.offset, True)
            if window < floor_name:
                raise NotFound(f"window {window} is not retrievable")
        elif window == 0:
            return Position(st.segments[0] if st.segments else 0, 0)
        for b in self._bounds(st):
            if window_marker(b) == window and (
                st.floor is None or _after(b.segment, b.offset, st.floor)
            ):
                return Position(b.segment, b.offset, True)
        raise NotFound(f"no retrievable window {window}")

    def _bounds(self, st: State) -> list[Boundary]:
        active = (st.active, st.active_stamp) if st.active_stamp is not None else None
        epoch = st.epoch if st.verified else None
        return self.ws.index.all_bounds(st.sealed, active, epoch)

    def window_of(self, st: State, part: int, offset: int) -> int:
        window = 0
        for b in self._bounds(st):
            if (b.segment, b.offset) < (part, offset):
                window = window_marker(b)
        return window

    def locate_at(
        self, st: State, seq: int, hint: tuple[int, int], result: SkipSink, budget: Budget
    ) -> Located:
        """One exact read at the hint (the index knows the line's size); a
        line moved by a merge, or lost, is looked up by ``locate``. Every
        byte counts against the call's ``budget``."""
        number, offset = hint
        size = self._recall.sizes.get(seq) if self._recall is not None else None
        if size is not None and number in st.segments:
            try:
                seg_size = _segment_size(st, number)
            except CursorExpired:
                seg_size = -1
            if 0 <= offset and offset + size < seg_size:
                got = self._read_at(number, offset, seq, size, result, budget)
                if got is not None:
                    return got
        if budget.bytes_read + LINE_CAP + 1 > SCAN_BYTES:
            return Located(resume=Position(number, offset))  # may not fit: the next page
        return self.locate(st, seq, result, budget)

    def _read_at(
        self, number: int, offset: int, seq: int, size: int, result: SkipSink, budget: Budget
    ) -> Located | None:
        """Row ``seq``'s line of ``size`` bytes at ``offset`` (None: another
        line there now). An oversized line is only confirmed (its seq prefix)
        and listed under skipped."""
        oversized = size > LINE_CAP
        start = offset - 1 if offset > 0 else 0  # the newline before it: a line start
        want = (offset - start) + (40 if oversized else size + 1)
        if budget.bytes_read + want > SCAN_BYTES:
            return Located(resume=Position(number, offset))
        fd = segs.open_regular(segs.segment_path(self.ws.path, number))
        try:
            data = os.pread(fd, want, start)
        finally:
            os.close(fd)
        budget.bytes_read += len(data)
        budget.rows += 1
        if offset > 0:
            if data[:1] != b"\n":
                return None
            data = data[1:]
        if fmt.seq_prefix(data[:32]) != seq:
            return None
        if oversized:
            result.add_skipped(seq, size)
            return Located()
        if len(data) != size + 1 or data[-1:] != b"\n" or b"\n" in data[:-1]:
            return None
        row = fmt.decode_line(data[:-1])
        if row is None:
            result.add_skipped(seq, size)
            return Located()
        return Located(row, number, offset) if row.get("seq") == seq else None

    def locate(self, st: State, seq: int, result: SkipSink, budget: Budget | None = None
               ) -> Located:
        """The segment from the index (sealed entries, else the active
        segment), then a bounded search inside it (counted in ``budget``,
        a call's, when given)."""
        target: tuple[int, ffmt.Stamp] | None = None
        for number, stamp in st.sealed:
            info = self.ws.index.info(number, stamp)
            if info.rows and info.first_seq <= seq <= max(info.last_seq, info.max_seq):
                target = (number, stamp)
                break
        if target is None and st.active_stamp is not None:
            target = (st.active, st.active_stamp)
        if target is None:
            raise NotFound(f"no retrievable row {seq}")
        number, stamp = target
        start = self._bisect(number, stamp.size, seq, budget)
        return self._scan_for(number, stamp.size, start, seq, result,
                              budget if budget is not None else Budget(rows=20))

    def _bisect(self, number: int, size: int, seq: int, budget: Budget | None = None
                ) -> Position:
        """A line start at or before row ``seq``: binary search on the seq
        prefix of the line after each probe point (about 20 small reads)."""
        path = segs.segment_path(self.ws.path, number)
        fd = segs.open_regular(path)
        try:
            lo, hi = 0, size
            probe = 16 * 1024
            while hi - lo > probe:
                if budget is not None and budget.bytes_read + probe + 40 > SCAN_BYTES:
                    break  # the call's budget: scan on from the line start found so far
                mid = (lo + hi) // 2
                data = os.pread(fd, probe, mid)
                if budget is not None:
                    budget.bytes_read += len(data)
                nl = data.find(b"\n")
                if nl < 0:
                    # Inside a line longer than the probe: the next line start is
                    # past its end, which may still be before row ``seq``.
                    # "Look earlier" instead (hi = mid) lost every row after the
                    # line when bisection ends up more rows before ``seq`` than a
                    # call may scan.
                    nl = self._line_end(fd, mid + len(data), hi, budget)
                    nl = -1 if nl < 0 else nl - mid
                if nl < 0 or mid + nl + 1 >= hi:
                    hi = mid  # no line starts in [mid, hi): look earlier
                    continue
                got = fmt.seq_prefix(data[nl + 1 : nl + 40])
                if got is None:
                    got = fmt.seq_prefix(os.pread(fd, 40, mid + nl + 1))
                    if budget is not None:
                        budget.bytes_read += 40
                if got is None or got > seq:
                    hi = mid
                else:
                    lo = mid + nl + 1
        finally:
            os.close(fd)
        return Position(number, lo)

    @staticmethod
    def _line_end(fd: int, at: int, hi: int, budget: Budget | None) -> int:
        """The offset of the first newline in [at, hi), or -1 when there is
        none within LINE_CAP bytes (an oversized line is never worth reading
        through here) or the call's ``budget`` has no room for the reads."""
        stop = min(hi, at + LINE_CAP + 1)
        while at < stop:
            want = min(64 * 1024, stop - at)
            if budget is not None and budget.bytes_read + want > SCAN_BYTES:
                return -1
            data = os.pread(fd, want, at)
            if budget is not None:
                budget.bytes_read += len(data)
            if not data:
                return -1
            nl = data.find(b"\n")
            if nl >= 0:
                return at + nl
            at += len(data)
        return -1

    def _scan_for(
        self, number: int, size: int, start: Position, seq: int, result: SkipSink, budget: Budget
    ) -> Located:
        """Scan forward from ``start`` for row ``seq`` (``Located``)."""
        begin = Position(start.part, start.offset, start.skip, 0, start.skip_from,
                         start.skip_seq)
        scan = Scan(self.ws.path, [number], begin, Position(number, size), budget)
        for ev in scan.events():
            if ev.oversized:
                if ev.seq == seq:
                    result.add_skipped(seq, ev.end - ev.offset - 1)
                    return Located()
                continue
            got = ev.row.get("seq") if ev.row is not None else fmt.seq_prefix(ev.line[:32])
            if got == seq:
                if ev.row is None:
                    result.add_skipped(seq, len(ev.line))
                    return Located()
                return Located(ev.row, number, ev.offset)
            if isinstance(got, int) and got > seq:
                break
        if scan.paused is not None:
            p = scan.paused
            return Located(resume=Position(p.part, p.offset, p.skip, SEEKING, p.skip_from,
                                           p.skip_seq))
        raise NotFound(f"no retrievable row {seq}")


def _segment_size(st: State, number: int) -> int:
    if number == st.active and st.active_stamp is not None:
        return st.active_stamp.size
    for n, stamp in st.sealed:
        if n == number:
            return stamp.size
    raise CursorExpired("a segment vanished; start a new query")


def _binding(st: State) -> str:
    if st.verified and st.receipt is not None:
        return f"e{st.epoch}.{st.receipt.layout}"
    return f"d{st.digest.hex()}"


def _layout_of(binding: str) -> tuple[int, int] | None:
    """(epoch, layout) of a binding to a verified receipt, else None."""
    m = _BINDING.fullmatch(binding)
    return (int(m.group(1)), int(m.group(2))) if m else None


_BINDING = re.compile(r"e([0-9]{1,20})\.([0-9]{1,20})")


def _moved(p: Position, into: int, base: dict[int, int]) -> Position:
    """Where a position is after a merge that moved each segment ``s`` in
    ``base`` to ``into`` at byte ``base[s]`` (lines never span segments, so
    ``skip_from`` moves with the position)."""
    b = base.get(p.part)
    if b is None:
        return p
    skip_from = p.skip_from + b if p.skip_from >= 0 else p.skip_from
    return msgspec.structs.replace(p, part=into, offset=p.offset + b, skip_from=skip_from)


def _moved_floor(key: str, into: int, base: dict[int, int]) -> str:
    if key == "none":
        return key
    segment, offset, seq = key.split(":", 2)
    b = base.get(int(segment))
    return key if b is None else f"{into}:{int(offset) + b}:{seq}"


def _floor_key(st: State) -> str:
    f = st.floor
    return "none" if f is None else f"{f.segment}:{f.offset}:{f.seq}"


def _after(segment: int, offset: int, floor: Boundary) -> bool:
    return (segment, offset) > (floor.segment, floor.offset)


def _fresh_pos(st: State) -> Position:
    if st.floor is not None:
        return Position(st.floor.segment, st.floor.offset, True)
    return Position(st.segments[0] if st.segments else 0, 0)



class _NoSkips:
    """A ``SkipSink`` that keeps nothing (the semantic channel's reads)."""

    def add_skipped(self, seq: int | None, nbytes: int) -> None:
        pass
