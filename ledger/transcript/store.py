"""The store: the workspaces of one root, each a ``History`` over an engine.

The root names the engine. A path is the file engine (``ledger.storage.files``),
the embedded default: one directory per workspace. A ``postgresql://`` or
``postgres://`` URL is the PostgreSQL engine (``ledger.storage.postgres``):
one database holds every workspace.
"""

from __future__ import annotations

import math
import os

from ledger.core import format as fmt
from ledger.core.errors import LedgerError
from ledger.core.ids import MAX_WORKSPACE_LEN, validate_workspace
from ledger.storage.engine import Engine
from ledger.storage.files.engine import FileEngine
from ledger.storage.files.segments import DURABILITY_LEVELS
from ledger.storage.postgres.connect import is_postgres_root, redact
from ledger.transcript.history import History

__all__ = ["MAX_WORKSPACE_LEN", "TOMBSTONE_SUFFIX", "Store", "validate_workspace"]

TOMBSTONE_SUFFIX = fmt.WORKSPACE_TOMBSTONE_SUFFIX


class Store:
    """A transcript store rooted at ``root`` (DESIGN.md 12).

    ``segment_bytes``: the active segment is rewritten by rename while below
    this size; then a batch starts a new segment. ``durability``: ``full``
    (default), ``normal`` or ``off``, as in the README. Nothing is created on
    disk until the first write.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        segment_bytes: int = 64 << 10,
        lock_timeout: float = 10.0,
        retrieval: bool = True,
        durability: str = "full",
        max_row_bytes: int = 64 << 20,
    ) -> None:
        if durability not in DURABILITY_LEVELS:
            raise LedgerError(
                f"durability must be one of {DURABILITY_LEVELS}, got {durability!r}"
            )
        if segment_bytes < 1:
            raise LedgerError("segment_bytes must be positive")
        if max_row_bytes < 64:
            raise LedgerError("max_row_bytes must be at least 64")
        if isinstance(lock_timeout, bool) or not isinstance(lock_timeout, (int, float)) or \
                not 0 <= lock_timeout < math.inf:
            raise LedgerError(f"lock_timeout must be a finite number of seconds >= 0, "
                              f"got {lock_timeout!r}")
        self.root = os.fspath(root)
        self.segment_bytes = segment_bytes
        self.lock_timeout = lock_timeout
        self.retrieval = retrieval
        self.durability = durability
        self.max_row_bytes = max_row_bytes
        self.engine: Engine
        if is_postgres_root(self.root):
            from ledger.storage.postgres.engine import PostgresEngine

            self.engine = PostgresEngine(self)
        else:
            self.engine = FileEngine(
                self.root, segment_bytes=segment_bytes, lock_timeout=lock_timeout,
                retrieval=retrieval, durability=durability, max_row_bytes=max_row_bytes,
            )

    def __repr__(self) -> str:
        return f"Store({redact(self.root)!r})"

    def history(self, workspace: str) -> History:
        """The history of ``workspace`` (InvalidWorkspace for a bad id); nothing
        is created until the first write."""
        ws = validate_workspace(workspace)
        return History(self, ws, self.engine.open(ws))

    def workspaces(self) -> list[str]:
        """Ids of the histories under the root, sorted."""
        return self.engine.workspaces()

    def delete(self, workspace: str) -> bool:
        """Delete a workspace's history (a tombstone first, so a concurrent
        writer fails instead of recreating it). False when there was none."""
        return self.engine.delete(workspace)

    def format_version(self) -> int:
        return fmt.FORMAT_VERSION
