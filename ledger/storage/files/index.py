"""The boundary index: a projection of where every window starts.

For each segment it records the seq range, the row count and every boundary
(offset, seq, reason). Sealed segments never change, so their entries are
computed once -- by the writer that seals them, appended to ``INDEX`` -- and
trusted only while the segment's stamp still matches. Anything missing, stale
or damaged is recomputed from the segment's bytes (in memory for readers, who
never write). Deleting INDEX loses nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import msgspec

from ledger.core.errors import UnsafePath
from ledger.core.format import files as ffmt
from ledger.core.format import rows as fmt
from ledger.core.windows import Boundary, Entry, boundaries
from ledger.storage.files import segments as segs


def entry_of(segment: int, line: segs.Line) -> Entry:
    """Classify one line of the log (verification, reset, candidate)."""
    row = fmt.decode_line(line.data) if line.complete else None
    if row is not None:
        is_reset = fmt.readable_row_is_reset(line.data, row)
        return Entry(segment, line.offset, line.data, row, is_reset, False)
    if fmt.raw_may_be_reset(line.data):
        return Entry(segment, line.offset, line.data, None, False, True)
    damaged = fmt.damage_may_hide_reset(line.data)
    return Entry(segment, line.offset, line.data, None, False, damaged, damaged)


class SegmentInfo(msgspec.Struct, frozen=True):
    """What a segment holds (an INDEX entry; a struct: appends build one each)."""

    number: int
    stamp: ffmt.Stamp
    first_seq: int
    last_seq: int
    rows: int
    bounds: tuple[Boundary, ...]
    max_seq: int = -1
    epoch: int = 0


def scan_segment(wsdir: str, number: int, stamp: ffmt.Stamp) -> SegmentInfo:
    """Compute a segment's entry from its bytes."""
    first = last = top = -1
    rows = 0
    entries = []
    for line in segs.iter_lines(segs.segment_path(wsdir, number)):
        e = entry_of(number, line)
        entries.append(e)
        if e.row is not None and isinstance(e.row.get("seq"), int):
            rows += 1
            if first < 0:
                first = e.row["seq"]
            last = e.row["seq"]
            top = max(top, last)
    found = tuple(boundaries(entries))
    return SegmentInfo(number, stamp, first, last, rows, found, top)


def to_entry(info: SegmentInfo) -> ffmt.SegmentIndex:
    s = info.stamp
    return ffmt.SegmentIndex(
        number=info.number,
        stamp=(s.dev, s.ino, s.size, s.mtime_ns, s.ctime_ns),
        first_seq=info.first_seq,
        last_seq=info.last_seq,
        rows=info.rows,
        bounds=[(b.offset, b.seq, b.reason, b.after) for b in info.bounds],
        max_seq=info.max_seq,
        epoch=info.epoch,
    )


def from_entry(e: ffmt.SegmentIndex) -> SegmentInfo:
    bounds = tuple(
        Boundary(seq, e.number, off, reason, readable=seq >= 0, after=after)
        for off, seq, reason, after in e.bounds
    )
    top = e.max_seq if e.max_seq >= 0 else e.last_seq
    return SegmentInfo(
        e.number, ffmt.Stamp(*e.stamp), e.first_seq, e.last_seq, e.rows, bounds, top, e.epoch
    )


def append_entry(wsdir: str, info: SegmentInfo | ffmt.MergeRecord) -> None:
    """Record a sealed segment's entry, or a merge (writers, under the lock;
    no fsync: a projection that is rebuilt when missing)."""
    append_entries(wsdir, [info])


def append_entries(wsdir: str, infos: list[SegmentInfo | ffmt.MergeRecord]) -> None:
    """Record several entries with one write (a fork records thousands)."""
    if not infos:
        return
    path = os.path.join(wsdir, ffmt.INDEX_NAME)
    data = b"".join(ffmt.encode_index_entry(i if isinstance(i, ffmt.MergeRecord)
                                            else to_entry(i)) for i in infos)
    try:
        fd = segs.open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    except UnsafePath:
        return  # not a file (a FIFO, a directory): the projection is rebuilt from the log
    try:
        segs._write_all(fd, [data])  # whole, across short writes
    finally:
        os.close(fd)


@dataclass
class Entries:
    """What ``read_entries`` found in INDEX."""

    sealed: dict[int, SegmentInfo]  # by segment number
    active: dict[tuple[int, int], SegmentInfo]  # the newest by (number, epoch)
    merges: dict[tuple[int, int], ffmt.MergeRecord]  # the newest by (epoch, layout)
    end: int  # just past the last complete line: where an incremental read starts


def read_entries(wsdir: str, start: int = 0) -> Entries:
    """The entries of INDEX from byte ``start`` on (lines before it are not read)."""
    path = os.path.join(wsdir, ffmt.INDEX_NAME)
    sealed: dict[int, SegmentInfo] = {}
    active: dict[tuple[int, int], SegmentInfo] = {}
    merges: dict[tuple[int, int], ffmt.MergeRecord] = {}
    end = start
    try:
        for line in segs.iter_lines(path, start):
            if not line.complete:
                continue
            end = line.offset + len(line.data) + 1
            e = ffmt.decode_index_entry(line.data)
            if e is None:
                continue
            if isinstance(e, ffmt.MergeRecord):
                merges[(e.epoch, e.layout)] = e
            elif e.epoch:
                active[(e.number, e.epoch)] = from_entry(e)
            else:
                sealed[e.number] = from_entry(e)
    except (FileNotFoundError, IsADirectoryError, PermissionError, NotADirectoryError,
            UnsafePath):
        return Entries({}, {}, {}, 0)
    return Entries(sealed, active, merges, end)


class BoundaryIndex:
    """Per-process cache of segment entries, validated by stamp."""

    def __init__(self, wsdir: str) -> None:
        self.wsdir = wsdir
        self._cache: dict[int, SegmentInfo] = {}
        self._active: dict[tuple[int, int], SegmentInfo] = {}
        self._persisted: set[tuple[int, ffmt.Stamp]] = set()
        self._index_stamp: ffmt.Stamp | None = None
        self._index_read = 0  # offset past the last complete line read
        self._merges: dict[tuple[int, int], ffmt.MergeRecord] = {}
        # The newest INDEX entry of each sealed segment, whatever its stamp:
        # evidence of the floors a segment held before an untracked change.
        self._recorded: dict[int, SegmentInfo] = {}

    def _load(self) -> None:
        """Take in what INDEX holds that this process has not read yet. The
        file only grows (writers append), so while it is the same file and
        not shorter, only the lines past the last read are decoded; any other
        change reads it again from the start."""
        st = segs.stamp(os.path.join(self.wsdir, ffmt.INDEX_NAME))
        if st is None or st == self._index_stamp:
            return
        old = self._index_stamp
        grown = (old is not None and (st.dev, st.ino) == (old.dev, old.ino)
                 and st.size >= old.size)
        start = self._index_read if grown else 0
        found = read_entries(self.wsdir, start)
        if not grown:
            self._recorded = {}
        for number, info in found.sealed.items():
            self._recorded[number] = info
            self._persisted.add((number, info.stamp))
            cached = self._cache.get(number)
            if cached is None or cached.stamp != info.stamp:
                self._cache[number] = info
        if grown:
            self._active.update(found.active)
            self._merges.update(found.merges)
        else:
            self._active = found.active
            self._merges = found.merges
        self._index_stamp = st
        self._index_read = found.end

    def recorded_floor(self, number: int, stamp: ffmt.Stamp) -> Boundary | None:
        """The newest floor INDEX recorded for sealed segment ``number`` when
        the segment no longer has the stamp it had then (None otherwise)."""
        self._load()
        rec = self._recorded.get(number)
        if rec is None or rec.stamp == stamp:
            return None
        floors = [b for b in rec.bounds if b.is_floor]
        return floors[-1] if floors else None

    def merge_record(self, epoch: int, layout: int) -> ffmt.MergeRecord | None:
        """The merge that made receipt layout ``layout`` under ``epoch``."""
        self._load()
        return self._merges.get((epoch, layout))

    def remember(self, info: SegmentInfo) -> None:
        """Take a writer's own account of a segment (what ``scan_segment``
        would compute for exactly that stamp), so sealing it needs no scan."""
        cached = self._cache.get(info.number)
        if cached is None or cached.stamp != info.stamp:
            self._cache[info.number] = info

    def active_bounds(self, number: int, stamp: ffmt.Stamp, epoch: int | None
                      ) -> tuple[Boundary, ...]:
        """Boundaries of the active segment without reading it, when a writer
        recorded them under ``epoch`` (None: the receipt is not trusted, so
        the segment is scanned)."""
        cached = self._cache.get(number)
        if cached is not None and cached.stamp == stamp:
            return cached.bounds
        if epoch is not None:
            self._load()
            entry = self._active.get((number, epoch))
            if entry is not None and entry.stamp.size <= stamp.size:
                return entry.bounds
        return self.info(number, stamp).bounds

    def info(self, number: int, stamp: ffmt.Stamp) -> SegmentInfo:
        cached = self._cache.get(number)
        if cached is None or cached.stamp != stamp:
            self._load()
            cached = self._cache.get(number)
        if cached is None or cached.stamp != stamp:
            cached = scan_segment(self.wsdir, number, stamp)
            self._cache[number] = cached
        return cached

    def ensure_persisted(self, number: int, stamp: ffmt.Stamp) -> None:
        """Writers: make sure INDEX holds a valid entry for a sealed segment,
        so readers in other processes never scan it inside a call."""
        self._load()
        if (number, stamp) in self._persisted:
            return
        append_entry(self.wsdir, self.info(number, stamp))
        self._persisted.add((number, stamp))

    def record(self, entries: list[SegmentInfo], seal: tuple[int, ffmt.Stamp] | None) -> None:
        """An append's INDEX lines, with one write (writers, under the lock):
        ``entries`` (active entries), then the entry of the segment the
        append sealed (``seal``) unless INDEX holds it -- ``ensure_persisted``
        and ``active_entry`` together. When INDEX held nothing this process
        had not read (its stamp is the one the last read or write here left,
        and it ends with a whole line), nothing is read back: what this
        process writes is taken in as a read of it would take it. Otherwise
        the new lines are read first, as ``ensure_persisted`` reads them."""
        path = os.path.join(self.wsdir, ffmt.INDEX_NAME)
        try:
            fd, st = segs.open_regular_stat(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        except UnsafePath:
            return  # not a file (a FIFO, a directory): the projection is rebuilt from the log
        try:
            before = ffmt.Stamp.of(st)
            if before != self._index_stamp or st.st_size != self._index_read:
                self._load()  # lines of other writers, or a torn tail
            known = before == self._index_stamp and st.st_size == self._index_read
            out = list(entries)
            if seal is not None and seal not in self._persisted:
                out.append(self.info(*seal))
            if not out:
                return
            data = b"".join(ffmt.encode_index_entry(to_entry(i)) for i in out)
            segs._write_all(fd, [data])  # whole, across short writes
            after = ffmt.Stamp.of(os.fstat(fd))
        finally:
            os.close(fd)
        if seal is not None:
            self._persisted.add(seal)
        if not known or after.size != before.size + len(data):
            return  # the next read takes them in from the file
        for info in out:
            if info.epoch:
                self._active[(info.number, info.epoch)] = info
            else:
                self._recorded[info.number] = info
                self._persisted.add((info.number, info.stamp))
                self.remember(info)
        self._index_stamp = after
        self._index_read = after.size

    def persist_many(self, infos: list[SegmentInfo]) -> None:
        """Writers: take in and record these sealed segments' entries (each
        what ``scan_segment`` would compute for its stamp) with one write,
        skipping those INDEX already holds (a fork restamping thousands)."""
        self._load()
        fresh = [i for i in infos if (i.number, i.stamp) not in self._persisted]
        for info in infos:
            self.remember(info)
        append_entries(self.wsdir, list(fresh))
        self._persisted.update((i.number, i.stamp) for i in fresh)

    def all_bounds(self, sealed: list[tuple[int, ffmt.Stamp]],
                   active: tuple[int, ffmt.Stamp] | None, epoch: int | None) -> list[Boundary]:
        """Every boundary in log order: sealed segments from their entries,
        the active one from its active entry when ``epoch`` is trusted."""
        out: list[Boundary] = []
        for number, stamp in sealed:
            out.extend(self.info(number, stamp).bounds)
        if active is not None:
            out.extend(self.active_bounds(active[0], active[1], epoch))
        return out


def active_info(wsdir: str, number: int, stamp: ffmt.Stamp, epoch: int,
                bounds: tuple[Boundary, ...] | None = None, first_seq: int = -1
                ) -> SegmentInfo:
    """The active entry of segment ``number``: its boundaries under ``epoch``.
    Without ``bounds`` the segment is scanned (it is at most cap + one batch)."""
    if bounds is None:
        info = scan_segment(wsdir, number, stamp)
        bounds, first_seq = info.bounds, info.first_seq
    return SegmentInfo(number, stamp, first_seq, -1, -1, bounds, -1, epoch)


def active_entry(wsdir: str, number: int, stamp: ffmt.Stamp, epoch: int,
                 bounds: tuple[Boundary, ...] | None = None, first_seq: int = -1) -> None:
    """Record the active segment's boundaries under ``epoch`` (writers only)."""
    append_entry(wsdir, active_info(wsdir, number, stamp, epoch, bounds, first_seq))
