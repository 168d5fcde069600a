"""The store: a root directory holding one history per workspace."""

from __future__ import annotations

import os
import re

from ledger.core import format as fmt
from ledger.core.errors import InvalidWorkspace, LedgerError
from ledger.storage.files.segments import DURABILITY_LEVELS
from ledger.transcript.history import History

MAX_WORKSPACE_LEN = 128
_WORKSPACE_RE = re.compile(r"[A-Za-z0-9._@+=-]+")
TOMBSTONE_SUFFIX = ".deleting"


def validate_workspace(ws: object) -> str:
    """Return ``ws`` when it can name a directory below the root, else raise
    InvalidWorkspace: no separators, no ``.``/``..``, no NUL or control
    characters, no leading dot (hidden names are the store's), bounded length."""
    if not isinstance(ws, str):
        raise InvalidWorkspace(f"workspace id must be a string, got {type(ws).__name__}")
    if not ws or len(ws) > MAX_WORKSPACE_LEN:
        raise InvalidWorkspace(
            f"workspace id must be 1 to {MAX_WORKSPACE_LEN} characters, got {len(ws)}"
        )
    if ws in (".", "..") or ws.startswith(".") or not _WORKSPACE_RE.fullmatch(ws):
        raise InvalidWorkspace(
            f"invalid workspace id {ws!r}: use letters, digits and . _ @ + = -, "
            "not starting with a dot (no separators, NUL or control characters)"
        )
    return ws


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
        self.root = os.fspath(root)
        self.segment_bytes = segment_bytes
        self.lock_timeout = lock_timeout
        self.retrieval = retrieval
        self.durability = durability
        self.max_row_bytes = max_row_bytes

    def __repr__(self) -> str:
        return f"Store({self.root!r})"

    def history(self, workspace: str) -> History:
        ws = validate_workspace(workspace)
        return History(self, ws, os.path.join(self.root, ws))

    def workspaces(self) -> list[str]:
        """Ids of the histories under the root, sorted."""
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return []
        out = []
        for name in names:
            if name.startswith(".") or not _WORKSPACE_RE.fullmatch(name):
                continue
            path = os.path.join(self.root, name)
            if os.path.isdir(path) and not os.path.islink(path) and not self._tombstoned(name):
                out.append(name)
        return sorted(out)

    def delete(self, workspace: str) -> bool:
        """Delete a workspace's history (a tombstone first, so a concurrent
        writer fails instead of recreating it). False when there was none."""
        from ledger.storage.files import retention

        return retention.delete_workspace(self, workspace)

    def _ensure_root(self) -> None:
        os.makedirs(self.root, mode=0o700, exist_ok=True)

    def _tombstoned(self, workspace: str) -> bool:
        return os.path.lexists(os.path.join(self.root, f".{workspace}{TOMBSTONE_SUFFIX}"))

    def format_version(self) -> int:
        return fmt.FORMAT_VERSION
