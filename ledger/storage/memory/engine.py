"""The roots of the in-memory engine: the workspaces of one root under one
lock, the named roots shared in this process, and ``MemoryEngine``
(``ledger.storage.engine.Engine``)."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from ledger.core.errors import InvalidRoot, LockTimeout
from ledger.core.ids import validate_workspace
from ledger.storage.engine import StoreOptions

if TYPE_CHECKING:
    from ledger.storage.memory.workspace import MemWorkspace, Space

SCHEME = "memory://"
# A quarantine entry: (ms since the epoch, seq or None, why, the bytes).
Quarantined = tuple[int, int | None, str, bytes]
_NAME = re.compile(r"[A-Za-z0-9._-]{1,100}")


def is_memory_root(root: str) -> bool:
    return root.startswith(SCHEME)


def root_name(root: str) -> str | None:
    """The name of a ``memory://NAME`` root (None for ``memory://``);
    InvalidRoot for anything else after the scheme."""
    name = root[len(SCHEME):]
    if not name:
        return None
    if not _NAME.fullmatch(name):
        raise InvalidRoot(
            f"malformed memory root {root!r}: memory:// alone, or memory://NAME with NAME of "
            "1 to 100 letters, digits, '.', '_' or '-'"
        )
    return name


class MemoryRoot:
    """The workspaces of one root and the lock every operation on them takes."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.lock = threading.RLock()
        self.spaces: dict[str, Space] = {}
        self.quarantine: dict[str, list[Quarantined]] = {}

    @contextmanager
    def locked(self, timeout: float, workspace: str) -> Iterator[None]:
        got = self.lock.acquire(timeout=timeout) if timeout > 0 else self.lock.acquire(False)
        if not got:
            raise LockTimeout(
                f"workspace {workspace!r}: lock not acquired within {timeout:g} s ({self.label}); "
                "another writer holds it -- retry, or raise Store(lock_timeout=...)"
            )
        try:
            yield
        finally:
            self.lock.release()


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
        from ledger.storage.memory.workspace import MemWorkspace

        return MemWorkspace(self.root, self.options, validate_workspace(workspace))

    def workspaces(self) -> list[str]:
        with self.root.locked(self.options.lock_timeout, "*"):
            return sorted(self.root.spaces)

    def delete(self, workspace: str) -> bool:
        """Delete a workspace at once (under the root's lock, so a writer
        either committed before, and its rows go too, or starts a new history)."""
        with self.root.locked(self.options.lock_timeout, workspace):
            self.root.quarantine.pop(workspace, None)
            return self.root.spaces.pop(workspace, None) is not None
