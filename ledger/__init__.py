"""transcript-ledger: an event-sourced transcript store for AI agents.

The public face: the store, a history, a row, the runtime object and every
error a caller may catch (each ``LedgerError`` subclass, wherever it is
raised). Names whose modules cost an import (the store and its engines, rows, the
rollover and its token budget, the engines' own errors, the integrations) load
on first use.
"""

from importlib import import_module
from typing import TYPE_CHECKING

from ledger.core.errors import (
    BadRequest,
    BudgetExceeded,
    CommitFailed,
    CommitUncertain,
    Conflict,
    CursorExpired,
    DeletePending,
    EpochChanged,
    FormatError,
    HistoryDamaged,
    InvalidCursor,
    InvalidRoot,
    InvalidRow,
    InvalidWorkspace,
    LedgerError,
    LockTimeout,
    NotFound,
    ReceiptError,
    RecoveryError,
    RetrievalDisabled,
    RewriteRefused,
    RowTooLarge,
    TokenizerError,
    Unavailable,
    UnknownModel,
    UnsafePath,
    Unsupported,
    WindowChanged,
    WorkspaceNotFound,
    WorkspaceOutsideRoot,
)

if TYPE_CHECKING:  # loaded on first use (below); for type checkers, as if imported here
    from ledger.admission import (
        AdmissionRefused,
        HookContractError,
        NotSerializable,
        SnapshotRevoked,
    )
    from ledger.core.batches import AppendResult
    from ledger.core.forks import Branch, ForkRefused, RewindResult
    from ledger.core.rows import Row
    from ledger.integrations import MissingExtra
    from ledger.integrations.langgraph_log import CheckpointConflict
    from ledger.integrations.openai_agents_branches import BranchError
    from ledger.notes import NotesError
    from ledger.policy import PolicyError
    from ledger.rollover.conversation import Conversation, SendConflict, SendRefused
    from ledger.rollover.guards import RequestTooLarge
    from ledger.rollover.rules import (
        BudgetConfigError,
        CleanupFailed,
        DeliveryFailed,
        PostCommitError,
        PreparedStateError,
        RolloverCancelled,
        RolloverError,
        StepBudgetExceeded,
    )
    from ledger.storage.files.retention import QuarantineError
    from ledger.storage.postgres.citus import NotDistributed
    from ledger.tokens.models import ModelConfigError
    from ledger.tokens.units import InvalidTools
    from ledger.transcript.history import History, OpenToolCalls
    from ledger.transcript.store import Store

# This package's own names (documented on its page) that load on first use: the
# store and its engines, so that ``import ledger.cli`` (every tledger start) loads
# only what the command it runs uses.
_DEFERRED = {
    "AppendResult": "ledger.core.batches",
    "Branch": "ledger.core.forks",
    "ForkRefused": "ledger.core.forks",
    "RewindResult": "ledger.core.forks",
    "Row": "ledger.core.rows",
    "History": "ledger.transcript.history",
    "OpenToolCalls": "ledger.transcript.history",
    "Store": "ledger.transcript.store",
}

# name -> the module that defines (and documents) it, imported when the name is
# first used.
_LAZY = {
    "Conversation": "ledger.rollover.conversation",
    "SendRefused": "ledger.rollover.conversation",
    "SendConflict": "ledger.rollover.conversation",
    "RolloverError": "ledger.rollover.rules",
    "BudgetConfigError": "ledger.rollover.rules",
    "RolloverCancelled": "ledger.rollover.rules",
    "CleanupFailed": "ledger.rollover.rules",
    "PostCommitError": "ledger.rollover.rules",
    "DeliveryFailed": "ledger.rollover.rules",
    "PreparedStateError": "ledger.rollover.rules",
    "StepBudgetExceeded": "ledger.rollover.rules",
    "RequestTooLarge": "ledger.rollover.guards",
    "AdmissionRefused": "ledger.admission",
    "SnapshotRevoked": "ledger.admission",
    "NotSerializable": "ledger.admission",
    "HookContractError": "ledger.admission",
    "PolicyError": "ledger.policy",
    "NotesError": "ledger.notes",
    "InvalidTools": "ledger.tokens.units",
    "ModelConfigError": "ledger.tokens.models",
    "QuarantineError": "ledger.storage.files.retention",
    "NotDistributed": "ledger.storage.postgres.citus",
    "MissingExtra": "ledger.integrations",
    "CheckpointConflict": "ledger.integrations.langgraph_log",
    "BranchError": "ledger.integrations.openai_agents_branches",
}

__all__ = [
    "AdmissionRefused",
    "AppendResult",
    "BadRequest",
    "Branch",
    "BranchError",
    "BudgetConfigError",
    "BudgetExceeded",
    "CheckpointConflict",
    "CleanupFailed",
    "CommitFailed",
    "CommitUncertain",
    "Conflict",
    "Conversation",
    "CursorExpired",
    "DeletePending",
    "DeliveryFailed",
    "EpochChanged",
    "ForkRefused",
    "FormatError",
    "History",
    "HistoryDamaged",
    "HookContractError",
    "InvalidCursor",
    "InvalidRoot",
    "InvalidRow",
    "InvalidTools",
    "InvalidWorkspace",
    "LedgerError",
    "LockTimeout",
    "MissingExtra",
    "ModelConfigError",
    "NotDistributed",
    "NotFound",
    "NotSerializable",
    "NotesError",
    "OpenToolCalls",
    "PolicyError",
    "PostCommitError",
    "PreparedStateError",
    "QuarantineError",
    "ReceiptError",
    "RecoveryError",
    "RequestTooLarge",
    "RetrievalDisabled",
    "RewindResult",
    "RewriteRefused",
    "RolloverCancelled",
    "RolloverError",
    "Row",
    "RowTooLarge",
    "SendConflict",
    "SendRefused",
    "SnapshotRevoked",
    "StepBudgetExceeded",
    "Store",
    "TokenizerError",
    "Unavailable",
    "UnknownModel",
    "UnsafePath",
    "Unsupported",
    "WindowChanged",
    "WorkspaceNotFound",
    "WorkspaceOutsideRoot",
]
__version__ = "0.2.0"


def __getattr__(name: str) -> object:
    module = _LAZY.get(name) or _DEFERRED.get(name)
    if module is None:
        raise AttributeError(f"module 'ledger' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # the next lookup is a plain one
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, *_DEFERRED})
