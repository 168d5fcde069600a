"""A workspace written out as a file-engine directory: FORMAT and one segment
holding every row's bytes. The backup of engines that do not keep files
(PostgreSQL, memory): readable anywhere, ``tledger migrate`` takes it back.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from ledger.core.errors import LedgerError
from ledger.core.format import files as ffmt


def refuse_existing(dest: str) -> None:
    if os.path.lexists(dest):
        raise LedgerError(f"backup destination {dest!r} already exists")


def write_workspace_dir(dest: str, raws: Iterable[bytes]) -> int:
    """Create directory ``dest`` (new) holding FORMAT and segment 1 with each
    of ``raws`` (a row's stored bytes, no newline) as a line, every file and
    the directory fsynced. Returns the bytes written."""
    refuse_existing(dest)
    os.makedirs(dest)
    seg = os.path.join(dest, ffmt.segment_name(1))
    total = 0
    with open(seg, "wb") as out:
        for raw in raws:
            out.write(raw + b"\n")
            total += len(raw) + 1
        out.flush()
        os.fsync(out.fileno())
    with open(os.path.join(dest, ffmt.FORMAT_NAME), "wb") as f:
        f.write(ffmt.FORMAT_TEXT)
        f.flush()
        os.fsync(f.fileno())
    fd = os.open(dest, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return total + len(ffmt.FORMAT_TEXT)
