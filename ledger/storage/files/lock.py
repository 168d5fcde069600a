"""The per-workspace lock: ``flock`` on ``<ws>/LOCK`` through portalocker.

Taken through portalocker's ``FlockLocker`` on the descriptor this module
opened, with its flag combinations built once: the module-level
``portalocker.lock`` validates the flags and resolves the configured locker
on every call (``IntFlag`` operations, ~48 K instructions a lock and unlock,
more than the rest of the lock), and its locker follows a process-wide
``portalocker.LOCKER`` that another library may set to ``lockf``, whose
locks belong to the process, not the open file description. A writer's
append takes and gives back the lock through :func:`acquire` /
:func:`release`, without a generator.

Writers take it exclusive, readers shared. Every acquisition opens its own file
description, so threads of one process exclude each other exactly as processes
do (flock locks belong to the open file description, not the process).
A reader on a read-only copy whose LOCK cannot be opened reads unlocked: no
writer can be at work on a copy nobody may write.

A writer that waited for the lock checks, once it has it, that its LOCK is
still the one at the path: ``Store.delete`` renames a workspace away under
the lock, and a writer that waited on the old LOCK must not go on while a
newer writer holds the LOCK of a recreated workspace. It opens the path
again and waits on that one.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat as stat_mod
import time
from collections.abc import Iterator

import portalocker
from portalocker.portalocker import FlockLocker

from ledger.core.errors import CommitFailed, LockTimeout, Unavailable, UnsafePath
from ledger.core.format import files as ffmt

_POLL_FIRST = 0.0005
_POLL_MAX = 0.01


@contextlib.contextmanager
def locked(workspace_dir: str, workspace: str, timeout: float, *, shared: bool) -> Iterator[None]:
    """Hold the workspace lock for the body; LockTimeout after ``timeout`` s."""
    fd = acquire(os.path.join(workspace_dir, ffmt.LOCK_NAME), workspace, timeout, shared=shared)
    try:
        yield
    finally:
        release(fd)


def acquire(path: str, workspace: str, timeout: float, *, shared: bool) -> int | None:
    """Take the lock file ``path`` (a workspace's LOCK); LockTimeout after
    ``timeout`` s. Returns the descriptor to :func:`release`, or None for a
    reader that reads unlocked (no LOCK to open on a read-only copy).
    ``locked`` is the same as a context manager; a writer's append calls
    these two itself (no generator on its path)."""
    # Never follow a symlink, never wait on a FIFO; an fstat below refuses
    # anything but a regular file.
    flags = os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    deadline = time.monotonic() + timeout
    while True:
        try:
            if shared:
                fd = os.open(path, os.O_RDONLY | flags)
            else:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | flags, 0o600)
        except (FileNotFoundError, PermissionError):
            if shared:
                return None
            raise
        except OSError as exc:  # read-only media, no descriptor left, ...
            if shared and exc.errno == errno.EROFS:
                return None  # nobody can write here: read unlocked
            raise CommitFailed(
                f"workspace {workspace!r}: cannot open its lock file {path}: "
                f"{exc.strerror or exc}; nothing was written"
            ) if not shared else Unavailable(
                f"workspace {workspace!r}: cannot open its lock file {path}: "
                f"{exc.strerror or exc}"
            ) from exc
        try:
            st = os.fstat(fd)
            mode = st.st_mode
            if not stat_mod.S_ISREG(mode):
                what = ("a FIFO" if stat_mod.S_ISFIFO(mode) else "a directory"
                        if stat_mod.S_ISDIR(mode) else "not a regular file")
                raise UnsafePath(
                    f"workspace {workspace!r}: its lock file {path} is {what}; move it away "
                    "(a writer then makes a new one); nothing was read or written"
                )
            _acquire(fd, path, workspace, shared, deadline, timeout)
        except BaseException:
            os.close(fd)
            raise
        if shared or _still_at(st, path):
            return fd
        _unlock(fd)  # the workspace was renamed away meanwhile
        os.close(fd)


def release(fd: int | None) -> None:
    """Give back a lock :func:`acquire` took (None: there was none)."""
    if fd is None:
        return
    try:
        _unlock(fd)
    finally:
        os.close(fd)


_SHARED_NOW = portalocker.LockFlags.SHARED | portalocker.LockFlags.NON_BLOCKING
_EXCLUSIVE_NOW = portalocker.LockFlags.EXCLUSIVE | portalocker.LockFlags.NON_BLOCKING
_FLOCK = FlockLocker()
_lock = _FLOCK.lock
_unlock = _FLOCK.unlock  # portalocker's LockException on failure (4.2 and later)


def _try_lock(fd: int, shared: bool) -> bool:
    """Take the lock without waiting: False when another holder has it.
    Other failures raise (portalocker's ``LockException``)."""
    try:
        _lock(fd, _SHARED_NOW if shared else _EXCLUSIVE_NOW)
    except portalocker.AlreadyLocked:
        return False
    return True


def _acquire(fd: int, path: str, workspace: str, shared: bool, deadline: float,
             timeout: float) -> None:
    delay = _POLL_FIRST
    while not _try_lock(fd, shared):
        now = time.monotonic()
        if now >= deadline:
            raise LockTimeout(
                f"workspace {workspace!r}: lock not acquired within {timeout:g} s "
                f"({'shared' if shared else 'exclusive'}, {path}); another writer "
                "holds it -- retry, or raise Store(lock_timeout=...)"
            ) from None
        time.sleep(min(delay, deadline - now))
        delay = min(delay * 2, _POLL_MAX)


def _still_at(st: os.stat_result, path: str) -> bool:
    """True when the open LOCK (``st``: its fstat, taken once it was opened;
    a descriptor's device and inode never change) is the file at ``path``."""
    try:
        here = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return (st.st_dev, st.st_ino) == (here.st_dev, here.st_ino)
