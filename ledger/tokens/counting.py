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
each cut adds ``FORCE_CUT_SLACK`` tokens (fuzzing in ``tests/tokens/test_text.py``
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
estimates only: the hard guards in ``ledger.rollover.guards`` never use it.

**Cache.** Row costs are a projection, kept in a :class:`RowTokenCache` (an LRU
keyed by counting profile and the xxh3-128 digest of the row's kind, role and
parts), so re-counting a window after an append costs a digest per old row and
an encode per new row. tiktoken and ``regex`` are imported on first use.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import xxhash

from ledger.core.errors import InvalidRow, TokenizerError
from ledger.tokens.costs import (  # noqa: F401
    _NEEDS_ESCAPE,
    _PAGE,
    MediaHook,
    TextFn,
    _b64_prefix,
    _escaped_len,
    _int_or_none,
    _json_bytes,
    _media_part,
    _pdf_pages,
    _sniff_size,
    image_tokens,
    json_cost,
    media_info,
    media_tokens,
)
from ledger.tokens.encodings import encoding_source, get_encoding
from ledger.tokens.models import ModelRegistry, ModelSpec, resolve
from ledger.tokens.rows import (  # noqa: F401
    CANONICAL,
    DEFAULT_CACHE,
    VISIBLE_KINDS,
    Accountant,
    CanonicalShape,
    RenderedShape,
    RowShape,
    RowTokenCache,
    _row_encoder,
    _row_key,
)

if TYPE_CHECKING:
    from ledger.tokens.bodies import BodyCounter
from ledger.tokens.units import (  # noqa: F401
    APPROX_BYTES_PER_TOKEN,
    CHUNK_CHARS,
    FORCE_CUT_SLACK,
    JSON_ESCAPE_TOKENS_PER_BYTE,
    JSON_PUNCT_TOKENS_PER_BYTE,
    MEDIA_OTHER_TOKENS,
    MESSAGE_FRAMING,
    PART_FRAMING,
    PART_FRAMING_OTHER,
    PDF_DEFAULT_PAGES,
    PDF_PAGE_TOKENS,
    REQUEST_FRAMING,
    TOOL_FRAMING,
    TOOLS_FRAMING,
    ZERO,
    Count,
    InvalidTools,
    TokenCount,
    _len_utf8,
)

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

# --------------------------------------------------------------------------- text

# Positions that are pre-tokenizer piece boundaries whatever surrounds them, for
# the o200k and cl100k patterns: no alternative joins a non-space to
# a following horizontal space (the punctuation alternative may take trailing
# \r\n, so those are excluded) or a letter to a digit either way. Matched as a
# two-character window; the cut is between the two.
_SYNC = r"(?r)(?:\S[^\S\r\n]|\p{L}\p{N}|\p{N}\p{L})"
_SYNC_SAFE = frozenset({"o200k_base", "o200k_harmony", "cl100k_base"})


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
    :class:`~ledger.core.errors.TokenizerError` when it cannot; ``"approx"`` never loads
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

    def body_counter(self) -> BodyCounter:
        """Counts of whole OpenAI request bodies (``ledger.tokens.bodies``),
        sharing this counter's encoding, media profile and cache."""
        from ledger.tokens.bodies import BodyCounter

        return BodyCounter(self.text_fn, encoding=self.spec.encoding,
                           media_profile=self.media_profile, cache=self.cache,
                           profile_key=self.profile_key)

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
        # A request advertises the same schemas on every send: each schema's
        # cost is cached like a row's, under the tool-schema profile.
        cache = self.cache
        seed = xxhash.xxh3_64_intdigest(f"{self.profile_key}|tool-schema".encode())
        acct: Accountant | None = None
        total = Count(TOOLS_FRAMING, False)
        for name in names:
            key = _row_key({"parts": table[name]}, seed) if cache is not None else None
            found = cache.get(key) if key is not None else None  # type: ignore[union-attr]
            if found is None:
                if acct is None:
                    acct = self.accountant()
                found = acct.json(table[name])
                if key is not None:
                    cache.put(key, found)  # type: ignore[union-attr]
            total += Count(TOOL_FRAMING, False) + found
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
