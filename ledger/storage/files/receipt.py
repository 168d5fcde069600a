"""Reading and publishing the append receipt (layout in ``ledger.core.format``).

Why receipts are written in place and never fsynced
---------------------------------------------------
A receipt only decides whether a *cursor* may be trusted; the log is the
truth. It is a fixed-size overwrite whose checksum makes a torn write read as
malformed, and a malformed receipt expires every cursor. Cursors live in the
memory of the process that issued them (their key dies with it), so a power
loss kills every cursor anyway. A killed writer's page-cache writes are
visible to every other process at once, so no fsync is needed for them to
see a pending receipt. After a power loss that dropped a receipt write, the
stamps of the active segment (identity, size, mtime, ctime) no longer match
it, and the next writer re-baselines under a new epoch. Skipping the fsync
keeps an append to one data fsync plus one directory fsync.

Reads are defensive: ``O_NOFOLLOW`` (a symlink is never followed),
``O_NONBLOCK`` (a FIFO never blocks), ``fstat`` must show a regular file of
exactly RECEIPT_SIZE bytes, and at most RECEIPT_SIZE + 1 bytes are read.
"""

from __future__ import annotations

import errno
import os
import stat

from ledger.core.format import files as ffmt

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def read_receipt(wsdir: str) -> ffmt.Receipt | None:
    """The receipt of ``wsdir``; None when missing, malformed or not a file."""
    path = os.path.join(wsdir, ffmt.RECEIPT_NAME)
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size != ffmt.RECEIPT_SIZE:
            return None
        data = os.pread(fd, ffmt.RECEIPT_SIZE + 1, 0)
    except OSError:
        return None
    finally:
        os.close(fd)
    return ffmt.unpack_receipt(data)


def receipt_is(path: str, data: bytes) -> bool:
    """Whether the receipt at ``path`` holds exactly ``data`` (the bytes a
    writer of this process published): no decoding, the same defensive open
    as ``read_receipt``; a longer file, a FIFO or a directory is not."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError:
        return False
    try:
        return os.pread(fd, ffmt.RECEIPT_SIZE + 1, 0) == data
    except OSError:
        return False
    finally:
        os.close(fd)


class WriterReceipt:
    """RECEIPT held open by a writer for one append (under the exclusive
    lock): read on arrival, then the pending and the stable copy written
    through the same descriptor -- one open instead of three.

    Only a regular file of the right size and mode is held; anything else
    (missing, a symlink, a FIFO, a wrong size) leaves the handle empty and
    every call falls back to ``read_receipt`` / ``write_receipt``, which
    deal with such files. If the path is replaced meanwhile, the writes go
    to the replaced file and readers see stamps that disagree: cursors
    expire, as after any untracked change.
    """

    def __init__(self, wsdir: str, path: str | None = None) -> None:
        """``path``: ``wsdir``'s RECEIPT, when the caller has it joined."""
        self.wsdir = wsdir
        self.fd = -1
        flags = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(path or os.path.join(wsdir, ffmt.RECEIPT_NAME), flags)
        except OSError:
            return
        try:
            st = os.fstat(fd)
            ok = (stat.S_ISREG(st.st_mode) and st.st_size == ffmt.RECEIPT_SIZE
                  and not st.st_mode & 0o077)
        except OSError:
            ok = False
        if ok:
            self.fd = fd
        else:
            os.close(fd)

    def read(self) -> ffmt.Receipt | None:
        if self.fd < 0:
            return read_receipt(self.wsdir)
        try:
            data = os.pread(self.fd, ffmt.RECEIPT_SIZE + 1, 0)
        except OSError:
            return None
        return ffmt.unpack_receipt(data)

    def write(self, receipt: ffmt.Receipt, state: int | None = None) -> bytes:
        """Write ``receipt`` (in ``state``); returns the bytes written."""
        if self.fd < 0:
            return write_receipt(self.wsdir, receipt, state)
        data = ffmt.pack_receipt(receipt, state)
        if os.pwrite(self.fd, data, 0) != len(data):
            raise OSError(f"short write of {os.path.join(self.wsdir, ffmt.RECEIPT_NAME)}")
        return data

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def receipt_status(wsdir: str) -> str:
    """'missing', 'malformed', 'pending' or 'stable' (for stat and check)."""
    path = os.path.join(wsdir, ffmt.RECEIPT_NAME)
    if not os.path.lexists(path):
        return "missing"
    r = read_receipt(wsdir)
    if r is None:
        return "malformed"
    return "stable" if r.stable else "pending"


def write_receipt(wsdir: str, receipt: ffmt.Receipt, state: int | None = None) -> bytes:
    """Overwrite the receipt in place (see the module doc for why no fsync);
    with ``state``, ``receipt`` in that state (a writer's pending copy).
    Returns the bytes written.

    Whatever sits at the path and is not a regular file (a symlink, a FIFO, a
    directory) is removed first, so nothing is followed or blocked on; a file
    of the wrong size is cut to size.
    """
    path = os.path.join(wsdir, ffmt.RECEIPT_NAME)
    data = ffmt.pack_receipt(receipt, state)
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        # Only something that is not a regular file is replaced (a symlink:
        # ELOOP; a FIFO without reader: ENXIO; a directory: EISDIR). Any
        # other error (EIO, ENOSPC, EMFILE) leaves the receipt as it is.
        if exc.errno not in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
            raise
        _remove_odd(path)
        fd = os.open(path, flags, 0o600)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            fd = -1
            _remove_odd(path)
            fd = os.open(path, flags, 0o600)
            st = os.fstat(fd)
        if st.st_mode & 0o077:
            os.fchmod(fd, 0o600)
        if os.pwrite(fd, data, 0) != len(data):
            raise OSError(f"short write of {path}")
        if st.st_size != ffmt.RECEIPT_SIZE:
            os.ftruncate(fd, ffmt.RECEIPT_SIZE)
    finally:
        if fd >= 0:
            os.close(fd)
    return data


def _remove_odd(path: str) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        os.rmdir(path)
    else:
        os.unlink(path)
