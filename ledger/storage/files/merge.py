"""Merging sealed segments, so file count stays logarithmic in history size.

Every tracked append validates the stamps of every segment (an untracked edit
anywhere must be noticed), so a history of 16,000 small segments would pay
about 35 ms per append for ``stat`` calls alone. Merging keeps the count small:
when at least ``FANOUT`` sealed segments of one size class sit at the end of
the sealed run, they become one segment of the next class (tiered, like an
LSM tree), so each byte is copied about log16(history / cap) times.

A merge never changes a byte of content or the order of rows, so it keeps
the epoch; but rows move to other (segment, offset) positions, so it bumps
the receipt's *layout* number. Open cursors are bound to both: a cursor of
an older layout is carried over to the new positions through the merges'
INDEX records (``MergeRecord``), and expires only when one is missing.

Crash safety, under the exclusive lock:

1. publish a pending receipt;
2. write ``MERGE`` = ``{"into": a, "from": [a, ..., b], "size": total}``
   (atomic rename);
3. write the concatenation to a temp file, fsync, rename it over segment
   ``a`` (directory fsync);
4. unlink segments after ``a``; directory fsync; remove ``MERGE``;
5. append the ``MergeRecord`` to INDEX; publish a stable receipt: same
   epoch, next layout, remapped positions.

A reader that finds ``MERGE`` while segment ``a`` already has the merged size
ignores the other segments it lists (they are copies); the next writer
finishes the unlinks. Before the rename, segment ``a`` is smaller, and
``MERGE`` is simply removed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import msgspec

from ledger.core.format import files as ffmt
from ledger.core.windows import Boundary
from ledger.storage.files import segments as segs
from ledger.storage.files.index import SegmentInfo, append_entry
from ledger.storage.files.receipt import write_receipt

if TYPE_CHECKING:
    from ledger.storage.files.ports import FileHistory as History
    from ledger.storage.files.state import State

FANOUT = 16
MAX_MERGED = 256 << 20
AUTO_MIN_SEALED = FANOUT  # appends merge on their own from this many sealed segments
AUTO_MAX_MERGE_BYTES = 16 << 20  # the most one append copies (bigger: merge_segments)


def classes(cap: int) -> list[int]:
    """The segment size classes appends keep (ascending): ``cap``, then
    ``cap * FANOUT`` and so on, up to the biggest an automatic merge makes
    (``AUTO_MAX_MERGE_BYTES``). A history grown by appends holds segments of
    the biggest class, then fewer than ``FANOUT`` of each smaller one; a
    loader that writes that shape directly (``load.py``) leaves a history
    whose file count stays logarithmic without merging a byte."""
    sizes = [max(1, cap)]
    while sizes[-1] * FANOUT <= AUTO_MAX_MERGE_BYTES:
        sizes.append(sizes[-1] * FANOUT)
    return sizes


def plan(
    sealed: list[tuple[int, ffmt.Stamp]], cap: int, max_bytes: int = MAX_MERGED
) -> list[int] | None:
    """The trailing run of sealed segments to merge, or None.

    Level L holds segments smaller than cap * FANOUT**L; a run is merged when
    it holds at least FANOUT segments of at least cap * FANOUT**(L-1).

    A segment that ``max_bytes`` leaves no room to grow by one more segment
    of the level's class also ends the run: segments overshoot ``cap`` by up
    to a batch, so FANOUT of them exceed ``max_bytes`` when it equals the
    next class's limit; the merge then takes FANOUT - 1, whose product stays
    below that limit. Counted in the run, it came first, took nothing more,
    and every later merge of the level was refused, so the file count (and
    each append's stat calls) grew with the history. Segments of a class
    overshoot it by more than ``full`` allows (level-1 merges of 64 KiB
    segments make about 1.15 MiB, so a capped level-2 merge makes 13 of them,
    14.95 MiB, under ``full`` = 15 MiB): a segment that cannot take the one
    after it within ``max_bytes`` ends the run too (a Store-grown 100 MiB
    history had stalled at 82 segments, 72 of them about 1 MiB).
    """
    limit = cap * FANOUT
    while limit // FANOUT <= max_bytes:
        full = max_bytes - limit // FANOUT  # bigger: no room for another one
        run: list[tuple[int, ffmt.Stamp]] = []
        for number, stamp in reversed(sealed):
            if stamp.size >= limit or stamp.size > full:
                break
            if run and stamp.size + run[-1][1].size > max_bytes:
                break  # cannot take the segment after it: it came first, it ends the run
            run.append((number, stamp))
        big = sum(1 for _, s in run if s.size >= limit // FANOUT)
        if big >= FANOUT and len(run) >= 2:
            run.reverse()
            total = 0
            chosen = []
            for number, stamp in run:
                if total and total + stamp.size > max_bytes:
                    break
                chosen.append(number)
                total += stamp.size
            return chosen if len(chosen) >= 2 else None
        limit *= FANOUT
    return None


def runnable(
    wsdir: str, sealed: list[tuple[int, ffmt.Stamp]], cap: int, max_bytes: int = MAX_MERGED
) -> list[int]:
    """The planned run, cut after the last segment that does not end in a
    newline: a torn tail is never glued onto the next segment's first row
    (it waits for ``tledger repair``)."""
    run = plan(sealed, cap, max_bytes) or []
    for i in range(len(run) - 1, -1, -1):
        if not _ends_in_newline(segs.segment_path(wsdir, run[i])):
            run = run[i + 1 :]
            break
    return run if len(run) >= 2 else []


def _ends_in_newline(path: str) -> bool:
    try:
        fd = segs.open_regular(path)
    except OSError:
        return False
    try:
        size = os.fstat(fd).st_size
        return size > 0 and os.pread(fd, 1, size - 1) == b"\n"
    finally:
        os.close(fd)


def settle(wsdir: str, durability: str) -> None:
    """Finish or drop an interrupted merge (writers, under the lock)."""
    path = os.path.join(wsdir, ffmt.MERGE_NAME)
    if not os.path.lexists(path):
        return
    marker = segs.read_merge_marker(wsdir)
    if marker is not None:
        s = segs.stamp(segs.segment_path(wsdir, marker.into))
        if s is not None and s.size == marker.size:
            for n in marker.sources:
                if n != marker.into:
                    try:
                        os.unlink(segs.segment_path(wsdir, n))
                    except FileNotFoundError:
                        pass
            if durability != "off":
                segs.fsync_dir(wsdir)
    os.unlink(path)


def _chunks(paths: list[str]) -> Iterator[bytes]:
    for path in paths:
        with open(path, "rb") as f:
            while True:
                data = f.read(segs.READ_CHUNK)
                if not data:
                    break
                yield data


def merge(history: History, st: State, numbers: list[int]) -> None:
    """Merge the consecutive sealed ``numbers`` into the first (see module doc).
    Call under the exclusive lock with a verified state; raises OSError."""
    wsdir = history.path
    # Always durable, whatever the store's level: a merge moves rows that were
    # on disk long before it, and the durability levels only ever allow losing
    # the newest batches to a power loss (tests/storage/files/test_crash_states.py found a
    # merge at "off" losing old rows). Merges are rare, so this costs little.
    durability = "full"
    stamps = dict(st.sealed)
    total = sum(stamps[n].size for n in numbers)
    into = numbers[0]
    infos = [history.index.info(n, stamps[n]) for n in numbers]
    base: dict[int, int] = {}
    pos = 0
    for n in numbers:
        base[n] = pos
        pos += stamps[n].size

    assert st.receipt is not None
    write_receipt(wsdir, msgspec.structs.replace(st.receipt, state=ffmt.PENDING))
    marker = msgspec.json.encode(segs.MergeMarker(into, list(numbers), total))
    segs.commit_file(wsdir, ffmt.MERGE_NAME, [marker], durability=durability, new_file=True)
    segs.commit_file(
        wsdir,
        ffmt.segment_name(into),
        _chunks([segs.segment_path(wsdir, n) for n in numbers]),
        durability=durability,
        new_file=False,
    )
    for n in numbers[1:]:
        os.unlink(segs.segment_path(wsdir, n))
    segs.fsync_dir(wsdir)
    os.unlink(os.path.join(wsdir, ffmt.MERGE_NAME))

    def moved(b: Boundary | None) -> Boundary | None:
        if b is None or b.segment not in base:
            return b
        return Boundary(b.seq, into, base[b.segment] + b.offset, b.reason, b.readable, b.after)

    new_stamp = segs.stamp(segs.segment_path(wsdir, into))
    if new_stamp is not None:
        bounds = tuple(moved(b) for i in infos for b in i.bounds)
        rows = sum(i.rows for i in infos)
        firsts = [i.first_seq for i in infos if i.rows]
        lasts = [i.last_seq for i in infos if i.rows]
        tops = [max(i.max_seq, i.last_seq) for i in infos if i.rows]
        info = SegmentInfo(into, new_stamp, firsts[0] if firsts else -1,
                           lasts[-1] if lasts else -1, rows,
                           tuple(b for b in bounds if b is not None),
                           max(tops) if tops else -1)
        try:
            append_entry(wsdir, info)
        except OSError:
            pass
    try:
        append_entry(wsdir, ffmt.MergeRecord(st.epoch, st.receipt.layout + 1, into,
                                            [(n, base[n]) for n in numbers]))
    except OSError:
        pass  # cursors of the old layout then expire instead of moving
    history.publish_state(moved(st.window), moved(st.floor), st.next_seq, st.epoch,
                  layout_of=st.receipt)
