"""The on-disk format of a transcript-ledger history, in one place.

Everything that reads or writes these bytes imports this module; nothing parses
them a second time (``recovery`` included).

Directory
=========
A workspace ``<root>/<ws>/`` holds:

``FORMAT``
    The ASCII text ``transcript-ledger 1\\n``. A history whose FORMAT names a
    newer version is refused rather than misread.
``LOCK``
    An empty file locked with ``flock`` (portalocker). Never renamed or deleted
    while in use.
``RECEIPT``
    The append receipt: exactly ``RECEIPT_SIZE`` (256) bytes, layout below.
``seg-NNNNNNNN.jsonl``
    Segments, numbered from 1 with eight decimal digits. The highest number is
    the *active* segment; every other one is *sealed* and never changes.
``INDEX``
    A projection (derived, rebuildable), appended to by writers: one checksummed
    JSON line per sealed segment with its stamps, seq range and the positions
    of its boundaries and floors (``{"e":[...]}``, see ``SegmentIndex``), and
    one per segment merge (``{"m":[...]}``, see ``MergeRecord``), which lets
    cursors issued before a merge be carried over to the merged positions.
``MERGE``
    Present only while sealed segments are being merged (``ledger.storage.files.merge``):
    ``{"into": a, "from": [a, ..., b], "size": n}``. Once segment ``a`` has
    size ``n`` the other listed segments are copies, ignored by readers and
    removed by the next writer.
``quarantine/``
    Bytes that recovery took out of the live log, with ``MANIFEST.jsonl``.
``.tmp-*``
    A commit's temporary file; one left behind belongs to a dead writer and is
    removed by the next writer under the lock.

Lines
=====
A segment is a sequence of lines, each ending in ``\\n`` (0x0A); lines are split
on that byte only, so U+2028, U+2029, NEL, lone CR and NUL inside strings are
just bytes of a line. Each line is one JSON object, UTF-8, as msgspec encodes it
(non-ASCII is not escaped; control characters are). Its keys are the canonical
row keys in this order -- ``seq id kind role parts partial meta ts batch``, then
``reset`` on reset rows, then the caller's unknown fields in the caller's order
-- followed by one storage-internal key, always last::

    {"seq":7,...,"batch":{"id":"b_..","n":3,"i":0},"_c":"89abcdef01234567"}\\n

``_c`` is the xxh3-64 of the *body*: the line without ``,"_c":"…"`` and
without the newline, i.e. ``line[:-LINE_SUFFIX] + b"}"``, as 16 lower-case hex
digits. A per-row checksum lets ``check`` find a flipped byte inside any row,
even one that leaves valid JSON, and lets a reader verify a row without
decoding it. ``to_dict()`` never shows ``_c``.

A line nests at most ``MAX_DEPTH`` (256) arrays and objects deep, the line's
object being level 1; a deeper stored line is damage (``ledger.core.nesting``
decides it on the bytes, without recursing).

Batches
=======
Every row carries ``batch = {"id": str, "n": rows in the batch, "i": index}``.
A batch is committed by one atomic rename, so in a healthy log its ``n`` rows
are adjacent, in one segment, with ``i`` = 0..n-1. Rows of a batch that is
not whole are damage, recognisable anywhere.

Reset candidates
================
An unreadable line *may be a reset* when its raw bytes hold a key ``kind`` with
value ``reset`` or the legacy key ``contextBoundaryKind`` with value
``reset``, in a key position (after ``{`` or ``,`` or at the start of the
line), whatever control characters, whitespace or ``\\u`` + 4 hex escapes stand
between and inside them. Such a line is a privacy floor (fail closed).

Damage may also destroy the marker itself (a flipped byte inside
``"kind":"reset"``, a cut before it). So an unreadable stored line whose bytes
do not still show an intact ``"kind":"<a kind other than reset>"``, or that
show a key ``reset``, is a *damaged floor*: a floor (seq ``FLOOR_DAMAGED`` in
the receipt and INDEX) that blocks the provider view and ``session_history``
until repair puts a manual reset in its place. A floor recorded by the
receipt that the log no longer holds at or after its place is one too.

Receipt (RECEIPT_SIZE = 256 bytes, little-endian)
=================================================
==========  ====  ======================================================
offset      size  field
==========  ====  ======================================================
0           8     magic ``b"TLRCPT\\x00\\x01"``
8           1     state: 1 pending, 2 stable
9           7     zero
16          8     epoch (u64)
24          8     next_seq (u64): the high-water mark
32          8     window: seq of the newest boundary (i64; 0 = first window)
40          4     window segment (u32; 0 = no boundary)
44          4     active segment number (u32; 0 = no segment yet)
48          8     window byte offset (u64)
56          8     floor seq (i64; -1 = no floor; -2 = floor line unreadable;
                  -3 = floor damaged or missing: reads blocked until repair)
64          4     floor segment (u32; 0 = no floor)
68          4     sealed segment count (u32)
72          8     floor byte offset (u64)
80          40    active segment stamps: dev, ino, size, mtime_ns, ctime_ns
120         16    xxh3-128 digest of the sealed segments' stamps
136         8     floor after (i64): the last readable seq before the floor line
                  (names the window an unreadable floor opens: after + 1)
144         8     layout (u64): bumped by a segment merge, which moves rows to
                  other (segment, offset) positions without changing a byte
                  of content; cursors are bound to it beside the epoch and
                  are moved across it by the merges' INDEX records
152         96    zero (room for later fields)
248         8     xxh3-64 of bytes 0..247
==========  ====  ======================================================

A torn or partial overwrite fails the checksum and reads as malformed.
"""

from __future__ import annotations

import functools
import json
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

import msgspec
import xxhash

# Rows nest at most MAX_DEPTH levels; stored lines deeper than that are damage
# (the depth scanner and the recursion headroom: ``ledger.core.nesting``).
from ledger.core.nesting import MAX_DEPTH as MAX_DEPTH
from ledger.core.nesting import too_deep, with_headroom

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
MERGE_NAME = "MERGE"
QUARANTINE_DIR = "quarantine"
REWRITE_MARKER_NAME = "REWRITE.json"  # a marked rewrite in flight (ledger.storage.files.rewrite)
REWRITE_TOMBSTONE_SUFFIX = ".truncate"  # a segment's old bytes while a rewrite replaces it
WORKSPACE_TOMBSTONE_SUFFIX = ".deleting"  # .<ws>.deleting beside a workspace being deleted

CANONICAL_KEYS = ("seq", "id", "kind", "role", "parts", "partial", "meta", "ts", "batch")
CHECKSUM_KEY = "_c"
KINDS = frozenset({"message", "reset", "lead_in", "warning", "truncation", "fork"})
FORK_KIND = "fork"  # a fork's origin event (ledger.core.forks): internal, never shown
ROLES = frozenset({"user", "assistant", "system", "tool"})
RESET_REASONS = frozenset({"manual", "rollover", "compaction"})

_SEGMENT_NAME = re.compile(
    re.escape(SEGMENT_PREFIX) + "([0-9]{8})" + re.escape(SEGMENT_SUFFIX) + r"\Z"
)

SUFFIX_HEAD = b',"_c":"'
LINE_SUFFIX = len(SUFFIX_HEAD) + 16 + 2  # ,"_c":" + 16 hex + "}

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()


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


# --- lines -----------------------------------------------------------------


def checksum_hex(body: bytes) -> bytes:
    return b"%016x" % xxhash.xxh3_64_intdigest(body)


def frame(body: bytes) -> bytes:
    """Turn an encoded JSON object into a stored line (checksum, newline)."""
    return body[:-1] + SUFFIX_HEAD + checksum_hex(body) + b'"}\n'


def encode_line(row: dict[str, Any]) -> bytes:
    """Encode one row dict (already in stored key order) as a stored line."""
    return frame(_encoder.encode(row))


def body_of(line: bytes) -> bytes | None:
    """The checksummed body of a line (without its newline), or None when the
    framing is missing or the checksum does not match."""
    if len(line) <= LINE_SUFFIX or not line.endswith(b'"}'):
        return None
    cut = len(line) - LINE_SUFFIX
    if line[cut : cut + len(SUFFIX_HEAD)] != SUFFIX_HEAD:
        return None
    body = line[:cut] + b"}"
    if checksum_hex(body) != line[-18:-2]:
        return None
    return body


def all_verified(lines: list[bytes]) -> bool:
    """Whether every line (each without its newline) has its framing and a
    matching checksum, as :func:`body_of` verifies one line: one pass over a
    chunk of lines, the fast path of a scan (a False sends it line by line)."""
    cut, head, x3 = -LINE_SUFFIX, SUFFIX_HEAD, xxhash.xxh3_64_intdigest
    return all([
        len(line) > LINE_SUFFIX and line[cut:-18] == head and line[-2:] == b'"}'
        and b"%016x" % x3(line[:cut] + b"}") == line[-18:-2]
        for line in lines
    ])


def verified_bodies(lines: list[bytes]) -> list[bytes] | None:
    """The checksummed bodies of ``lines`` (each without its newline), as
    :func:`body_of` gives them, or None when any line fails its checks: one
    pass over a chunk of lines (a None sends the caller line by line)."""
    cut, head, x3 = -LINE_SUFFIX, SUFFIX_HEAD, xxhash.xxh3_64_intdigest
    bodies = [line[:cut] + b"}" for line in lines]
    if all([
        len(line) > LINE_SUFFIX and line[cut:-18] == head and line[-2:] == b'"}'
        and b"%016x" % x3(body) == line[-18:-2]
        for line, body in zip(lines, bodies, strict=True)
    ]):
        return bodies
    return None


def decode_line(line: bytes) -> dict[str, Any] | None:
    """Decode a verified line (no newline) into its row dict without ``_c``;
    None when the line fails verification, nests deeper than MAX_DEPTH or
    is not a JSON object."""
    body = body_of(line)
    if body is None or too_deep(body):
        return None
    try:
        row = with_headroom(_decoder.decode, body)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return None
    if not isinstance(row, dict):
        return None
    return row


def decode_unframed(line: bytes) -> dict[str, Any] | None:
    """Decode a line written without a checksum (legacy, imported or edited);
    None when it is not a JSON object or nests deeper than MAX_DEPTH."""
    if too_deep(line):
        return None
    try:
        row = with_headroom(_decoder.decode, line)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return None
    return row if isinstance(row, dict) else None


def encode_json(obj: Any) -> bytes:
    return with_headroom(_encoder.encode, obj)


def decode_json(data: bytes | str) -> Any:
    return with_headroom(_decoder.decode, data)


# --- reset candidates ------------------------------------------------------


def _word(word: str) -> bytes:
    """A bytes pattern for ``word`` with any char written raw or as a \\u + 4 hex
    escape, and control characters tolerated between its characters."""
    pieces = []
    for ch in word:
        hexcode = f"{ord(ch):04x}"
        escaped = "".join(f"[{h}{h.upper()}]" if h.isalpha() else h for h in hexcode)
        pieces.append(f"(?:{re.escape(ch)}|\\\\u{escaped})")
    return "[\\x00-\\x1f]*".join(pieces).encode("ascii")


_WS = b"[\\x00-\\x20]*"
_CANDIDATE_RE = re.compile(
    b"(?:^|[{,])"
    + _WS
    + b'"'
    + _WS
    + b"(?:"
    + _word("kind")
    + b"|"
    + _word("contextBoundaryKind")
    + b")"
    + _WS
    + b'"'
    + _WS
    + b":"
    + _WS
    + b'"'
    + _WS
    + _word("reset")
    + _WS
    + b'"'
)
_KIND_ONLY_RE = re.compile(
    b"(?:^|[{,])" + _WS + b'"' + _WS + _word("kind") + _WS + b'"' + _WS + b":" + _WS + b'"'
    + _WS + _word("reset") + _WS + b'"'
)


def raw_may_be_reset(data: bytes) -> bool:
    """True when unreadable bytes may hold a reset marker (fail closed)."""
    return _CANDIDATE_RE.search(data) is not None


# A key ``kind`` whose value is a kind other than reset, spelled exactly as the
# encoder writes it, and a key ``reset`` (which only reset rows carry).
_NOT_RESET_KIND_RE = re.compile(
    b'(?:^|[{,])"kind":"(?:' + b"|".join(sorted(k.encode() for k in KINDS if k != "reset"))
    + b')"[,}]'
)
_RESET_KEY_RE = re.compile(
    b"(?:^|[{,])" + _WS + b'"' + _WS + _word("reset") + _WS + b'"' + _WS + b":"
)


_NOT_RESET_KINDS = KINDS - {"reset"}


def damage_may_hide_reset(data: bytes) -> bool:
    """True when an unreadable stored line may once have been a reset whose
    marker the damage destroyed (a flipped byte inside ``"kind":"reset"``, a
    cut before or inside it). A line that still parses as a JSON object is
    one when it has a key ``reset`` or a ``kind`` that is no known kind; any
    other line unless its bytes still show an intact key ``kind`` with a
    known value other than ``reset`` and no key ``reset``.
    (Not for legacy or imported records: their keys differ.)"""
    row = decode_unframed(data)
    if row is not None:
        kind = row.get("kind")
        return "reset" in row or (kind is not None and kind not in _NOT_RESET_KINDS)
    return _NOT_RESET_KIND_RE.search(data) is None or _RESET_KEY_RE.search(data) is not None


def line_may_be_reset(data: bytes) -> bool:
    """An unreadable stored line that counts as a privacy floor: a reset
    candidate (``raw_may_be_reset``) or damage that may hide one."""
    return raw_may_be_reset(data) or damage_may_hide_reset(data)


def readable_row_is_reset(line: bytes, row: dict[str, Any]) -> bool:
    """True when a decoded row is a reset, counting a duplicate top-level
    ``kind`` key with value ``reset`` that a last-wins decoder hid."""
    if row.get("kind") == "reset":
        return True
    # A line that decoded holds no raw control characters, so a key "kind"
    # with value "reset" needs both words spelled out, or a \u escape.
    if (b"reset" not in line or b"kind" not in line) and b"\\u" not in line:
        return False
    if _KIND_ONLY_RE.search(line) is None:
        return False
    pairs: list[tuple[str, Any]] = []

    def hook(items: list[tuple[str, Any]]) -> dict[str, Any]:
        pairs.clear()
        pairs.extend(items)
        return dict(items)

    try:
        with_headroom(lambda data: json.loads(data, object_pairs_hook=hook), line)
    except ValueError:
        return True
    return any(k == "kind" and v == "reset" for k, v in pairs)


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
    def of(cls, st: Any) -> Stamp:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


ZERO_STAMP = Stamp(0, 0, 0, 0, 0)


@dataclass(frozen=True)
class Receipt:
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
        r.active.dev,
        r.active.ino,
        r.active.size,
        r.active.mtime_ns,
        r.active.ctime_ns,
        r.sealed_digest,
        r.floor_after,
        r.layout,
    )
    return head + struct.pack("<Q", xxhash.xxh3_64_intdigest(head))


@functools.lru_cache(maxsize=64)
def unpack_receipt(data: bytes) -> Receipt | None:
    """The receipt in ``data``, or None when it is not exactly one valid receipt.
    (Pure, and receipts are immutable: remembered by their bytes, since every
    append and every page of a read unpacks the same receipt again.)"""
    if len(data) != RECEIPT_SIZE:
        return None
    head = data[:-8]
    if struct.unpack("<Q", data[-8:])[0] != xxhash.xxh3_64_intdigest(head):
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


SEQ_PREFIX_RE = re.compile(rb'\{"seq":(-?\d{1,19}),')


def seq_prefix(line_start: bytes) -> int | None:
    """The seq at the start of a stored line, read from its first bytes only."""
    m = SEQ_PREFIX_RE.match(line_start)
    return int(m.group(1)) if m else None
