"""transcript-ledger: an event-sourced transcript store for AI agents."""

from ledger.core.errors import (
    CommitFailed,
    CommitUncertain,
    Conflict,
    CursorExpired,
    HistoryDamaged,
    InvalidCursor,
    InvalidRow,
    InvalidWorkspace,
    LedgerError,
    LockTimeout,
    WindowChanged,
    WorkspaceNotFound,
)
from ledger.core.rows import Row
from ledger.transcript.history import AppendResult, History
from ledger.transcript.store import Store

__all__ = [
    "AppendResult",
    "CommitFailed",
    "CommitUncertain",
    "Conflict",
    "CursorExpired",
    "History",
    "HistoryDamaged",
    "InvalidCursor",
    "InvalidRow",
    "InvalidWorkspace",
    "LedgerError",
    "LockTimeout",
    "Row",
    "Store",
    "WindowChanged",
    "WorkspaceNotFound",
]
__version__ = "0.2.0"


def __getattr__(name: str) -> object:
    # The runtime object loads the token budget (tokenizers) only when used.
    if name in ("Conversation", "SendRefused"):
        from ledger.rollover import conversation

        return getattr(conversation, name)
    raise AttributeError(f"module 'ledger' has no attribute {name!r}")
