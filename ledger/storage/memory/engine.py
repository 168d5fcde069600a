"""The roots of the in-memory engine: the workspaces of one root under one
lock, the named roots shared in this process, and ``MemoryEngine``
(``ledger.storage.engine.Engine``)."""

from __future__ import annotations

import threading

from ledger.core.ids import validate_workspace
from ledger.storage.engine import StoreOptions
from ledger.storage.memory.roots import SCHEME, root_name
from ledger.storage.memory.workspace import MemoryRoot, MemWorkspace

_NAMED: dict[str, MemoryRoot] = {}
_NAMED_LOCK = threading.Lock()


def named(name: str) -> MemoryRoot:
    """The root ``memory://NAME`` of this process (made on first use)."""
    with _NAMED_LOCK:
        root = _NAMED.get(name)
        if root is None:
            root = _NAMED[name] = MemoryRoot(f"{SCHEME}{name}")
        return root


def discard(name: str) -> bool:
    """Drop the named root ``memory://NAME`` and every row in it (a ``Store``
    still holding it keeps its rows until it goes). False when there was none."""
    with _NAMED_LOCK:
        return _NAMED.pop(name, None) is not None


class MemoryEngine:
    """The workspaces of one memory root (``options.root``)."""

    def __init__(self, options: StoreOptions) -> None:
        self.options = options
        name = root_name(options.root)
        self.root = named(name) if name is not None else MemoryRoot(SCHEME)

    def __repr__(self) -> str:
        return f"MemoryEngine({self.root.label!r})"

    def open(self, workspace: str) -> MemWorkspace:
        return MemWorkspace(self.root, self.options, validate_workspace(workspace))

    def workspaces(self) -> list[str]:
        with self.root.locked(self.options.lock_timeout, "*"):
            return sorted(self.root.spaces)

    def delete(self, workspace: str) -> bool:
        """Delete a workspace at once (under the root's lock, so a writer
        either committed before, and its rows go too, or starts a new history)."""
        with self.root.locked(self.options.lock_timeout, workspace):
            return self.root.spaces.pop(workspace, None) is not None
