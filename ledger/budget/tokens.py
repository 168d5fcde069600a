"""Token accounting: text, JSON, canonical rows and tool schemas.

**Text.** A string is counted with the resolved tiktoken encoding
(``encode_ordinary``: special-token text is ordinary text). A string longer than
``CHUNK_CHARS`` code points is cut into chunks, only at pre-tokenizer piece
boundaries (the encoding's ``pat_str``) that follow a non-space character: there
the chunk splits into exactly the pieces the whole text has, so the count is
exact. (A boundary after a whitespace piece is not enough: the pattern's
``\\s+(?!\\S)`` lookahead sees the chunk's end and re-splits the run.) Such
boundaries are found locally: for ``o200k_base`` and ``cl100k_base`` a non-space
followed by a space or tab, and a letter/digit transition, always are one (no
alternative spans them; the pattern has no lookbehind); where a chunk has none,
the pattern is run from the last cut. A single piece longer than
``CHUNK_CHARS`` (a 6 MB run of one letter, a huge whitespace run), or a chunk
whose only boundaries follow whitespace, is force-cut on code point boundaries;
each cut adds ``FORCE_CUT_SLACK`` tokens (fuzzing in ``tests/test_tokens_text.py``
shows the real shortfall is at most 2) and marks the count ``exact: false``.
Work per chunk is bounded, so time is linear on any input, and tiktoken never
sees more than one chunk (on a 1 MB whitespace run its own regex overflows its
stack and panics).

**JSON.** Every string (key or value) is encoded as text; the rest of the
compact canonical JSON is charged by bytes: ``JSON_PUNCT_TOKENS_PER_BYTE`` (1)
per byte outside strings (quotes, braces, commas, colons, numbers, literals) and
``JSON_ESCAPE_TOKENS_PER_BYTE`` (1.5) per byte that escaping adds (``\\n`` adds
one). Non-ASCII is assumed to travel as UTF-8, not ``\\u`` + 4 hex escapes. JSON counts are
``exact: false``.

**Rows** (the canonical row of DESIGN.md 3, until provider adapters exist):
``MESSAGE_FRAMING`` per row plus, per part, ``PART_FRAMING[type]`` and:
``text``/``reasoning`` the text; ``tool_call`` name, id and input (JSON, or
text when a string); ``tool_result`` id, error text and output (text when a
string, else JSON); ``media`` a media allowance; an unknown part type the whole
part as JSON. ``reset`` rows and rows of unknown kinds are never
provider-visible and count 0. Row counts are ``exact: false`` (framing is an
allowance). Only genuine media get media allowances: a ``media`` part, and the
media parts of the one tool-output media wrapper the adapters send as media, a
tool_result output that is a non-empty list of canonical ``text`` and ``media``
parts (each media part with a ``mime`` and ``data`` or ``url``). Text and JSON
anywhere else stay text, data URLs and media-shaped objects included
(``{"type": "image", ...}`` inside a tool input, an MCP ``content`` object, a
JSON string holding a media block). Adapters that send other shapes as media
count them through a :class:`RenderedShape` with a media hook.

**Media allowances** (per image, by family): openai ``85 + 170 x tiles`` (512 px
tiles after fitting 2048 px and a 768 px short side; 1,445 when the size is
unknown); anthropic ``w x h / 750`` after fitting 1,568 px and 1.15 MP, at most
1,600; google ``max(1120, 258 x 768-px tiles)``, 1,548 unknown; other families
the largest of the three. Sizes come from ``width``/``height`` or the PNG/GIF
header of inline data. PDFs: ``PDF_PAGE_TOKENS`` per page (``pages`` field,
else ``/Type /Page`` objects in inline data, else ``PDF_DEFAULT_PAGES``); other
media ``MEDIA_OTHER_TOKENS``.

**Modes.** ``"encoding"`` uses the resolved encoding; ``"approx"`` charges
``ceil(utf8 bytes / 4)`` per string, loads nothing, and is for ordinary
estimates only: the hard guards in ``ledger.budget`` never use it.

**Cache.** Row costs are a projection, kept in a :class:`RowTokenCache` (an LRU
keyed by counting profile and the xxh3-128 digest of the row's kind, role and
parts), so re-counting a window after an append costs a digest per old row and
an encode per new row. tiktoken and ``regex`` are imported on first use.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, Literal, Protocol

import msgspec
import xxhash

from ledger.budget.encodings import encoding_source, get_encoding
from ledger.budget.models import ModelRegistry, ModelSpec, resolve
from ledger.core.errors import InvalidRow, LedgerError, TokenizerError

__all__ = [
    "CHUNK_CHARS",
    "FORCE_CUT_SLACK",
    "JSON_ESCAPE_TOKENS_PER_BYTE",
    "JSON_PUNCT_TOKENS_PER_BYTE",
    "MESSAGE_FRAMING",
    "PART_FRAMING",
    "REQUEST_FRAMING",
    "TOOLS_FRAMING",
    "TOOL_FRAMING",
    "Count",
    "InvalidTools",
    "Mode",
    "RowShape",
    "RowTokenCache",
    "TextCounter",
    "TokenCount",
    "TokenCounter",
    "approx_tokens",
    "count_rows",
    "count_text",
    "image_tokens",
    "text_counter",
]

Mode = Literal["encoding", "approx"]

CHUNK_CHARS = 8192
"""Largest string (code points) handed to tiktoken at once."""

FORCE_CUT_SLACK = 4
"""Tokens added per forced cut inside one pre-tokenizer piece. BPE on a cut
piece can merge differently near the cut; fuzzing measures at most 2."""

JSON_PUNCT_TOKENS_PER_BYTE = 1.0
"""Tokens per byte of compact JSON outside strings (quotes, braces, commas,
colons, numbers, literals)."""

JSON_ESCAPE_TOKENS_PER_BYTE = 1.5
"""Tokens per byte that JSON escaping adds to a string (``\\n`` adds 1 byte).
With these two, no value among the 14,846 JSON objects and arrays of
../shared/real-transcripts counts below tiktoken's count of its compact or
``json.dumps`` form (aggregate +17%); tests/test_tokens_rows.py re-checks a
third of them on every run."""

MESSAGE_FRAMING = 4
"""Per row: role and message delimiters."""

REQUEST_FRAMING = 3
"""Per request: reply priming."""

PART_FRAMING: dict[str, int] = {
    "text": 1,
    "reasoning": 2,
    "tool_call": 10,
    "tool_result": 10,
    "media": 4,
}
"""Per part, by type; an unknown type gets ``PART_FRAMING_OTHER``."""

PART_FRAMING_OTHER = 4
"""Per part of an unknown type (which is then counted whole, as JSON)."""

TOOL_FRAMING = 8
"""Per advertised tool schema."""

TOOLS_FRAMING = 12
"""Once per request that advertises any tool."""

PDF_PAGE_TOKENS = 3000
"""Per PDF page: its text plus its page image, as providers bill them."""

PDF_DEFAULT_PAGES = 10
"""Pages assumed for a PDF given by URL with no ``pages`` field."""

MEDIA_OTHER_TOKENS = 2000
"""Per media item that is neither an image nor a PDF (audio, video, ...)."""

APPROX_BYTES_PER_TOKEN = 4
"""The approximation: UTF-8 bytes per token."""


class Count(msgspec.Struct, frozen=True):
    """Raw tokens of the counting encoding (no safety factor) and exactness."""

    tokens: int
    exact: bool = True

    def __add__(self, other: Count) -> Count:
        return Count(self.tokens + other.tokens, self.exact and other.exact)


ZERO = Count(0, True)


class TokenCount(msgspec.Struct, frozen=True, kw_only=True):
    """A count for a model: ``tokens`` includes the safety factor (rounded up);
    ``raw_tokens`` is the encoding's own count."""

    tokens: int
    encoding: str
    exact: bool
    model: str
    family: str
    safety_factor: float
    mode: str
    raw_tokens: int


class InvalidTools(LedgerError):
    """Tool schemas or an advertised set that cannot be counted."""


# --------------------------------------------------------------------------- text

# Positions that are pre-tokenizer piece boundaries whatever surrounds them, for
# the o200k and cl100k patterns: no alternative joins a non-space to
# a following horizontal space (the punctuation alternative may take trailing
# \r\n, so those are excluded) or a letter to a digit either way. Matched as a
# two-character window; the cut is between the two.
_SYNC = r"(?r)(?:\S[^\S\r\n]|\p{L}\p{N}|\p{N}\p{L})"
_SYNC_SAFE = frozenset({"o200k_base", "o200k_harmony", "cl100k_base"})


def _len_utf8(text: str) -> int:
    if text.isascii():
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


def _fix_surrogates(text: str) -> str:
    # What tiktoken does to the whole text, done before cutting so a surrogate
    # pair is never split between chunks.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


class TextCounter:
    """Exact, chunked ``encode_ordinary`` counts for one encoding."""

    def __init__(self, encoding: str, *, chunk_chars: int = CHUNK_CHARS) -> None:
        if chunk_chars < 1:
            raise ValueError("chunk_chars must be >= 1")
        import regex

        self.encoding = encoding
        self.chunk_chars = chunk_chars
        source = encoding_source(encoding)
        self._encode = get_encoding(encoding).encode_ordinary
        self._pieces = regex.compile(source.pat_str)
        self._sync = regex.compile(_SYNC) if encoding in _SYNC_SAFE else None

    def _tokens(self, text: str) -> int:
        try:
            return len(self._encode(text))
        except BaseException as exc:
            # tiktoken's Rust side reports a panic as pyo3's PanicException, which
            # is a BaseException; only genuine interpreter exits pass through.
            if isinstance(exc, (KeyboardInterrupt, SystemExit, GeneratorExit)):
                raise
            raise TokenizerError(
                f"encoding {self.encoding!r} failed on a {len(text)}-character chunk: "
                f"{type(exc).__name__}: {exc}"
            ) from exc

    def count(self, text: str) -> Count:
        """Tokens of ``text``; exact unless a single piece had to be force-cut."""
        size = self.chunk_chars
        if len(text) <= size:
            return Count(self._tokens(text), True)
        text = _fix_surrogates(text)
        n = len(text)
        total = cuts = pos = 0
        while pos < n:
            end = pos + size
            if end >= n:
                total += self._tokens(text[pos:])
                break
            cut = self._sync_cut(text, pos, end)
            if cut < 0:
                cut, safe, piece_end = self._piece_cut(text, pos, end)
                if cut > 0 and not safe:
                    cuts += 1
                elif cut < 0:
                    tokens, forced = self._force(text, pos, piece_end)
                    total += tokens
                    cuts += forced
                    pos = piece_end
                    continue
            total += self._tokens(text[pos:cut])
            pos = cut
        return Count(total + cuts * FORCE_CUT_SLACK, cuts == 0)

    def _sync_cut(self, text: str, pos: int, end: int) -> int:
        """The last always-boundary in (pos + size/2, end], or -1."""
        if self._sync is None:
            return -1
        lo = pos + max(1, self.chunk_chars // 2) - 1
        found = self._sync.search(text, lo, end + 1)
        return found.start() + 1 if found else -1

    def _piece_cut(self, text: str, pos: int, end: int) -> tuple[int, bool, int]:
        """Run the pattern from ``pos`` (a known boundary) up to ``end``.

        Returns ``(cut, safe, piece_end)``: the last piece end in (pos, end] that
        follows a non-space character (safe: the chunk then splits exactly like
        the whole text), else the last piece end at all (unsafe: a trailing
        whitespace piece can re-split once the lookahead sees the chunk's end),
        else ``(-1, False, end of the first piece)`` when that piece is too long.
        """
        safe = unsafe = -1
        for match in self._pieces.finditer(text, pos):
            stop = match.end()
            if stop > end:
                if safe > 0:
                    return safe, True, -1
                return unsafe, False, (stop if unsafe < 0 else -1)
            if text[stop - 1].isspace():
                unsafe = stop
            else:
                safe = stop
        raise AssertionError("unreachable: end < len(text), so a piece crosses it")

    def _force(self, text: str, start: int, stop: int) -> tuple[int, int]:
        size = self.chunk_chars
        tokens = sum(self._tokens(text[i : min(i + size, stop)]) for i in range(start, stop, size))
        return tokens, (stop - start - 1) // size


_counters: dict[tuple[str, int], TextCounter] = {}
_counters_lock = threading.Lock()


def text_counter(encoding: str, *, chunk_chars: int = CHUNK_CHARS) -> TextCounter:
    """The shared :class:`TextCounter` of an encoding (loads it on first use)."""
    key = (encoding, chunk_chars)
    found = _counters.get(key)
    if found is None:
        with _counters_lock:
            found = _counters.get(key)
            if found is None:
                found = TextCounter(encoding, chunk_chars=chunk_chars)
                _counters[key] = found
    return found


def approx_tokens(text: str) -> Count:
    """The cheap estimate: ``ceil(utf8 bytes / 4)``; never for a hard guard."""
    return Count(-(-_len_utf8(text) // APPROX_BYTES_PER_TOKEN), False)


# --------------------------------------------------------------------------- JSON

TextFn = Callable[[str], Count]
MediaHook = Callable[[Mapping[str, Any], tuple[Any, ...]], "int | None"]
"""Called on each object of a provider body with its path; returns a media
allowance for a genuine media node (its subtree is then not counted as text)."""


def _json_bytes(obj: Any) -> int:
    try:
        return len(msgspec.json.encode(obj))
    except (TypeError, ValueError, OverflowError) as exc:
        raise TokenizerError(f"cannot count a value outside the JSON domain: {exc}") from exc


_NEEDS_ESCAPE = re.compile(r'[\x00-\x1f"\\]')


def _escaped_len(text: str, raw: int) -> int:
    if _NEEDS_ESCAPE.search(text) is None:
        return raw
    return len(msgspec.json.encode(text)) - 2


def json_cost(obj: Any, text: TextFn, media: MediaHook | None = None) -> Count:
    """Strings (keys and values) encoded as text; the rest of the compact JSON
    charged by bytes: ``JSON_PUNCT_TOKENS_PER_BYTE`` per byte outside strings
    and ``JSON_ESCAPE_TOKENS_PER_BYTE`` per byte that escaping adds."""
    tokens = 0
    raw_bytes = 0
    escaped_bytes = 0
    media_bytes = 0
    stack: list[tuple[Any, tuple[Any, ...]]] = [(obj, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, str):
            tokens += text(node).tokens
            raw = _len_utf8(node)
            raw_bytes += raw
            escaped_bytes += _escaped_len(node, raw)
        elif isinstance(node, Mapping):
            if media is not None:
                allowance = media(node, path)
                if allowance is not None:
                    tokens += allowance
                    media_bytes += _json_bytes(node)
                    continue
            for key, value in node.items():
                if isinstance(key, str):
                    stack.append((key, path))
                stack.append((value, (*path, key) if media is not None else path))
        elif isinstance(node, (list, tuple)):
            if media is not None:
                stack.extend((v, (*path, i)) for i, v in enumerate(node))
            else:
                stack.extend((v, path) for v in node)
    structural = _json_bytes(obj) - escaped_bytes - media_bytes
    expansion = escaped_bytes - raw_bytes
    tokens += math.ceil(
        max(structural, 0) * JSON_PUNCT_TOKENS_PER_BYTE + expansion * JSON_ESCAPE_TOKENS_PER_BYTE
    )
    return Count(tokens, False)


# -------------------------------------------------------------------------- media

_PAGE = re.compile(rb"/Type\s*/Page(?![A-Za-z])")


def image_tokens(profile: str, width: int | None, height: int | None) -> int:
    """The image allowance of a media profile (``openai``, ``anthropic``,
    ``google`` or anything else = the largest of the three)."""
    known = width is not None and height is not None and width > 0 and height > 0
    if profile == "openai":
        if not known:
            return 1445
        assert width is not None and height is not None
        w, h = float(width), float(height)
        scale = min(1.0, 2048 / max(w, h))
        w, h = w * scale, h * scale
        scale = min(1.0, 768 / min(w, h))
        w, h = w * scale, h * scale
        return 85 + 170 * math.ceil(w / 512) * math.ceil(h / 512)
    if profile == "anthropic":
        if not known:
            return 1600
        assert width is not None and height is not None
        w, h = float(width), float(height)
        scale = min(1.0, 1568 / max(w, h), math.sqrt(1_150_000 / (w * h)))
        return min(1600, math.ceil(w * scale * h * scale / 750))
    if profile == "google":
        if not known:
            return 1548
        assert width is not None and height is not None
        small = width <= 384 and height <= 384
        tiles = 1 if small else math.ceil(width / 768) * math.ceil(height / 768)
        return max(1120, 258 * tiles)
    return max(image_tokens(p, width, height) for p in ("openai", "anthropic", "google"))


def _b64_prefix(data: str, want: int) -> bytes:
    if data.startswith("data:"):
        comma = data.find(",")
        data = data[comma + 1 :] if comma >= 0 else ""
    head = data[: -(-want // 3) * 4]
    try:
        return base64.b64decode(head + "=" * (-len(head) % 4))
    except (binascii.Error, ValueError):
        return b""


def _sniff_size(data: str) -> tuple[int | None, int | None]:
    head = _b64_prefix(data, 24)
    if head.startswith(b"\x89PNG\r\n\x1a\n") and len(head) >= 24:
        return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    if head[:6] in (b"GIF87a", b"GIF89a") and len(head) >= 10:
        return int.from_bytes(head[6:8], "little"), int.from_bytes(head[8:10], "little")
    return None, None


def _pdf_pages(data: str | None, pages: Any) -> int:
    if isinstance(pages, int) and not isinstance(pages, bool) and pages > 0:
        return pages
    if data:
        raw = _b64_prefix(data, len(data))
        found = len(_PAGE.findall(raw))
        if found:
            return found
    return PDF_DEFAULT_PAGES


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def media_tokens(
    profile: str,
    mime: str,
    *,
    data: str | None = None,
    width: int | None = None,
    height: int | None = None,
    pages: Any = None,
) -> int:
    """The allowance for one genuine media item."""
    mime = mime.lower()
    if mime.startswith("image/"):
        if (width is None or height is None) and data:
            width, height = _sniff_size(data)
        return image_tokens(profile, width, height)
    if mime == "application/pdf":
        return PDF_PAGE_TOKENS * _pdf_pages(data, pages)
    return MEDIA_OTHER_TOKENS


def _media_part(part: Mapping[str, Any], *, need_mime: bool = False) -> dict[str, Any] | None:
    """``{"mime", "data", "width", "height", "pages"}`` of a canonical media part
    (``{"type": "media", "mime", "data" | "url", ...}``), else None."""
    if part.get("type") != "media":
        return None
    mime, data, url = part.get("mime"), part.get("data"), part.get("url")
    if not isinstance(data, str):
        if not isinstance(url, str):
            return None
        data = url if url.startswith("data:") else None  # inline data in a data URL
    if not isinstance(mime, str):
        if need_mime:
            return None
        mime = "application/octet-stream"
    return {
        "mime": mime,
        "data": data if isinstance(data, str) else None,
        "width": _int_or_none(part.get("width")),
        "height": _int_or_none(part.get("height")),
        "pages": part.get("pages"),
    }


def media_info(part: Mapping[str, Any]) -> dict[str, Any] | None:
    """The allowance inputs of a genuine canonical media part, else None."""
    return _media_part(part)


def _parts_output(output: Any) -> bool:
    """The one tool-output media wrapper the adapters send as media: a non-empty
    list of canonical text and media parts (``ledger.adapters.common`` sends any
    other output as JSON text, so it is counted as text here too)."""
    return (
        isinstance(output, list)
        and bool(output)
        and all(
            isinstance(p, Mapping)
            and (
                (p.get("type") == "text" and isinstance(p.get("text"), str))
                or _media_part(p, need_mime=True) is not None
            )
            for p in output
        )
    )


# --------------------------------------------------------------------------- rows

VISIBLE_KINDS = frozenset({"message", "lead_in", "warning", "truncation"})


class Accountant:
    """The counting primitives a :class:`RowShape` uses: text, JSON and media
    under one encoding (or the approximation) and one media profile."""

    def __init__(self, text: TextFn, media_profile: str) -> None:
        self.text = text
        self.media_profile = media_profile

    def json(self, obj: Any, media: MediaHook | None = None) -> Count:
        return json_cost(obj, self.text, media)

    def value(self, obj: Any) -> Count:
        """A string as text, anything else as JSON, None as nothing."""
        if obj is None:
            return ZERO
        return self.text(obj) if isinstance(obj, str) else self.json(obj)

    def media(self, info: Mapping[str, Any]) -> Count:
        tokens = media_tokens(
            self.media_profile,
            info["mime"],
            data=info.get("data"),
            width=info.get("width"),
            height=info.get("height"),
            pages=info.get("pages"),
        )
        return Count(tokens, False)

    def tool_output(self, output: Any) -> Count:
        if output is None:
            return ZERO
        if isinstance(output, str):
            return self.text(output)
        if not _parts_output(output):
            return self.json(output)
        total = Count(2, False)
        for part in output:
            info = _media_part(part)
            if info is not None:
                total += Count(PART_FRAMING["media"], False) + self.media(info)
            else:
                total += Count(PART_FRAMING["text"], False) + self.text(part["text"])
        return total


class RowShape(Protocol):
    """How rows reach the provider. ``key`` joins the cache key: change it when
    ``measure`` changes. Provider adapters implement this with the
    :class:`Accountant` primitives (``acct.json(body, media=hook)`` counts an
    adapter-produced request body with a path-aware media hook)."""

    key: str

    def measure(self, row: Mapping[str, Any], acct: Accountant) -> Count: ...


class CanonicalShape:
    """The canonical JSON row, as documented in this module."""

    key = "canonical-1"

    def measure(self, row: Mapping[str, Any], acct: Accountant) -> Count:
        kind = row.get("kind", "message")
        if kind not in VISIBLE_KINDS:
            return ZERO
        parts = row.get("parts", [])
        if not isinstance(parts, list):
            raise InvalidRow(f"row seq={row.get('seq')}: parts must be a list")
        total = Count(MESSAGE_FRAMING, False)
        for part in parts:
            total += self._part(part, acct)
        return total

    def _part(self, part: Any, acct: Accountant) -> Count:
        if not isinstance(part, Mapping):
            return Count(PART_FRAMING_OTHER, False) + acct.json(part)
        kind = part.get("type")
        framing = Count(PART_FRAMING.get(kind, PART_FRAMING_OTHER), False)  # type: ignore[arg-type]
        if kind in ("text", "reasoning") and isinstance(part.get("text"), str):
            return framing + acct.text(part["text"])
        if kind == "tool_call":
            name, call_id = acct.value(part.get("name")), acct.value(part.get("id"))
            return framing + name + call_id + acct.value(part.get("input"))
        if kind == "tool_result":
            error = part.get("error")
            return (
                framing
                + acct.value(part.get("id"))
                + (acct.text(error) if isinstance(error, str) else ZERO)
                + acct.tool_output(part.get("output"))
            )
        if kind == "media":
            info = _media_part(part)
            if info is not None:
                return framing + acct.media(info)
        return framing + acct.json(part)


class RenderedShape:
    """Rows rendered by a provider adapter into its own JSON (one message object
    or a list of them per row), counted as JSON with a media hook."""

    def __init__(
        self,
        key: str,
        render: Callable[[Mapping[str, Any]], Any],
        media: MediaHook | None = None,
    ) -> None:
        self.key = key
        self._render = render
        self._media = media

    def measure(self, row: Mapping[str, Any], acct: Accountant) -> Count:
        return Count(MESSAGE_FRAMING, False) + acct.json(self._render(row), self._media)


CANONICAL = CanonicalShape()


class RowTokenCache:
    """An LRU of row costs keyed by a 16-byte digest: derived data, safe to drop
    at any time. Lookups take no lock (a hit only reorders); inserts do."""

    def __init__(self, maxsize: int = 65536) -> None:
        self.maxsize = maxsize
        self._data: OrderedDict[bytes, Count] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: bytes) -> Count | None:
        found = self._data.get(key)
        if found is None:
            self.misses += 1
            return None
        self.hits += 1
        try:
            self._data.move_to_end(key)
        except KeyError:  # evicted by another thread meanwhile; the value is still right
            pass
        return found

    def put(self, key: bytes, value: Count) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def __len__(self) -> int:
        return len(self._data)


DEFAULT_CACHE = RowTokenCache()

_row_encoder = msgspec.json.Encoder()


def _row_key(row: Mapping[str, Any], seed: int) -> bytes | None:
    """xxh3-128 of what the provider sees of a row (kind, role, parts), seeded
    by the counting profile so that profiles never share an entry."""
    try:
        raw = _row_encoder.encode((row.get("kind"), row.get("role"), row.get("parts")))
    except (TypeError, ValueError, OverflowError):
        return None
    return xxhash.xxh3_128_digest(raw, seed)


# ------------------------------------------------------------------------ counter


def _normalize_tools(tools: Any) -> dict[str, Any]:
    if tools is None:
        return {}
    if isinstance(tools, Mapping):
        return dict(tools)
    out: dict[str, Any] = {}
    for schema in tools:
        name = None
        if isinstance(schema, Mapping):
            name = schema.get("name")
            inner = schema.get("function")
            if name is None and isinstance(inner, Mapping):
                name = inner.get("name")
        if not isinstance(name, str):
            raise InvalidTools(f"tool schema without a name: {str(schema)[:80]}")
        out[name] = schema
    return out


class TokenCounter:
    """Counts for one model: its resolved encoding (or the approximation), its
    media profile and its safety factor.

    ``mode="encoding"`` loads the encoding on first use and raises
    :class:`~ledger.errors.TokenizerError` when it cannot; ``"approx"`` never loads
    anything and every count it gives is ``exact: false``.
    """

    def __init__(
        self,
        model: str | ModelSpec = "gpt-4o",
        *,
        mode: Mode = "encoding",
        registry: ModelRegistry | None = None,
        cache: RowTokenCache | None = DEFAULT_CACHE,
        chunk_chars: int = CHUNK_CHARS,
    ) -> None:
        if mode not in ("encoding", "approx"):
            raise ValueError(f"mode must be 'encoding' or 'approx', not {mode!r}")
        self.spec = resolve(model, registry)
        self.model = model if isinstance(model, str) else model.id
        self.mode: Mode = mode
        self.cache = cache
        self.chunk_chars = chunk_chars
        self._text: TextFn | None = None
        family = self.spec.family
        profile = family if family in ("openai", "anthropic", "google") else "generic"
        self.media_profile = profile
        self.profile_key = f"{self.spec.encoding}|{profile}|{mode}|{chunk_chars}"

    @property
    def text_fn(self) -> TextFn:
        if self._text is None:
            if self.mode == "approx":
                self._text = approx_tokens
            else:
                self._text = text_counter(self.spec.encoding, chunk_chars=self.chunk_chars).count
        return self._text

    def accountant(self) -> Accountant:
        return Accountant(self.text_fn, self.media_profile)

    def scaled(self, raw: Count) -> TokenCount:
        """Apply the safety factor and label a raw count."""
        factor = self.spec.safety_factor
        tokens = raw.tokens if factor == 1.0 else math.ceil(raw.tokens * factor)
        return TokenCount(
            tokens=tokens,
            encoding=self.spec.encoding,
            exact=raw.exact and self.spec.exact and self.mode == "encoding",
            model=self.model,
            family=self.spec.family,
            safety_factor=factor,
            mode=self.mode,
            raw_tokens=raw.tokens,
        )

    # raw counts ------------------------------------------------------------

    def raw_text(self, text: str) -> Count:
        if not isinstance(text, str):
            raise TokenizerError(f"can only count text, not {type(text).__name__}")
        return self.text_fn(text)

    def _seed(self, shape: RowShape) -> int:
        return xxhash.xxh3_64_intdigest(f"{self.profile_key}|{shape.key}".encode())

    def raw_row(self, row: Mapping[str, Any], shape: RowShape = CANONICAL) -> Count:
        return self.raw_rows((row,), shape)

    def raw_rows(self, rows: Iterable[Mapping[str, Any]], shape: RowShape = CANONICAL) -> Count:
        cache = self.cache
        seed = self._seed(shape)
        acct: Accountant | None = None
        tokens = 0
        exact = True
        # The hot path of re-budgeting: a digest and a lookup per cached row.
        for index, row in enumerate(rows):
            if type(row) is not dict and not isinstance(row, Mapping):
                raise InvalidRow(
                    f"row {index}: a row must be an object, not {type(row).__name__}", index=index
                )
            key = _row_key(row, seed) if cache is not None else None
            if key is not None:
                found = cache.get(key)  # type: ignore[union-attr]
                if found is not None:
                    tokens += found.tokens
                    exact = exact and found.exact
                    continue
            if acct is None:
                acct = self.accountant()
            try:
                counted = shape.measure(row, acct)
            except InvalidRow as exc:
                if exc.index is None:
                    raise InvalidRow(f"row {index}: {exc}", index=index) from exc
                raise
            if key is not None:
                cache.put(key, counted)  # type: ignore[union-attr]
            tokens += counted.tokens
            exact = exact and counted.exact
        return Count(tokens, exact)

    def raw_tools(self, tools: Any, advertised: Collection[str] | None = None) -> Count:
        table = _normalize_tools(tools)
        names = list(table) if advertised is None else list(dict.fromkeys(advertised))
        missing = [name for name in names if name not in table]
        if missing:
            raise InvalidTools(f"advertised tools without a schema: {', '.join(sorted(missing))}")
        if not names:
            return ZERO
        acct = self.accountant()
        total = Count(TOOLS_FRAMING, False)
        for name in names:
            total += Count(TOOL_FRAMING, False) + acct.json(table[name])
        return total

    # model counts ----------------------------------------------------------

    def text(self, text: str) -> TokenCount:
        """A plain string, ``encode_ordinary`` semantics."""
        return self.scaled(self.raw_text(text))

    def json(self, obj: Any) -> TokenCount:
        return self.scaled(json_cost(obj, self.text_fn))

    def rows(self, rows: Iterable[Mapping[str, Any]], shape: RowShape = CANONICAL) -> TokenCount:
        """Rows as the provider receives them (see the module docstring)."""
        return self.scaled(self.raw_rows(rows, shape))

    def tools(self, tools: Any, advertised: Collection[str] | None = None) -> TokenCount:
        """Tool schemas as advertised: all of ``tools`` (a name -> schema map or a
        list of schemas), or with tool search only the ``advertised`` names."""
        return self.scaled(self.raw_tools(tools, advertised))


def count_text(
    text: str,
    model: str | ModelSpec = "gpt-4o",
    *,
    mode: Mode = "encoding",
    registry: ModelRegistry | None = None,
) -> TokenCount:
    """Tokens of a plain string for ``model``."""
    return TokenCounter(model, mode=mode, registry=registry, cache=None).text(text)


def count_rows(
    rows: Sequence[Mapping[str, Any]] | Iterable[Mapping[str, Any]],
    model: str | ModelSpec = "gpt-4o",
    *,
    mode: Mode = "encoding",
    registry: ModelRegistry | None = None,
    cache: RowTokenCache | None = DEFAULT_CACHE,
    shape: RowShape = CANONICAL,
) -> TokenCount:
    """Tokens of canonical rows for ``model`` (cached per row)."""
    return TokenCounter(model, mode=mode, registry=registry, cache=cache).rows(rows, shape)
