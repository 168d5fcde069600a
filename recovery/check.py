"""``tledger check``: read-only verification of a workspace, on any engine.

Each engine verifies its own storage (``WorkspaceEngine.verify``: the file
engine's ``ledger/storage/files/check.py``, PostgreSQL's and memory's
``verify.py``) and returns the report every engine shares
(``ledger.core.checks.CheckReport``: findings, each damage or a notice).
Nothing is written.
"""

from __future__ import annotations

from ledger.core.checks import CheckReport, Progress
from ledger.storage.engine import WorkspaceEngine
from ledger.transcript.history import History

__all__ = ["check", "engine_of"]

def engine_of(history: History | WorkspaceEngine) -> WorkspaceEngine:
    """The workspace engine behind ``history`` (an engine is itself)."""
    return history.engine if isinstance(history, History) else history


def check(history: History | WorkspaceEngine, *,
          progress: Progress | None = None) -> CheckReport:
    """Verify ``history`` without writing anything; ``progress`` gets (bytes
    done, bytes in all) where the engine can tell."""
    return engine_of(history).verify(progress)
