"""``tledger repair``: make a damaged workspace consistent without losing a
byte, on any engine.

The engine repairs its own storage (``WorkspaceEngine.repair``: the file
engine's ``ledger/storage/files/repair.py``, PostgreSQL's and memory's
``verify.py``) by the policy (``ledger.core.checks.POLICIES``: salvage, tail,
prefix, strict): what fails verification goes to the workspace's quarantine, and the report
(``ledger.core.checks.RepairReport``) ends with a check of the result.
"""

from __future__ import annotations

from ledger.core.checks import Progress, RepairReport
from ledger.storage.engine import WorkspaceEngine
from ledger.transcript.history import History
from recovery.check import engine_of

__all__ = ["repair"]

def repair(history: History | WorkspaceEngine, *, policy: str = "salvage",
           dry_run: bool = False, progress: Progress | None = None) -> RepairReport:
    """Repair ``history`` by ``policy``; see ``RepairReport.exit_code``."""
    return engine_of(history).repair(policy, dry_run, progress)
