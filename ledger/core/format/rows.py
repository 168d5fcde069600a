"""A stored row's line, the bytes every engine keeps of a row (the files'
segments line by line, PostgreSQL and memory one line per row): its framing
and checksum, the codec, and the reset candidates damage may hide. Specified
in ``ledger.core.format`` (sections Lines, Batches, Reset candidates).
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from itertools import repeat
from operator import add, itemgetter
from typing import Any

import msgspec
import xxhash

# Rows nest at most MAX_DEPTH levels; stored lines deeper than that are damage
# (the depth scanner and the recursion headroom: ``ledger.core.nesting``).
from ledger.core.nesting import MAX_DEPTH as MAX_DEPTH
from ledger.core.nesting import shallow_lines as shallow_lines
from ledger.core.nesting import too_deep, with_headroom

CANONICAL_KEYS = ("seq", "id", "kind", "role", "parts", "partial", "meta", "ts", "batch")
CHECKSUM_KEY = "_c"
KINDS = frozenset({"message", "reset", "lead_in", "warning", "truncation", "fork"})
FORK_KIND = "fork"  # a fork's origin event (ledger.core.forks): internal, never shown
ROLES = frozenset({"user", "assistant", "system", "tool"})
RESET_REASONS = frozenset({"manual", "rollover", "compaction"})

SUFFIX_HEAD = b',"_c":"'
LINE_SUFFIX = len(SUFFIX_HEAD) + 16 + 2  # ,"_c":" + 16 hex + "}

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()


# --- lines -----------------------------------------------------------------


def checksum_hex(body: bytes) -> bytes:
    return b"%016x" % xxhash.xxh3_64_intdigest(body)


_LINE_END = SUFFIX_HEAD + b'%016x"}\n'


def frame(body: bytes) -> bytes:
    """Turn an encoded JSON object into a stored line (checksum, newline)."""
    return body[:-1] + _LINE_END % xxhash.xxh3_64_intdigest(body)


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


_BODY = itemgetter(slice(None, -LINE_SUFFIX))  # a line's body without its closing brace
_SUFFIX = itemgetter(slice(-LINE_SUFFIX, None))  # ,"_c":"<16 hex>"}
_SUFFIX_FORMAT = SUFFIX_HEAD + b'%016x"}'


def _framed(lines: list[bytes], hashes: Any) -> bool:
    """Whether every line is longer than its framing and ends in exactly the
    suffix ``frame`` writes for the matching hash of ``hashes``. Each suffix
    slice is LINE_SUFFIX bytes long and each formatted one too, so comparing
    the joined suffixes compares every line with its own (no Python-level
    loop per line: the chunk's lines go through ``map`` in C). ``hashes``
    is lazy: a short line fails before any is computed."""
    n = len(lines)
    if n == 0:
        return True
    if min(map(len, lines)) <= LINE_SUFFIX:
        return False
    return (_SUFFIX_FORMAT * n) % tuple(hashes) == b"".join(map(_SUFFIX, lines))


def _bodies(lines: list[bytes]) -> Iterator[bytes]:
    """Each line's checksummed body (``line[:cut] + b"}"``), lazily."""
    return map(add, map(_BODY, lines), repeat(b"}"))


def all_verified(lines: list[bytes]) -> bool:
    """Whether every line (each without its newline) has its framing and a
    matching checksum, as :func:`body_of` verifies one line: one pass over a
    chunk of lines, the fast path of a scan (a False sends it line by line)."""
    return _framed(lines, map(xxhash.xxh3_64_intdigest, _bodies(lines)))


_BODY_NL = itemgetter(slice(None, -LINE_SUFFIX - 1))  # the same, of a line with its newline
_SUFFIX_NL = itemgetter(slice(-LINE_SUFFIX - 1, None))  # ,"_c":"<16 hex>"}\n
_SUFFIX_NL_FORMAT = _SUFFIX_FORMAT + b"\n"


def one_per_line(lines: list[bytes]) -> bytes:
    """``lines`` (bodies, or lines with their newline) for one ``decode_lines``
    call into 1-tuples (``Decoder(tuple[...])``), each line inside an array of
    its own: ``[A]`` newline ``[B]``. ``decode_lines`` reads a newline as
    whitespace, so bare lines let a value begin on one line and end on the
    next (a row and the start of another on one line, the end on the next:
    as many values as lines, though no line decodes alone, nested as deep as
    the lines' brackets together). Wrapped, a value that runs on past its
    line's ``]`` is met by the next line's ``[`` where only ``,`` or a closing
    bracket may stand (strings cannot hold a newline): a DecodeError. So
    each 1-tuple holds exactly what its line decodes to alone. (One copy of
    the chunk: the first and last line take their outer bracket first.)"""
    if not lines:
        return b""
    parts = lines[:]
    parts[0] = b"[" + parts[0]
    parts[-1] += b"]"
    return b"]\n[".join(parts)


def lines_of(buf: bytes, end: int) -> list[bytes]:
    """The lines of ``buf[:end]`` (which ends in a newline), each with its
    newline; ``buf`` may go on after ``end`` with the start of a line (no
    newline), which is left out. The cut finds each newline with ``memchr``
    (``io.BytesIO.readlines``; ``bytes.split`` tests every byte in a loop,
    3x the time: bench/RESULTS.md, issue 31, checkfast); ``buf`` is not
    copied but line by line."""
    lines = io.BytesIO(buf).readlines()
    if end != len(buf):
        lines.pop()
    return lines


def all_verified_lines(lines: list[bytes]) -> bool:
    """:func:`all_verified` of lines that each end in their newline
    (:func:`lines_of`)."""
    n = len(lines)
    if n == 0:
        return True
    if min(map(len, lines)) <= LINE_SUFFIX + 1:
        return False
    hashes = map(xxhash.xxh3_64_intdigest, map(add, map(_BODY_NL, lines), repeat(b"}")))
    return (_SUFFIX_NL_FORMAT * n) % tuple(hashes) == b"".join(map(_SUFFIX_NL, lines))


def verified_bodies(lines: list[bytes]) -> list[bytes] | None:
    """The checksummed bodies of ``lines`` (each without its newline), as
    :func:`body_of` gives them, or None when any line fails its checks: one
    pass over a chunk of lines (a None sends the caller line by line)."""
    bodies = list(_bodies(lines))
    return bodies if _framed(lines, map(xxhash.xxh3_64_intdigest, bodies)) else None


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


# --- byte searches and JSON escapes ----------------------------------------

_NON_CONTROL_ESCAPE = re.compile(rb"\\u(?!00[01][0-9a-fA-F])")


def may_spell_by_escape(data: bytes) -> bool:
    """True when ``data`` holds a ``\\u`` escape that is not a control
    character's. The store's encoder escapes only control characters
    (``\\u0000``-``\\u001f``), which spell no printable character, so in a
    line without another escape a byte search for a word (``"tool_``, a
    search query) that misses also misses in the decoded row. Any other
    ``\\u`` escape (hostile or foreign bytes; or an escaped backslash before
    a ``u``, a harmless false alarm) may spell the word: decode the line."""
    return _NON_CONTROL_ESCAPE.search(data) is not None


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
        return "reset" in row or (kind is not None and (
            not isinstance(kind, str) or kind not in _NOT_RESET_KINDS))
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


SEQ_PREFIX_RE = re.compile(rb'\{"seq":(-?\d{1,19}),')


def seq_prefix(line_start: bytes) -> int | None:
    """The seq at the start of a stored line, read from its first bytes only."""
    m = SEQ_PREFIX_RE.match(line_start)
    return int(m.group(1)) if m else None
