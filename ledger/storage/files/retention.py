"""Retention: the quarantine, workspace deletion and backups.

Quarantine
==========
``<ws>/quarantine/`` keeps every byte that a rewrite or recovery took out of
the live log (purge excepted: it really deletes). Each entry is one file
``<entry>.bin`` holding the bytes exactly, and one line in ``MANIFEST.jsonl``::

    {"entry": "q1764662400123-3f2a9c0d1e2b", "source": "seg-00000003.jsonl",
     "offset": 4096, "length": 210, "reason": "checksum mismatch",
     "digest": "<xxh3-128 hex of the bytes>", "time": 1764662400123}

``source`` names where the bytes came from (a segment name, a legacy file's
path, a temp file's name), ``offset`` their byte offset there, ``time`` the
moment they were put aside (ms since the epoch). The ``.bin`` file is written
and fsynced *before* its manifest line, and both before the rewrite that
removes the bytes from the log: a crash leaves at worst an entry whose bytes
are also still in the log, never bytes in neither place. Quarantining the same
bytes from the same place twice returns the existing entry (so an interrupted
repair or import that runs again adds nothing). Manifest lines are plain JSON
(no checksum) so people and tools can read them; a torn last line is skipped.

Deletion
========
``delete_workspace`` writes a tombstone ``<root>/.<ws>.deleting`` first (so a
concurrent writer fails instead of recreating the directory: see
``History.ensure_dir``), takes the workspace lock to wait out in-flight
writers, renames the directory to a hidden trash name, removes the trash,
removes a directory a racing writer may have recreated empty, and only then
the tombstone. Every step is idempotent: after a crash, deleting again
finishes the job.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import xxhash

from ledger.core.errors import DeletePending, LedgerError, UnsafePath, WorkspaceNotFound
from ledger.core.format import files as ffmt
from ledger.core.format import rows as fmt
from ledger.core.ids import validate_workspace
from ledger.storage.files import segments as segs
from ledger.storage.files.lock import locked
from ledger.storage.files.ports import unwrap

if TYPE_CHECKING:
    from ledger.storage.engine import StoreOptions as Store
    from ledger.storage.files.ports import FileHistory as History

MANIFEST_NAME = "MANIFEST.jsonl"
ENTRY_SUFFIX = ".bin"
TRASH_INFIX = ".deleted-"
_COPY_CHUNK = 1 << 20


class QuarantineError(LedgerError):
    """Bytes could not be put aside; the rewrite that needed it did not run."""


def quarantine_dir(history_path: str) -> str:
    return os.path.join(history_path, ffmt.QUARANTINE_DIR)


def digest_hex(data: bytes) -> str:
    """The quarantine digest: xxh3-128 of the bytes, 32 lower-case hex digits."""
    return xxhash.xxh3_128_hexdigest(data)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class ManifestEntry:
    entry: str
    source: str
    offset: int
    length: int
    reason: str
    digest: str
    time: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "entry": self.entry,
            "source": self.source,
            "offset": self.offset,
            "length": self.length,
            "reason": self.reason,
            "digest": self.digest,
            "time": self.time,
        }


def read_manifest(history_path: str) -> list[ManifestEntry]:
    """Every readable manifest line, in order (a torn or foreign line is skipped)."""
    path = os.path.join(quarantine_dir(history_path), MANIFEST_NAME)
    out: list[ManifestEntry] = []
    try:
        lines = list(segs.iter_lines(path))
    except (FileNotFoundError, NotADirectoryError):
        return out
    for line in lines:
        if not line.complete:
            continue
        try:
            d = fmt.decode_json(line.data)
        except Exception:  # any undecodable line is skipped
            continue
        if not isinstance(d, dict):
            continue
        try:
            out.append(
                ManifestEntry(
                    entry=str(d["entry"]),
                    source=str(d["source"]),
                    offset=int(d["offset"]),
                    length=int(d["length"]),
                    reason=str(d["reason"]),
                    digest=str(d["digest"]),
                    time=int(d["time"]),
                )
            )
        except (KeyError, TypeError, ValueError):
            continue
    return out


class Quarantine:
    """The quarantine of one workspace. Not locked by itself: writers call it
    under the workspace lock (importers that write before a workspace exists
    are the exception; entries never collide because names are random)."""

    def __init__(self, history_path: str, *, durability: str = "full") -> None:
        self.history_path = history_path
        self.path = quarantine_dir(history_path)
        self.durability = durability
        self._known: dict[tuple[str, int, int, str], str] | None = None

    def _index(self) -> dict[tuple[str, int, int, str], str]:
        if self._known is None:
            self._known = {
                (e.source, e.offset, e.length, e.digest): e.entry
                for e in read_manifest(self.history_path)
                if os.path.exists(os.path.join(self.path, e.entry + ENTRY_SUFFIX))
            }
        return self._known

    def ensure_dir(self) -> None:
        try:
            os.mkdir(self.path, 0o700)
        except FileExistsError:
            st = os.lstat(self.path)
            if not stat.S_ISDIR(st.st_mode):
                raise QuarantineError(
                    f"{self.path} exists and is not a directory; move it away and retry"
                ) from None
            return
        if self.durability != "off":
            segs.fsync_dir(self.history_path)

    def _new_name(self, digest: str) -> str:
        return f"q{now_ms():013d}-{digest[:12]}-{secrets.token_hex(3)}"

    def _record(self, entry: ManifestEntry) -> None:
        line = fmt.encode_json(entry.to_dict()) + b"\n"
        path = os.path.join(self.path, MANIFEST_NAME)
        fd = os.open(
            path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        try:
            os.write(fd, line)
            if self.durability != "off":
                os.fsync(fd)
        finally:
            os.close(fd)
        self._index()[(entry.source, entry.offset, entry.length, entry.digest)] = entry.entry

    def put(self, data: bytes, *, source: str, offset: int, reason: str) -> str:
        """Put ``data`` aside; returns the entry name (an existing one when the
        same bytes from the same place are already there)."""
        digest = digest_hex(data)
        key = (source, offset, len(data), digest)
        known = self._index().get(key)
        if known is not None:
            return known
        try:
            self.ensure_dir()
            name = self._new_name(digest)
            segs.commit_file(
                self.path, name + ENTRY_SUFFIX, [data], durability=self.durability, new_file=True
            )
            self._record(ManifestEntry(name, source, offset, len(data), reason, digest, now_ms()))
        except (OSError, segs.CommitStepError) as exc:
            raise QuarantineError(
                f"could not write quarantine entry in {self.path} for {source} offset {offset}: "
                f"{exc}; nothing was removed from the log"
            ) from exc
        return name

    def put_file(
        self, src: str, *, source: str, offset: int = 0, reason: str, move: bool = False
    ) -> str:
        """Put a whole file aside: hard-linked (or renamed when ``move``; copied
        across file systems). The digest is computed by streaming it."""
        h = xxhash.xxh3_128()
        length = 0
        with open(src, "rb") as f:
            for chunk in iter(lambda: f.read(_COPY_CHUNK), b""):
                h.update(chunk)
                length += len(chunk)
        digest = h.hexdigest()
        key = (source, offset, length, digest)
        known = self._index().get(key)
        if known is not None:
            if move:
                os.unlink(src)
            return known
        try:
            self.ensure_dir()
            name = self._new_name(digest)
            dst = os.path.join(self.path, name + ENTRY_SUFFIX)
            try:
                if move:
                    os.rename(src, dst)
                else:
                    os.link(src, dst)
            except OSError:
                shutil.copyfile(src, dst)
                os.chmod(dst, 0o600)
                if move:
                    os.unlink(src)
            if self.durability != "off":
                fd = os.open(dst, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                segs.fsync_dir(self.path)
            self._record(ManifestEntry(name, source, offset, length, reason, digest, now_ms()))
        except OSError as exc:
            raise QuarantineError(
                f"could not quarantine {src} into {self.path}: {exc}; nothing was removed"
            ) from exc
        return name

    def entries(self) -> list[ManifestEntry]:
        return read_manifest(self.history_path)

    def read(self, entry: str) -> bytes:
        if os.sep in entry or entry.startswith("."):
            raise QuarantineError(f"invalid quarantine entry name {entry!r}")
        with open(os.path.join(self.path, entry + ENTRY_SUFFIX), "rb") as f:
            return f.read()

    def verify(self) -> list[dict[str, Any]]:
        """Entries whose bytes are missing or do not match the manifest's
        digest or length (``{"entry", "problem"}`` each); empty when all is well."""
        problems: list[dict[str, Any]] = []
        for e in self.entries():
            try:
                data = self.read(e.entry)
            except OSError as exc:
                problems.append({"entry": e.entry, "problem": f"unreadable: {exc.strerror}"})
                continue
            if len(data) != e.length or digest_hex(data) != e.digest:
                problems.append({"entry": e.entry, "problem": "bytes do not match the manifest"})
        return problems

    def clean(self, older_than_s: float, *, now: float | None = None) -> dict[str, int]:
        """Remove entries put aside more than ``older_than_s`` seconds ago (call
        under the exclusive workspace lock). The manifest is rewritten by rename
        first, then the files go: a crash leaves orphan files, never manifest
        lines without bytes. Returns ``{"removed": n, "bytes": b}``."""
        cutoff = int(((time.time() if now is None else now) - older_than_s) * 1000)
        entries = self.entries()
        keep = [e for e in entries if e.time >= cutoff]
        drop = [e for e in entries if e.time < cutoff]
        listed = {e.entry for e in entries}
        orphans = []
        if os.path.isdir(self.path):
            for name in os.listdir(self.path):
                if name.endswith(ENTRY_SUFFIX) and name[: -len(ENTRY_SUFFIX)] not in listed:
                    full = os.path.join(self.path, name)
                    if os.lstat(full).st_mtime < cutoff / 1000:
                        orphans.append(name[: -len(ENTRY_SUFFIX)])
        if not drop and not orphans:
            return {"removed": 0, "bytes": 0}
        if drop:
            body = b"".join(fmt.encode_json(e.to_dict()) + b"\n" for e in keep)
            segs.commit_file(
                self.path, MANIFEST_NAME, [body], durability=self.durability, new_file=False
            )
        freed = 0
        for name in [e.entry for e in drop] + orphans:
            full = os.path.join(self.path, name + ENTRY_SUFFIX)
            try:
                freed += os.lstat(full).st_size
                os.unlink(full)
            except FileNotFoundError:
                pass
        self._known = None
        return {"removed": len(drop) + len(orphans), "bytes": freed}

    def usage(self) -> dict[str, int]:
        """Entries and bytes held (the manifest included in bytes)."""
        total = 0
        count = 0
        if os.path.isdir(self.path):
            for name in os.listdir(self.path):
                try:
                    total += os.lstat(os.path.join(self.path, name)).st_size
                except FileNotFoundError:
                    continue
                if name.endswith(ENTRY_SUFFIX):
                    count += 1
        return {"entries": count, "bytes": total}


def quarantine_bytes(
    history_path: str,
    data: bytes,
    *,
    source: str,
    offset: int,
    reason: str,
    durability: str = "full",
) -> str:
    """Put ``data`` aside in ``<history_path>/quarantine``; returns the entry name."""
    return Quarantine(history_path, durability=durability).put(
        data, source=source, offset=offset, reason=reason
    )


def clean_quarantine(history: History, older_than_s: float) -> dict[str, int]:
    """Remove quarantine entries older than ``older_than_s`` seconds, under the
    exclusive workspace lock."""
    history = unwrap(history)
    history.require()
    with locked(history.path, history.workspace, history.store.lock_timeout, shared=False):
        return Quarantine(history.path, durability=history.store.durability).clean(older_than_s)


# --- deletion -----------------------------------------------------------------

# Test hook: called with the name of each step of delete_workspace.
FAULT_HOOK: Any = None


def _step(name: str) -> None:
    if FAULT_HOOK is not None:
        FAULT_HOOK(name)


def tombstone_path(store: Store, workspace: str) -> str:
    return os.path.join(store.root, f".{workspace}{ffmt.WORKSPACE_TOMBSTONE_SUFFIX}")


def _trash_dirs(store: Store, workspace: str) -> Iterator[str]:
    prefix = f".{workspace}{TRASH_INFIX}"
    try:
        names = os.listdir(store.root)
    except FileNotFoundError:
        return
    for name in names:
        if name.startswith(prefix):
            yield os.path.join(store.root, name)


def delete_workspace(store: Store, workspace: str) -> bool:
    """Delete a workspace's history for good (module doc). Returns True when
    anything was deleted, False when there was nothing (already gone)."""
    ws = validate_workspace(workspace)
    path = os.path.join(store.root, ws)
    tomb = tombstone_path(store, ws)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise LedgerError(f"workspace {ws!r}: cannot delete: {exc.strerror or exc} "
                          f"({path}); nothing was deleted") from exc
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise UnsafePath(
            f"workspace {ws!r}: {path} is {segs.describe_mode(st.st_mode)}, not a directory; "
            "delete does not follow it: move or remove it by hand; nothing was deleted"
        )
    exists = st is not None
    pending = os.path.lexists(tomb) or any(True for _ in _trash_dirs(store, ws))
    if not exists and not pending:
        return False
    try:
        _delete(store, ws, path, tomb)
    except (OSError, LedgerError) as exc:
        if isinstance(exc, LedgerError) and not isinstance(exc, OSError) and \
                not os.path.lexists(tomb):
            raise
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        if not os.path.lexists(tomb):
            raise LedgerError(f"workspace {ws!r}: cannot delete: {why}; nothing was "
                              "deleted") from exc
        raise DeletePending(
            f"workspace {ws!r}: the delete stopped half-way ({why}); the history is "
            f"unreadable and unwritable until `tledger delete {ws}` runs again and finishes "
            "it (fix the cause first)"
        ) from exc
    return True


def _delete(store: Store, ws: str, path: str, tomb: str) -> None:
    """The steps of ``delete_workspace`` after its checks (module doc)."""
    if not os.path.lexists(tomb):
        body = fmt.encode_json({"workspace": ws, "time": now_ms(), "pid": os.getpid()}) + b"\n"
        try:
            fd = os.open(
                tomb, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
            )
        except FileExistsError:
            fd = -1
        if fd >= 0:
            try:
                os.write(fd, body)
                os.fsync(fd)
            finally:
                os.close(fd)
            segs.fsync_dir(store.root)
    _step("tombstone")
    if os.path.isdir(path) and not os.path.islink(path):
        trash = os.path.join(store.root, f".{ws}{TRASH_INFIX}{secrets.token_hex(6)}")
        with locked(path, ws, store.lock_timeout, shared=False):
            _step("locked")
            os.rename(path, trash)
            segs.fsync_dir(store.root)
        _step("renamed")
    for trash in list(_trash_dirs(store, ws)):
        shutil.rmtree(trash, ignore_errors=False)
        _step("trash-removed")
    _remove_recreated(store, ws, path)
    try:
        os.unlink(tomb)
    except FileNotFoundError:
        pass
    segs.fsync_dir(store.root)
    _step("done")


def _remove_recreated(store: Store, ws: str, path: str) -> None:
    """A writer that raced the tombstone may have recreated the directory (and
    its LOCK) before failing; such a directory never holds data."""
    try:
        names = set(os.listdir(path))
    except (FileNotFoundError, NotADirectoryError):
        return
    if not names <= {ffmt.LOCK_NAME}:
        raise LedgerError(
            f"workspace {ws!r} was written to while being deleted ({path} holds "
            f"{sorted(names)}); delete it again"
        )
    if names:
        with locked(path, ws, store.lock_timeout, shared=False):
            segs.unlink_quietly(os.path.join(path, ffmt.LOCK_NAME))
    try:
        os.rmdir(path)
    except OSError:
        pass


def require_workspace(history: History) -> None:
    if not history.exists():
        raise WorkspaceNotFound(
            f"workspace {history.workspace!r} has no history under {history.store.root}"
        )
