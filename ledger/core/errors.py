"""The one exception tree of transcript-ledger.

Every error the library raises is a :class:`LedgerError`. Messages say what
happened, where (workspace, segment, byte offset, seq) and what to do next.
Only ``ledger.cli`` turns them into exit codes.
"""

from __future__ import annotations


class LedgerError(Exception):
    """Root of every error raised by transcript-ledger."""


class InvalidWorkspace(LedgerError):
    """A workspace id that cannot name a directory below the store root."""


class InvalidRoot(LedgerError):
    """A store root that cannot name a store: a malformed ``postgresql://`` URL."""


class WorkspaceNotFound(LedgerError):
    """A read of a workspace that has no history yet."""


class InvalidRow(LedgerError):
    """A caller row that breaks the canonical row rules; nothing was written."""

    def __init__(self, message: str, index: int | None = None) -> None:
        super().__init__(message)
        self.index = index


class RowTooLarge(InvalidRow):
    """A row whose encoded size is above ``Store(max_row_bytes=...)``."""


class LockTimeout(LedgerError):
    """The workspace lock was not acquired within the timeout."""


class CommitFailed(LedgerError):
    """The batch is certainly not committed and the history is unchanged."""

    def __init__(self, message: str, batch_id: str | None = None) -> None:
        super().__init__(message)
        self.batch_id = batch_id


class CommitUncertain(LedgerError):
    """The failure came at or after the rename: the batch may be visible.

    Retrying with the same ``batch_id`` is safe: a committed batch is found and
    its original result returned, so nothing is written twice.
    """

    def __init__(self, message: str, batch_id: str) -> None:
        super().__init__(message)
        self.batch_id = batch_id


class Conflict(LedgerError):
    """A conditional append whose ``expect_next_seq`` did not match."""


class WindowChanged(Conflict):
    """A conditional append whose ``expect_window`` did not match: a clear,
    rollover or compaction happened since the caller looked."""


class EpochChanged(Conflict):
    """A rewrite conditional on an epoch (``rewind(expect_epoch=...)``) whose
    epoch is no longer the workspace's: a rewrite came first; nothing changed."""


class CursorExpired(LedgerError):
    """A retrieval cursor that can no longer be trusted (``stale_cursor``)."""


class InvalidCursor(LedgerError):
    """A forged, malformed or foreign retrieval cursor (``invalid_cursor``)."""


class RetrievalDisabled(LedgerError):
    """``session_history`` was called on a store opened with ``retrieval=False``."""


class HistoryDamaged(LedgerError):
    """Bytes in the log fail verification; run ``tledger check`` / ``repair``."""


class FormatError(HistoryDamaged):
    """A file of the on-disk format that cannot be parsed."""


class UnsafePath(HistoryDamaged):
    """A path of a history that is not what it must be: the workspace directory
    is a symlink or not a directory, or a file (segment, FORMAT) is a symlink,
    a directory, a FIFO or a device. Nothing is followed, opened for long or
    changed; move the entry away (or restore it) and run ``tledger check``."""


class DeletePending(WorkspaceNotFound):
    """A workspace whose delete was interrupted or failed half-way: reads and
    writes are refused until ``tledger delete`` runs again and finishes it."""


class ReceiptError(LedgerError):
    """The receipt could not be published."""


class TokenizerError(LedgerError):
    """An encoding could not be loaded or a text could not be encoded."""


class UnknownModel(LedgerError):
    """A model id that the registry does not know."""


class BudgetExceeded(LedgerError):
    """A payload that cannot fit even a fresh context window."""


class RecoveryError(LedgerError):
    """A repair or import that could not be completed."""


class BadRequest(LedgerError):
    """A ``session_history`` call whose arguments break the schema (``bad_request``)."""


class NotFound(LedgerError):
    """A window or row that ``session_history`` may not return (``not_found``)."""


class Unavailable(LedgerError):
    """Damage or a concurrent untracked change stops a read (``history_unavailable``)."""


class Unsupported(LedgerError):
    """An operation the workspace's engine does not offer (a file-engine
    operation such as ``bulk_load`` on a ``memory://`` or PostgreSQL
    workspace); the message names the operation and the engine. Nothing was
    done."""


class RewriteRefused(LedgerError):
    """A rewrite that would break a rule (split a batch, erase a reset
    candidate, reject a reset); nothing was written."""


class WorkspaceOutsideRoot(LedgerError):
    """The workspace directory resolves outside the store root (a symlink):
    the MCP server refuses to serve it (``ledger.integrations.mcp_server``)."""
