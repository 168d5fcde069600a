"""A new workspace directory built whole in a temporary directory beside its
place and published by one ``rename`` (a fork, ``fork.py``; a load,
``load.py``): a failure at any point leaves no partial workspace, only the
temporary directory, which is removed. A leaf of the file engine.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from ledger.core.errors import CommitFailed
from ledger.storage.files import segments as segs


@contextmanager
def staged(parent: str, prefix: str, final: str, sync: bool, failed: str) -> Iterator[str]:
    """A temporary directory under ``parent`` (named ``prefix``...) to build
    in; published as ``final`` when the block ends (the rename fails when
    ``final`` appeared meanwhile), with ``sync`` both directories fsynced.
    On any failure it is removed; an OSError is raised as CommitFailed
    ("``failed``, nothing was written: ...")."""
    tmp = tempfile.mkdtemp(prefix=prefix, dir=parent)
    try:
        yield tmp
        if sync:
            segs.fsync_dir(tmp)
        os.rename(tmp, final)
        if sync:
            segs.fsync_dir(parent)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError):
            raise CommitFailed(f"{failed}, nothing was written: {exc}") from exc
        raise


def write_new(path: str, chunks: list[bytes], sync: bool, mode: int) -> None:
    """Create ``path`` (it must not exist) holding ``chunks`` whole, fsynced
    with ``sync``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        segs._write_all(fd, chunks)  # whole, across short writes
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
