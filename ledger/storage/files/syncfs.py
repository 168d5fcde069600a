"""Flush one filesystem: ``syncfs(2)`` on Linux, ``os.sync()`` elsewhere.

A fork (``fork.py``) hard-links every sealed segment of its source, whose
bytes the source may have written at durability "off", and must make them
durable before the fork is published. Per file, ``fsync`` commits the
journal for the link count and ctime each link changed (about 3 ms each
here) and even ``fdatasync`` of clean bytes flushes the device cache (about
0.3 ms each): seconds for thousands of segments. ``os.sync()`` is one call
but waits for every filesystem of the machine. ``syncfs`` waits for the one
filesystem that holds the workspace: measured on this machine, 1.5 to 26 ms
for 2,000 freshly linked files where ``fdatasync`` of each took 0.6 to 2.3 s
(bench/RESULTS.md, "Issue 33, third round (filefork)").

Python's ``os`` has no ``syncfs``; it is called through ``ctypes`` from the
C library the interpreter already loaded. Where the symbol is missing (not
Linux, or a libc without it) ``os.sync()`` does the same and more. A leaf of
the file engine. The crash-state explorer (tests/helpers/crashfs.py) records
a call of ``sync_filesystem`` as a ``sync``: its trees live on one
filesystem, where the two are the same.
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Callable

__all__ = ["sync_filesystem"]


def _load() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.syncfs
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_SYNCFS = _load()


def sync_filesystem(path: str) -> None:
    """Make everything written to the filesystem holding directory ``path``
    durable (its file data, metadata and directory entries). Raises OSError
    when ``path`` cannot be opened or the flush reports an I/O error."""
    if _SYNCFS is None:
        os.sync()
        return
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if _SYNCFS(fd) != 0:
            err = ctypes.get_errno() or errno.EIO
            raise OSError(err, f"syncfs of {path!r} failed: {os.strerror(err)}")
    finally:
        os.close(fd)
