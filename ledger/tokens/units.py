"""The units of token accounting: the framing constants of each API, counts
(exact or bounded), and the tools error.
"""

from __future__ import annotations

import msgspec

from ledger.core.errors import LedgerError

__all__ = [
    "APPROX_BYTES_PER_TOKEN",
    "CHUNK_CHARS",
    "FORCE_CUT_SLACK",
    "JSON_ESCAPE_TOKENS_PER_BYTE",
    "JSON_PUNCT_TOKENS_PER_BYTE",
    "MEDIA_OTHER_TOKENS",
    "MESSAGE_FRAMING",
    "PART_FRAMING",
    "PART_FRAMING_OTHER",
    "PDF_DEFAULT_PAGES",
    "PDF_PAGE_TOKENS",
    "REQUEST_FRAMING",
    "TOOLS_FRAMING",
    "TOOL_FRAMING",
    "ZERO",
    "Count",
    "InvalidTools",
    "TokenCount",
]

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
``json.dumps`` form (aggregate +17%); tests/tokens/test_rows.py re-checks a
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


def _len_utf8(text: str) -> int:
    if text.isascii():
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))
