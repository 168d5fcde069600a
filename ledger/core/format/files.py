"""The file engine's bytes besides its segments' lines: the names in a
workspace directory (FORMAT, segments, temp files, the receipt, INDEX, MERGE,
the quarantine), the receipt's layout and the INDEX projection's lines.
Specified in ``ledger.core.format`` (sections Directory and Receipt); a
segment's lines are ``ledger.core.format.rows``.
"""

from __future__ import annotations

import functools
import os
import re
import struct
from collections.abc import Iterable
from typing import NamedTuple

import msgspec
import xxhash

from ledger.core.format.rows import body_of, frame

FORMAT_VERSION = 1
FORMAT_TEXT = b"transcript-ledger 1\n"

SEGMENT_PREFIX = "seg-"
SEGMENT_SUFFIX = ".jsonl"
TEMP_PREFIX = ".tmp-"
LOCK_NAME = "LOCK"
RECEIPT_NAME = "RECEIPT"
FORMAT_NAME = "FORMAT"
INDEX_NAME = "INDEX"
RECALL_NAME = "RECALL.sqlite"  # the recall index (ledger.storage.files.recall), a projection
VECTORS_NAME = "RECALL.vectors"  # the semantic channel's vectors (ledger.storage.files.vectors)
MERGE_NAME = "MERGE"
QUARANTINE_DIR = "quarantine"
REWRITE_MARKER_NAME = "REWRITE.json"  # a marked rewrite in flight (ledger.storage.files.rewrite)
REWRITE_TOMBSTONE_SUFFIX = ".truncate"  # a segment's old bytes while a rewrite replaces it
WORKSPACE_TOMBSTONE_SUFFIX = ".deleting"  # .<ws>.deleting beside a workspace being deleted

_SEGMENT_NAME = re.compile(
    re.escape(SEGMENT_PREFIX) + "([0-9]{8})" + re.escape(SEGMENT_SUFFIX) + r"\Z"
)

_encoder = msgspec.json.Encoder()


# --- names -----------------------------------------------------------------


@functools.lru_cache(maxsize=1 << 14)
def segment_name(number: int) -> str:
    return f"{SEGMENT_PREFIX}{number:08d}{SEGMENT_SUFFIX}"


def segment_number(name: str) -> int | None:
    """The number of a segment file name, or None for any other name."""
    m = _SEGMENT_NAME.match(name)
    if m is None:
        return None
    number = int(m.group(1))
    return number if number > 0 else None


# --- receipt ---------------------------------------------------------------

RECEIPT_SIZE = 256
RECEIPT_MAGIC = b"TLRCPT\x00\x01"
PENDING = 1
STABLE = 2
NO_FLOOR = -1
FLOOR_UNREADABLE = -2
# The floor is damage that may have been a reset (its marker unreadable), or
# a floor the receipt or INDEX recorded that the log no longer holds: reads
# of windows and ``session_history`` are refused until ``tledger repair``.
FLOOR_DAMAGED = -3
_RECEIPT = struct.Struct("<8sB7xQQqIIQqIIQQQQQQ16sqQ96x")
_STAMP = struct.Struct("<IQQQQQ")  # segment number + stamp, as the sealed digest hashes it
assert _RECEIPT.size == RECEIPT_SIZE - 8


class Stamp(NamedTuple):
    """What a segment looked like: identity, size and times. (A named tuple:
    every append builds and compares one per segment.)"""

    dev: int
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> Stamp:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


ZERO_STAMP = Stamp(0, 0, 0, 0, 0)


class Receipt(msgspec.Struct, frozen=True):
    """The receipt's fields (layout above). A struct: every append builds one
    and reads one, and a frozen dataclass of 15 fields cost ~5 us to build."""

    state: int
    epoch: int
    next_seq: int
    window: int
    window_segment: int
    window_offset: int
    floor_seq: int
    floor_segment: int
    floor_offset: int
    active_segment: int
    active: Stamp
    sealed_count: int
    sealed_digest: bytes
    floor_after: int = 0
    layout: int = 0

    @property
    def stable(self) -> bool:
        return self.state == STABLE

    @property
    def has_floor(self) -> bool:
        return self.floor_segment != 0


def pack_receipt(r: Receipt, state: int | None = None) -> bytes:
    """The 256 bytes of ``r``; with ``state``, of ``r`` in that state instead
    (the pending copy a writer publishes first)."""
    head = _RECEIPT.pack(
        RECEIPT_MAGIC,
        r.state if state is None else state,
        r.epoch,
        r.next_seq,
        r.window,
        r.window_segment,
        r.active_segment,
        r.window_offset,
        r.floor_seq,
        r.floor_segment,
        r.sealed_count,
        r.floor_offset,
        *r.active,
        r.sealed_digest,
        r.floor_after,
        r.layout,
    )
    data = head + _CHECKSUM.pack(xxhash.xxh3_64_intdigest(head))
    if (state is None or state == r.state) and len(r.sealed_digest) == 16:
        # ``unpack_receipt(data)`` would build a receipt equal to ``r``
        # (every field packs without loss): the next reader of these bytes,
        # most often this process's next append, gets ``r`` itself.
        if len(_PACKED) >= 16:
            _PACKED.clear()
        _PACKED[data] = r
    return data


_CHECKSUM = struct.Struct("<Q")
_PACKED: dict[bytes, Receipt] = {}  # bytes this process packed -> their receipt


def unpack_receipt(data: bytes) -> Receipt | None:
    """The receipt in ``data``, or None when it is not exactly one valid receipt."""
    found = _PACKED.get(data)
    return found if found is not None else _unpack(data)


@functools.lru_cache(maxsize=64)
def _unpack(data: bytes) -> Receipt | None:
    """(Pure, and receipts are immutable: remembered by their bytes, since every
    page of a read unpacks the same receipt again.)"""
    if len(data) != RECEIPT_SIZE:
        return None
    head = data[:-8]
    if _CHECKSUM.unpack(data[-8:])[0] != xxhash.xxh3_64_intdigest(head):
        return None
    fields = _RECEIPT.unpack(head)
    if fields[0] != RECEIPT_MAGIC or fields[1] not in (PENDING, STABLE):
        return None
    (_, state, epoch, next_seq, window, wseg, aseg, woff, fseq, fseg, scount, foff,
     dev, ino, size, mtime, ctime, digest, floor_after, layout) = fields
    return Receipt(
        state=state,
        epoch=epoch,
        next_seq=next_seq,
        window=window,
        window_segment=wseg,
        window_offset=woff,
        floor_seq=fseq,
        floor_segment=fseg,
        floor_offset=foff,
        active_segment=aseg,
        active=Stamp(dev, ino, size, mtime, ctime),
        sealed_count=scount,
        sealed_digest=digest,
        floor_after=floor_after,
        layout=layout,
    )


def sealed_digest(sealed: Iterable[tuple[int, Stamp]]) -> tuple[int, bytes]:
    """Count and xxh3-128 digest of the sealed segments' numbers and stamps."""
    packed = [_STAMP.pack(number, *s) for number, s in sealed]
    return len(packed), xxhash.xxh3_128_digest(b"".join(packed))


# --- INDEX projection --------------------------------------------------------


class SegmentIndex(msgspec.Struct, array_like=True):
    """What a sealed segment holds, derived from its bytes (a projection).

    ``bounds`` are ``[offset, seq, reason, after]`` of every boundary (seq -2
    when the line is unreadable, ``after`` being the last readable seq before
    it); the privacy floors are those whose reason is ``manual``.
    """

    number: int
    stamp: tuple[int, int, int, int, int]
    first_seq: int
    last_seq: int
    rows: int
    bounds: list[tuple[int, int, str, int]]
    max_seq: int = -1  # the highest seq (lines may be out of order after a repair)
    # 0: a sealed entry, valid while the stamp matches. Otherwise an *active*
    # entry: valid for the first stamp.size bytes of the active segment while
    # the receipt's epoch is this one. Writers add one whenever they create a
    # segment or commit a boundary into it, so under that epoch the bytes past
    # the newest active entry hold no boundary.
    epoch: int = 0


class MergeRecord(msgspec.Struct, array_like=True):
    """One segment merge, as the INDEX line ``{"m":[epoch, layout, into,
    [[source, base], ...]]}``: under ``epoch``, the merge that made receipt
    layout ``layout`` moved the rows of each ``source`` segment to segment
    ``into`` at byte ``base`` + their old offset (``ledger.storage.files.merge``)."""

    epoch: int
    layout: int
    into: int
    sources: list[tuple[int, int]]


def encode_index_entry(entry: SegmentIndex | MergeRecord) -> bytes:
    tag = b'{"m":[' if isinstance(entry, MergeRecord) else b'{"e":['
    return frame(_encoder.encode(entry).replace(b"[", tag, 1) + b"}")


def decode_index_entry(line: bytes) -> SegmentIndex | MergeRecord | None:
    """An INDEX line; None when it fails verification or is of a kind this
    build does not know (skipped: INDEX is a projection)."""
    body = body_of(line)
    if body is None:
        return None
    try:
        if body.startswith(b'{"e":'):
            return msgspec.json.decode(body[5:-1], type=SegmentIndex)
        if body.startswith(b'{"m":'):
            return msgspec.json.decode(body[5:-1], type=MergeRecord)
    except msgspec.DecodeError:
        return None
    return None
