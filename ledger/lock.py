"""The per-workspace lock: ``flock`` on ``<ws>/LOCK`` through portalocker.

Writers take it exclusive, readers shared. Every acquisition opens its own file
description, so threads of one process exclude each other exactly as processes
do (flock locks belong to the open file description, not the process).
A reader on a read-only copy whose LOCK cannot be opened reads unlocked: no
writer can be at work on a copy nobody may write.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator

import portalocker

from ledger import format as fmt
from ledger.errors import LockTimeout

_POLL_FIRST = 0.0005
_POLL_MAX = 0.01


@contextlib.contextmanager
def locked(workspace_dir: str, workspace: str, timeout: float, *, shared: bool) -> Iterator[None]:
    """Hold the workspace lock for the body; LockTimeout after ``timeout`` s."""
    path = os.path.join(workspace_dir, fmt.LOCK_NAME)
    flags = os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        if shared:
            fd = os.open(path, os.O_RDONLY | flags)
        else:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | flags, 0o600)
    except FileNotFoundError:
        if shared:
            yield
            return
        raise
    except PermissionError:
        if shared:
            yield
            return
        raise
    mode = portalocker.LockFlags.SHARED if shared else portalocker.LockFlags.EXCLUSIVE
    try:
        deadline = time.monotonic() + timeout
        delay = _POLL_FIRST
        while True:
            try:
                portalocker.lock(fd, mode | portalocker.LockFlags.NON_BLOCKING)
                break
            except portalocker.AlreadyLocked:
                now = time.monotonic()
                if now >= deadline:
                    raise LockTimeout(
                        f"workspace {workspace!r}: lock not acquired within {timeout:g} s "
                        f"({'shared' if shared else 'exclusive'}, {path}); another writer "
                        "holds it -- retry, or raise Store(lock_timeout=...)"
                    ) from None
                time.sleep(min(delay, deadline - now))
                delay = min(delay * 2, _POLL_MAX)
        try:
            yield
        finally:
            portalocker.unlock(fd)
    finally:
        os.close(fd)
