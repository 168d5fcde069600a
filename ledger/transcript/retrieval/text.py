"""What ``session_history`` shows of a row and how it is cut to fit: the
searched text, snippets around a match, and a sound byte-level prefilter that
rules out lines a search cannot match without decoding them."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import msgspec

from ledger.core.format.rows import may_spell_by_escape

SNIPPET = 300
__all__ = ["ASCII_FOLDERS", "SNIPPET", "ascii_prefilter", "fit_text", "jlen", "snippet"]
_enc = msgspec.json.Encoder()


def jlen(obj: Any) -> int:
    return len(_enc.encode(obj))


def fit_text(text: str, budget_bytes: int, max_chars: int) -> str:
    """The longest prefix of ``text`` (code points, at most ``max_chars``)
    whose JSON encoding fits ``budget_bytes``."""
    piece = text[:max_chars]
    if jlen(piece) <= budget_bytes:
        return piece
    lo, hi = 0, len(piece)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if jlen(piece[:mid]) <= budget_bytes:
            lo = mid
        else:
            hi = mid - 1
    return piece[:lo]


def snippet(text: str, folded_query: str) -> tuple[str, bool] | None:
    """A ~300 code point window of ``text`` around the first case-folded match."""
    folded = text.casefold()
    at = folded.find(folded_query)
    if at < 0:
        return None
    if len(folded) != len(text):
        # Case folding changed lengths (e.g. "ß" -> "ss"): map back per char.
        pos = 0
        for i, ch in enumerate(text):
            if pos >= at:
                at = i
                break
            pos += len(ch.casefold())
        else:
            at = len(text)
    span = max(len(folded_query), 1)
    start = max(0, at - (SNIPPET - span) // 2)
    end = min(len(text), start + max(SNIPPET, span))
    start = max(0, min(start, end - SNIPPET))
    return text[start:end], start > 0 or end < len(text)


# Non-ASCII characters whose case folding yields ASCII letters (the test suite
# recomputes this list from unicodedata): where none occurs, an ASCII query can
# only match ASCII bytes of the stored line.
ASCII_FOLDERS = tuple(
    chr(c).encode("utf-8")
    for c in (0xDF, 0x130, 0x149, 0x17F, 0x1F0, 0x1E96, 0x1E97, 0x1E98, 0x1E99, 0x1E9A,
              0x1E9E, 0x212A, 0xFB00, 0xFB01, 0xFB02, 0xFB03, 0xFB04, 0xFB05, 0xFB06)
)
_ASCII = bytes(range(128))
_ASCII_FOLDERS_RE = re.compile(b"|".join(map(re.escape, ASCII_FOLDERS)))


def ascii_prefilter(query: str) -> Callable[[bytes], bool] | None:
    """A sound byte-level test for a search: False only when no line in the
    bytes can hold ``query`` in its searched text (and none is a boundary),
    so those lines need not be decoded. None when the query is not plain
    ASCII (JSON escapes or case folding could hide a match from the bytes).
    Text the searched form adds (``[media]``, the space between a tool
    call's name and input) is accounted for. Lines ruled out are counted as
    examined but not decoded, so an unreadable one among them is not listed
    under ``skipped``."""
    if not query.isascii() or any(c in query for c in '"\\/') or not query.isprintable():
        return None
    needle = query.lower().encode("ascii")

    spans_join = b" " in needle  # a tool call is searched as "name input"
    media_text = needle in b"[media]" or b"[" in needle or b"]" in needle

    def may_hold(data: bytes) -> bool:
        if needle in data.lower() or b'"reset"' in data:
            return True
        if spans_join and b'"tool_call"' in data:
            return True
        if media_text and b'"media"' in data:
            return True
        # Deleting the ASCII bytes keeps every multi-byte character whole and
        # in order, so the folding characters are found in the (short) rest.
        if not data.isascii() and _ASCII_FOLDERS_RE.search(data.translate(None, _ASCII)):
            return True
        return may_spell_by_escape(data)

    return may_hold
