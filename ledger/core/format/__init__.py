"""The on-disk format of a transcript-ledger history, in one place.

Everything that reads or writes these bytes imports this package, and only the
part it uses; nothing parses them a second time (``recovery`` included):

- ``ledger.core.format.rows``: a stored row's line (its framing, checksum,
  codec) and what damage may hide in one (reset candidates) -- every engine
  stores rows as these lines (PostgreSQL and memory one line per row);
- ``ledger.core.format.files``: the file engine's directory (names, FORMAT,
  segments), its receipt and its INDEX projection.

This docstring is the specification of both; the modules hold the code.

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
