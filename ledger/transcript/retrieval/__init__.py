"""``session_history``: bounded list / search / read over earlier windows.

- ``tool``: the tool, the page protocol and the three actions;
- ``args``: the tool's schema and argument checks (a call as a ``Call``);
- ``results``: result assembly within 16 KiB and the closed list of error codes;
- ``text``: what is shown and searched of a row, snippets, the search prefilter.

The per-call read bounds are ``ledger.core.bounds``; each engine's page reader
enforces them on the raw bytes it reads (``ledger.storage.files.reader`` for
the file engine), its errors ``ledger``'s (``BadRequest``, ``NotFound``,
``Unavailable``), the searched text of a row ``ledger.core.searchable``.
"""

from ledger.transcript.retrieval.args import (
    ACTIONS,
    DESCRIPTION,
    LIMIT_DEFAULT,
    LIMIT_MAX,
    LIST_LIMIT_MAX,
    PARAMETERS,
    QUERY_MAX,
    READ_DEFAULT,
    READ_MAX,
)
from ledger.transcript.retrieval.results import (
    CURSOR_RESERVE,
    ERROR_CODES,
    NOTICE,
    Result,
    error_result,
)
from ledger.transcript.retrieval.text import (
    SNIPPET,
    ascii_prefilter,
    fit_text,
)
from ledger.transcript.retrieval.tool import PREVIEW, SessionHistory

__all__ = [
    "ACTIONS",
    "CURSOR_RESERVE",
    "DESCRIPTION",
    "ERROR_CODES",
    "LIMIT_DEFAULT",
    "LIMIT_MAX",
    "LIST_LIMIT_MAX",
    "NOTICE",
    "PARAMETERS",
    "PREVIEW",
    "QUERY_MAX",
    "READ_DEFAULT",
    "READ_MAX",
    "SNIPPET",
    "Result",
    "SessionHistory",
    "ascii_prefilter",
    "error_result",
    "fit_text",
]
