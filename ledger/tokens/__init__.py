"""Token accounting, offline and with each model's own tokenizer.

- ``counting``: text and row counts, the token counter of a model (its public
  names are this package's: ``from ledger.tokens import TokenCounter``);
- ``encodings``: the BPE files, verified and cached, never downloaded;
- ``models``: the model registry (limits, families, encodings);
- ``units`` (framing constants, counts), ``costs`` (JSON values and media),
  ``rows`` (the per-row accountant and cache) and ``shapes`` (rows as each
  provider API receives them): the parts ``counting`` puts together.

Budget verdicts and the rollover built on these counts are ``ledger.rollover``.
"""

from ledger.tokens.counting import (
    CHUNK_CHARS,
    FORCE_CUT_SLACK,
    JSON_ESCAPE_TOKENS_PER_BYTE,
    JSON_PUNCT_TOKENS_PER_BYTE,
    MESSAGE_FRAMING,
    PART_FRAMING,
    REQUEST_FRAMING,
    TOOL_FRAMING,
    TOOLS_FRAMING,
    Count,
    InvalidTools,
    Mode,
    RowShape,
    RowTokenCache,
    TextCounter,
    TokenCount,
    TokenCounter,
    approx_tokens,
    count_rows,
    count_text,
    image_tokens,
    text_counter,
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
