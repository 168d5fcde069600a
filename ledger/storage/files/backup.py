"""A consistent copy of one file-engine workspace, taken under its lock."""

from __future__ import annotations

import os
import secrets
import shutil
from typing import Any

from ledger.core.errors import LedgerError
from ledger.core.format import files as ffmt
from ledger.storage.engine import BackupResult
from ledger.storage.files import segments as segs
from ledger.storage.files.lock import locked
from ledger.storage.files.origin import ORIGIN_NAME
from ledger.storage.files.ports import unwrap
from ledger.storage.files.retention import quarantine_dir

_COPY_CHUNK = 1 << 20


def backup(history: Any, dest: str) -> BackupResult:
    """Copy a consistent snapshot of the history into the new directory ``dest``.

    Taken under the shared lock (writers wait; readers go on). Copies FORMAT,
    the segments and the quarantine; writes a fresh stable receipt for the
    copy's own files, so ``dest`` checks clean as it is and a copy of it put
    back under a store root (``cp -a DEST ROOT/WS``) is a working history (its
    first write re-baselines: the copied files have new stamps). Refuses while
    an interrupted rewrite waits for recovery.
    """
    history = unwrap(history)
    history.require()
    try:
        return _backup(history, os.path.abspath(dest))
    except OSError as exc:
        raise LedgerError(
            f"workspace {history.workspace!r}: backup to {os.path.abspath(dest)} failed: "
            f"{exc.strerror or exc}{f' ({exc.filename})' if exc.filename else ''}; nothing "
            "was left there (the history itself is unchanged)"
        ) from exc


def _backup(history: Any, dest: str) -> BackupResult:
    if os.path.lexists(dest):
        raise LedgerError(f"backup destination {dest} already exists; choose a new path")
    parent = os.path.dirname(dest)
    if not os.path.isdir(parent):
        raise LedgerError(f"backup destination's parent {parent} is not a directory")
    staging = os.path.join(parent, f".{os.path.basename(dest)}.tmp-{secrets.token_hex(6)}")
    copied = 0
    files = 0
    with locked(history.path, history.workspace, history.store.lock_timeout, shared=True):
        if os.path.lexists(os.path.join(history.path, ffmt.REWRITE_MARKER_NAME)):
            raise LedgerError(
                f"workspace {history.workspace!r}: an interrupted rewrite waits for recovery; "
                f"run `tledger repair {history.workspace}` first"
            )
        os.mkdir(staging, 0o700)
        try:
            # The receipt goes along for its high-water mark (next seq); its
            # stamps will not match the copies, so it is re-baselined below.
            numbers = segs.list_segments(history.path)
            segs.stamps(history.path, numbers)  # UnsafePath for a segment that is no file
            names = [ffmt.FORMAT_NAME, ffmt.RECEIPT_NAME, ORIGIN_NAME] + [
                ffmt.segment_name(n) for n in numbers]
            for name in names:
                src = os.path.join(history.path, name)
                if not os.path.lexists(src):
                    continue
                copied += _copy_file(src, os.path.join(staging, name))
                files += 1
            qsrc = quarantine_dir(history.path)
            if os.path.isdir(qsrc):
                qdst = os.path.join(staging, ffmt.QUARANTINE_DIR)
                os.mkdir(qdst, 0o700)
                for name in sorted(os.listdir(qsrc)):
                    src = os.path.join(qsrc, name)
                    if name.startswith(".") or os.path.islink(src) or not os.path.isfile(src):
                        continue
                    copied += _copy_file(src, os.path.join(qdst, name))
                    files += 1
                segs.fsync_dir(qdst)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    try:
        copy = type(history)(history.store, os.path.basename(dest), staging)
        with locked(staging, copy.workspace, history.store.lock_timeout, shared=False):
            epoch = copy.rebaseline_locked(copy.state(), force_new_epoch=True)
        segs.fsync_dir(staging)
        os.rename(staging, dest)
        segs.fsync_dir(parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return BackupResult(history.workspace, dest, files, copied, epoch)


def _copy_file(src: str, dst: str) -> int:
    n = 0
    fd_out = os.open(
        dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
    )
    try:
        fd_in = segs.open_regular(src)  # never a FIFO's wait, never a symlink's target
        try:
            for chunk in iter(lambda: os.read(fd_in, _COPY_CHUNK), b""):
                view = memoryview(chunk)
                while view:
                    w = os.write(fd_out, view)
                    view = view[w:]
                n += len(chunk)
        finally:
            os.close(fd_in)
        os.fsync(fd_out)
    finally:
        os.close(fd_out)
    return n
