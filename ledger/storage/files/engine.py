"""The file engine: one directory per workspace under a root (DESIGN.md 4).

``FileEngine`` carries the store's options (the workspaces read them as
``ws.store``) and lists, opens and deletes workspaces.
"""

from __future__ import annotations

import functools
import os
from dataclasses import KW_ONLY, dataclass

from ledger.core.errors import DeletePending
from ledger.core.format import files as ffmt
from ledger.core.ids import WORKSPACE_RE, validate_workspace
from ledger.core.semantic import Embedder
from ledger.storage.files import retention
from ledger.storage.files.workspace import FileWorkspace


@dataclass(eq=False, repr=False)
class FileEngine:
    """Workspaces as directories below ``root``, with the store's options."""

    root: str
    _: KW_ONLY
    segment_bytes: int
    lock_timeout: float
    retrieval: bool
    durability: str
    max_row_bytes: int
    embedder: Embedder | None = None  # the semantic channel's (ledger.core.semantic)

    def __repr__(self) -> str:
        return f"FileEngine({self.root!r})"

    def open(self, workspace: str) -> FileWorkspace:
        """The workspace (nothing is created); UnsafePath when its path is a
        symlink or not a directory (``FileWorkspace.exists``)."""
        ws = validate_workspace(workspace)
        opened = FileWorkspace(self, ws, os.path.join(self.root, ws))
        try:
            opened.exists()
        except DeletePending:
            pass  # reads and writes say so; delete finishes it
        return opened

    def workspaces(self) -> list[str]:
        """Ids of the histories under the root, sorted."""
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return []
        out = []
        for name in names:
            if name.startswith(".") or not WORKSPACE_RE.fullmatch(name):
                continue
            path = os.path.join(self.root, name)
            # A symlink is listed (every use of it is refused: UnsafePath) rather
            # than hidden; a workspace being deleted is not.
            if (os.path.islink(path) or os.path.isdir(path)) and not self.tombstoned(name):
                out.append(name)
        return sorted(out)

    def delete(self, workspace: str) -> bool:
        """Delete a workspace's history (a tombstone first, so a concurrent
        writer fails instead of recreating it). False when there was none."""
        return retention.delete_workspace(self, workspace)

    def ensure_root(self) -> None:
        os.makedirs(self.root, mode=0o700, exist_ok=True)

    def tombstoned(self, workspace: str) -> bool:
        path = _tombstone(self.root, workspace)
        if _ACCESS_NOFOLLOW:
            return os.access(path, os.F_OK, effective_ids=True, follow_symlinks=False)
        return os.path.lexists(path)


# ``lexists`` without the stat result it builds and drops (a tombstone is
# asked for twice on every append): faccessat(F_OK, AT_SYMLINK_NOFOLLOW |
# AT_EACCESS) answers the same question -- a tombstone that is a symlink,
# even a dangling one, counts; the path is searched with the effective ids,
# as lstat does.
_ACCESS_NOFOLLOW = (os.access in os.supports_follow_symlinks
                    and os.access in os.supports_effective_ids)


@functools.lru_cache(maxsize=1024)
def _tombstone(root: str, workspace: str) -> str:
    """The path of ``workspace``'s tombstone (asked twice on every append)."""
    return os.path.join(root, f".{workspace}{ffmt.WORKSPACE_TOMBSTONE_SUFFIX}")
