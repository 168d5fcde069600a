"""What a file-engine writer or reader knows after validating the receipt and
the stamps of every segment (``State``), and the pure rules that turn it into
the next stable receipt. No I/O here: ``ledger.storage.files.workspace`` reads
the files and publishes what these functions build.
"""

from __future__ import annotations

import functools
from functools import cached_property

import msgspec

from ledger.core.format import files as ffmt
from ledger.core.windows import Boundary, window_marker
from ledger.storage.files.index import SegmentInfo


class State(msgspec.Struct, frozen=True, dict=True):
    """What a writer or reader knows after validating receipt and stamps. (A
    struct: every append and every page of a read builds one.)"""

    receipt: ffmt.Receipt | None
    segments: list[int]
    active_stamp: ffmt.Stamp | None
    sealed: list[tuple[int, ffmt.Stamp]]
    verified: bool
    next_seq: int
    epoch: int
    window: Boundary | None
    floor: Boundary | None

    @cached_property
    def digest(self) -> bytes:
        """xxh3-128 over every segment's number and stamp (binds queries while
        the receipt is not trusted)."""
        stamps = [*self.sealed, *([(self.active, self.active_stamp)] if self.active_stamp else [])]
        return ffmt.sealed_digest(stamps)[1]

    @property
    def active(self) -> int:
        return self.segments[-1] if self.segments else 0

    @property
    def window_seq(self) -> int:
        return window_marker(self.window)


def empty_state() -> State:
    """The state of a workspace never written: next seq 1, epoch 0 (never an
    epoch a write picks), no window, no floor, no segment."""
    return State(receipt=None, segments=[], active_stamp=None, sealed=[], verified=True,
                 next_seq=1, epoch=0, window=None, floor=None)


def verified_state(
    receipt: ffmt.Receipt, numbers: list[int], active_stamp: ffmt.Stamp | None,
    sealed: list[tuple[int, ffmt.Stamp]],
) -> State:
    """The state a stable receipt names, once the stamps confirmed it."""
    return State(
        receipt=receipt,
        segments=numbers,
        active_stamp=active_stamp,
        sealed=sealed,
        verified=True,
        next_seq=receipt.next_seq,
        epoch=receipt.epoch,
        window=boundary_from_receipt(
            receipt.window, receipt.window_segment, receipt.window_offset, "?"
        ),
        floor=boundary_from_receipt(
            receipt.floor_seq, receipt.floor_segment, receipt.floor_offset, "manual",
            receipt.floor_after,
        ),
    )


@functools.lru_cache(maxsize=256)
def boundary_from_receipt(
    seq: int, segment: int, offset: int, reason: str, after: int = 0
) -> Boundary | None:
    """The window or floor a receipt records. (Remembered: every validation
    of a receipt asks for the same two until a boundary is appended, and a
    Boundary is immutable.)"""
    if segment == 0:
        return None
    readable = seq >= 0
    return Boundary(seq, segment, offset, reason, readable=readable, after=after)


def recorded_floor(receipt: ffmt.Receipt | None) -> Boundary | None:
    """The floor a receipt recorded (any state: a pending receipt holds the
    state before the interrupted write, whose floor the log still holds)."""
    if receipt is None:
        return None
    return boundary_from_receipt(receipt.floor_seq, receipt.floor_segment, receipt.floor_offset,
                                 "manual", receipt.floor_after)


def covers(floor: Boundary | None, recorded: Boundary, min_seq: int | None) -> bool:
    """Whether ``floor`` (derived from the bytes) hides every row that the
    ``recorded`` floor hid: it lies at or after it, by position or (across a
    merge, which moves rows) by seq; or no row the recorded floor hid is left
    (``min_seq``, the lowest seq in the log, is not below it: a purge took
    the floor with everything before it). Otherwise the recorded floor was
    lost to damage or a cut, and reads must fail closed."""
    if min_seq is None:
        return True  # no readable row at all: nothing to hide
    if min_seq >= (recorded.seq if recorded.readable else recorded.after + 1):
        return True
    if floor is None:
        return False
    if (floor.segment, floor.offset) >= (recorded.segment, recorded.offset):
        return True
    if recorded.readable:
        if floor.readable:
            return floor.seq >= recorded.seq
        return floor.after >= recorded.seq
    if floor.readable:
        return floor.seq > recorded.after
    return floor.after > recorded.after


def missing_floor(recorded: Boundary) -> Boundary:
    """The damaged floor that stands in for a recorded floor the log lost."""
    return Boundary(ffmt.FLOOR_DAMAGED, recorded.segment, recorded.offset, "manual",
                    readable=False, after=recorded.after if not recorded.readable
                    else max(recorded.seq - 1, 0))


def stable_receipt(
    epoch: int,
    next_seq: int,
    window: Boundary | None,
    floor: Boundary | None,
    layout: int,
    active: tuple[int, ffmt.Stamp],
    sealed: list[tuple[int, ffmt.Stamp]],
    digest: tuple[int, bytes] | None = None,
) -> ffmt.Receipt:
    """The stable receipt for a log whose newest boundary is ``window``, whose
    floor is ``floor``, with these segments (the one place receipts are built).
    ``digest`` is ``ffmt.sealed_digest(sealed)`` when the caller has it."""
    count, sealed_dg = digest if digest is not None else ffmt.sealed_digest(sealed)
    return ffmt.Receipt(
        state=ffmt.STABLE,
        epoch=epoch,
        next_seq=next_seq,
        window=window_marker(window),
        window_segment=window.segment if window is not None else 0,
        window_offset=window.offset if window is not None else 0,
        floor_seq=floor.seq if floor is not None else ffmt.NO_FLOOR,
        floor_segment=floor.segment if floor is not None else 0,
        floor_offset=floor.offset if floor is not None else 0,
        floor_after=floor.after if floor is not None else 0,
        layout=layout,
        active_segment=active[0],
        active=active[1],
        sealed_count=count,
        sealed_digest=sealed_dg,
    )


def extend_running(
    running: SegmentInfo | None,
    target: int,
    new_stamp: ffmt.Stamp,
    old_stamp: ffmt.Stamp | None,
    new_file: bool,
    seqs: list[int],
    bounds: list[Boundary],
) -> SegmentInfo | None:
    """The writer's account of the active segment after a commit: a new
    segment holds just the batch; a rewritten one holds the bytes ``running``
    described (when its stamp is the one the commit read) plus the batch.
    Otherwise unknown (None), and sealing scans the segment."""
    if new_file:
        return SegmentInfo(target, new_stamp, seqs[0], seqs[-1], len(seqs), tuple(bounds),
                           max(seqs))
    if running is None or (running.number, running.stamp) != (target, old_stamp):
        return None
    return SegmentInfo(target, new_stamp, running.first_seq, seqs[-1], running.rows + len(seqs),
                       running.bounds + tuple(bounds), max(running.max_seq, *seqs))


def empty_receipt() -> ffmt.Receipt:
    return ffmt.Receipt(
        state=ffmt.PENDING, epoch=0, next_seq=1, window=0, window_segment=0, window_offset=0,
        floor_seq=ffmt.NO_FLOOR, floor_segment=0, floor_offset=0, active_segment=0,
        active=ffmt.ZERO_STAMP, sealed_count=0, sealed_digest=b"\x00" * 16,
    )
