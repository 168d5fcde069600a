"""A crash-state explorer: record the file-system calls one operation makes,
then build every state a power loss may leave under a stated persistence
model. Independent of ``ledger`` but for one name (its syncfs, below): it
wraps ``os`` functions, so the code under test runs its own, unmodified path.

Recording (``Recorder``): while active, the ``os`` calls below are wrapped;
calls on paths under the recorded root are logged as operations on a small
model of inodes and directory entries (writes go to the inode an fd names,
so a write before a rename lands in the renamed file):

    open(O_CREAT) -> create      write / writev / pwrite -> write(inode, offset, bytes)
    open(O_TRUNC), ftruncate -> truncate       fsync / fdatasync -> fsync(inode | directory)
    rename / replace, unlink / remove, link, mkdir, rmdir -> directory operations
    os.sync -> sync              shutil.copyfile -> create + one write
    ledger's syncfs(path under the root) -> sync (its module is imported and
    patched by name while recording, the one piece of ledger named here)

The persistence model (``crash_states``), for a crash after the first ``k``
recorded operations. Its sources: POSIX ``fsync`` (data and metadata of the
file reach the device; the directory entry needs an ``fsync`` of the
directory), ext4's journal (directory operations commit to the journal in
the order issued, so the ones that survive are a *prefix*), and the
observations of ALICE (Pillai et al., OSDI 2014) and CrashMonkey (Mohan et
al., OSDI 2018) that file data not yet fsynced may be lost or torn even when
later operations survive:

1. Everything before the last ``os.sync`` survives.
2. A file's writes (and truncations) up to its last ``fsync`` survive; of
   those after it, the explorer tries: all survive; none survive; all but
   the last; each earlier one alone lost; the last cut at each 512-byte
   sector boundary (at most 16 cuts).
   One file varies at a time, and once with every file losing all of them.
3. Directory operations survive as a prefix of their issue order; every
   operation followed (before the crash) by an ``fsync`` of its directory is
   inside the prefix. Every prefix length from there to all of them is tried:
   an entry may survive early (before its directory is synced) or not at all.
4. An entry whose inode's data did not survive holds the data that did (an
   empty file for a new one): a rename may survive while the renamed file's
   unsynced data does not (the ext4 case without ``auto_da_alloc``).

Files a library writes below ``os`` (SQLite's, in C: the recall index) are
*opaque*: ``record(..., opaque=prefixes)`` compares each file whose name
starts with one of the prefixes after every step with what it held before,
and logs the difference as operations: a create for a new file, one write
from the first changed byte to the last, a truncate for a shorter file, an
unlink for a vanished one. Their fsyncs are not seen, so every such write counts as unsynced: the
explorer tries states a real crash could not leave (a database page written
while the WAL frame before it is lost), which an index verified on open must
answer as well.

Not modelled: timestamps and inode numbers (a materialized state gets new
ones, so stamps never match a receipt written before the crash: every state
takes the engine's path for an unverified receipt), and reordering of data
writes within one file beyond rule 2.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import shutil
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

SECTOR = 512
MAX_CUTS = 16  # sector cuts tried in the last unsynced write of a file
META = frozenset({"create", "rename", "unlink", "link", "mkdir", "rmdir"})


@dataclass(frozen=True)
class Op:
    kind: str
    path: str = ""  # relative to the root
    path2: str = ""
    ino: int = -1
    offset: int = 0
    data: bytes = b""
    size: int = 0


@dataclass
class Snapshot:
    """The durable state before the operation: directories, entries, inodes."""

    dirs: set[str]
    entries: dict[str, int]
    inodes: dict[int, bytes]


def snapshot(root: str) -> tuple[Snapshot, dict[tuple[int, int], int]]:
    dirs: set[str] = {""}
    entries: dict[str, int] = {}
    inodes: dict[int, bytes] = {}
    ids: dict[tuple[int, int], int] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        rel = "" if rel == "." else rel
        for d in dirnames:
            dirs.add(os.path.join(rel, d))
        for f in filenames:
            full = os.path.join(dirpath, f)
            st = os.lstat(full)
            if not stat.S_ISREG(st.st_mode):
                continue
            key = (st.st_dev, st.st_ino)
            if key not in ids:
                ids[key] = len(ids)
                with open(full, "rb") as fh:
                    inodes[ids[key]] = fh.read()
            entries[os.path.join(rel, f)] = ids[key]
    return Snapshot(dirs, entries, inodes), ids


class Recorder:
    """Wrap ``os`` (and ``shutil.copyfile``) while a ``with`` block runs."""

    NAMES = ("open", "close", "write", "writev", "pwrite", "ftruncate", "fsync", "fdatasync",
             "rename", "replace", "unlink", "remove", "link", "mkdir", "rmdir", "sync")

    # Functions outside ``os`` that flush a filesystem, by module and name:
    # patched while recording when their module imports (``syncfs(2)`` is
    # reached through ctypes, which no ``os`` wrapper sees).
    SYNC_HOOKS = (("ledger.storage.files.syncfs", "sync_filesystem"),)

    def __init__(self, root: str, opaque: tuple[str, ...] = ()) -> None:
        self.root = os.path.realpath(root)
        self.before, self._ids = snapshot(self.root)
        self.ops: list[Op] = []
        self._fds: dict[int, tuple[str, int | None]] = {}  # fd -> (rel path, inode | None: dir)
        self._real: dict[str, Any] = {}
        self.opaque = opaque
        # Opaque files as last seen: rel path -> (model inode, bytes).
        self._seen: dict[str, tuple[int, bytes]] = {
            rel: (ino, self.before.inodes[ino]) for rel, ino in self.before.entries.items()
            if self._is_opaque(rel)}

    def _is_opaque(self, rel: str) -> bool:
        return os.path.basename(rel).startswith(self.opaque) if self.opaque else False

    def observe(self) -> None:
        """Log what changed in the opaque files since they were last seen."""
        if not self.opaque:
            return
        now: dict[str, bytes] = {}
        for dirpath, _dirs, files in os.walk(self.root):
            for f in files:
                full = os.path.join(dirpath, f)
                rel = os.path.relpath(full, self.root)
                if self._is_opaque(rel) and stat.S_ISREG(os.lstat(full).st_mode):
                    with open(full, "rb") as fh:
                        now[rel] = fh.read()
        for rel in sorted(set(self._seen) - set(now)):
            self.ops.append(Op("unlink", rel))
            del self._seen[rel]
        for rel, data in sorted(now.items()):
            if rel not in self._seen:
                ino = len(self._ids) + 4_000_000 + len(self.ops)
                self.ops.append(Op("create", rel, ino=ino))
                self._seen[rel] = (ino, b"")
            ino, old = self._seen[rel]
            if len(data) < len(old):
                self.ops.append(Op("truncate", rel, ino=ino, size=len(data)))
                old = old[: len(data)]
            first = next((i for i in range(min(len(data), len(old))) if data[i] != old[i]),
                         min(len(data), len(old)))
            if first < len(data):  # one write: from the first changed byte to the end
                last = len(data)
                while last > first and last <= len(old) and data[last - 1] == old[last - 1]:
                    last -= 1
                self.ops.append(Op("write", ino=ino, offset=first, data=data[first:last]))
            self._seen[rel] = (ino, data)

    # --- paths ---------------------------------------------------------------------

    def _rel(self, path: Any, dir_fd: int | None = None) -> str | None:
        p = os.fsdecode(path)
        if dir_fd is not None and not os.path.isabs(p):
            base = self._fds.get(dir_fd)
            if base is None:
                return None
            p = os.path.join(self.root, base[0], p)
        p = os.path.abspath(p)
        if p == self.root:
            return ""
        if not p.startswith(self.root + os.sep):
            return None
        return os.path.relpath(p, self.root)

    def _new_inode(self, fd: int) -> int:
        st = os.fstat(fd)
        ino = len(self._ids) + 1_000_000 + len(self.ops)
        self._ids[(st.st_dev, st.st_ino)] = ino
        return ino

    def _inode_of(self, fd: int) -> int:
        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino)
        if key not in self._ids:
            self._ids[key] = len(self._ids) + 2_000_000
        return self._ids[key]

    # --- the wrappers ---------------------------------------------------------------

    def __enter__(self) -> Recorder:
        for name in self.NAMES:
            self._real[name] = getattr(os, name)
            setattr(os, name, getattr(self, "_" + name))
        self._real["copyfile"] = shutil.copyfile
        shutil.copyfile = self._copyfile  # type: ignore[assignment]
        self._hooks: list[tuple[Any, str, Any]] = []
        for modname, attr in self.SYNC_HOOKS:
            try:
                mod = importlib.import_module(modname)
            except ImportError:
                mod = None
            if mod is not None:
                real = getattr(mod, attr)
                self._hooks.append((mod, attr, real))
                setattr(mod, attr, self._syncfs_of(real))
        return self

    def __exit__(self, *exc: object) -> None:
        for name in self.NAMES:
            setattr(os, name, self._real[name])
        shutil.copyfile = self._real["copyfile"]
        for mod, attr, real in self._hooks:
            setattr(mod, attr, real)

    def _open(self, path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None
              ) -> int:
        rel = self._rel(path, dir_fd)
        existed = rel is not None and os.path.lexists(os.path.join(self.root, rel))
        fd = self._real["open"](path, flags, mode, dir_fd=dir_fd)
        if rel is None:
            return fd
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            self._fds[fd] = (rel, None)
            return fd
        if not existed and flags & os.O_CREAT:
            ino = self._new_inode(fd)
            self.ops.append(Op("create", rel, ino=ino))
            if self._is_opaque(rel):
                self._seen[rel] = (ino, b"")
        else:
            ino = self._inode_of(fd)
            if flags & os.O_TRUNC:
                self.ops.append(Op("truncate", rel, ino=ino, size=0))
        self._fds[fd] = (rel, ino)
        return fd

    def _close(self, fd: int) -> None:
        self._fds.pop(fd, None)
        self._real["close"](fd)

    def _file(self, fd: int) -> int | None:
        entry = self._fds.get(fd)
        return entry[1] if entry is not None else None

    def _write(self, fd: int, data: Any) -> int:
        n = self._real["write"](fd, data)
        ino = self._file(fd)
        if ino is not None:
            pos = os.lseek(fd, 0, os.SEEK_CUR) - n
            self.ops.append(Op("write", ino=ino, offset=pos, data=bytes(data[:n])))
        return int(n)

    def _writev(self, fd: int, buffers: Any) -> int:
        bufs = [bytes(b) for b in buffers]
        n = self._real["writev"](fd, bufs)
        ino = self._file(fd)
        if ino is not None:
            pos = os.lseek(fd, 0, os.SEEK_CUR) - n
            self.ops.append(Op("write", ino=ino, offset=pos, data=b"".join(bufs)[:n]))
        return int(n)

    def _pwrite(self, fd: int, data: Any, offset: int) -> int:
        n = self._real["pwrite"](fd, data, offset)
        ino = self._file(fd)
        if ino is not None:
            self.ops.append(Op("write", ino=ino, offset=offset, data=bytes(data[:n])))
        return int(n)

    def _ftruncate(self, fd: int, length: int) -> None:
        self._real["ftruncate"](fd, length)
        ino = self._file(fd)
        if ino is not None:
            self.ops.append(Op("truncate", ino=ino, size=length))

    def _fsync(self, fd: int) -> None:
        self._real["fsync"](fd)
        entry = self._fds.get(fd)
        if entry is not None:
            rel, ino = entry
            self.ops.append(Op("fsync_dir", rel) if ino is None else Op("fsync", ino=ino))

    def _fdatasync(self, fd: int) -> None:
        self._real["fdatasync"](fd)
        ino = self._file(fd)
        if ino is not None:
            self.ops.append(Op("fsync", ino=ino))

    def _rename(self, src: Any, dst: Any, *, src_dir_fd: int | None = None,
                dst_dir_fd: int | None = None, _name: str = "rename") -> None:
        a, b = self._rel(src, src_dir_fd), self._rel(dst, dst_dir_fd)
        self._real[_name](src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
        if a is not None and b is not None:
            self.ops.append(Op("rename", a, b))

    def _replace(self, src: Any, dst: Any, *, src_dir_fd: int | None = None,
                 dst_dir_fd: int | None = None) -> None:
        self._rename(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd, _name="replace")

    def _unlink(self, path: Any, *, dir_fd: int | None = None) -> None:
        rel = self._rel(path, dir_fd)
        self._real["unlink"](path, dir_fd=dir_fd)
        if rel is not None:
            self.ops.append(Op("unlink", rel))
            self._seen.pop(rel, None)

    def _remove(self, path: Any, *, dir_fd: int | None = None) -> None:
        self._unlink(path, dir_fd=dir_fd)

    def _link(self, src: Any, dst: Any, *, src_dir_fd: int | None = None,
              dst_dir_fd: int | None = None, follow_symlinks: bool = True) -> None:
        a, b = self._rel(src, src_dir_fd), self._rel(dst, dst_dir_fd)
        self._real["link"](src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd,
                           follow_symlinks=follow_symlinks)
        if a is not None and b is not None:
            self.ops.append(Op("link", a, b))

    def _mkdir(self, path: Any, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        rel = self._rel(path, dir_fd)
        self._real["mkdir"](path, mode, dir_fd=dir_fd)
        if rel is not None:
            self.ops.append(Op("mkdir", rel))

    def _rmdir(self, path: Any, *, dir_fd: int | None = None) -> None:
        rel = self._rel(path, dir_fd)
        self._real["rmdir"](path, dir_fd=dir_fd)
        if rel is not None:
            self.ops.append(Op("rmdir", rel))

    def _sync(self) -> None:
        self._real["sync"]()
        self.ops.append(Op("sync"))

    def _syncfs_of(self, real: Callable[[str], None]) -> Callable[[str], None]:
        def wrapped(path: str) -> None:
            real(path)
            if self._rel(path) is not None:  # the root's filesystem: all of it
                self.ops.append(Op("sync"))
        return wrapped

    def _copyfile(self, src: Any, dst: Any, *, follow_symlinks: bool = True) -> Any:
        out = self._real["copyfile"](src, dst, follow_symlinks=follow_symlinks)
        rel = self._rel(dst)
        if rel is not None:
            with open(dst, "rb") as fh:
                data = fh.read()
            ino = len(self._ids) + 3_000_000 + len(self.ops)
            self.ops += [Op("create", rel, ino=ino), Op("write", ino=ino, offset=0, data=data)]
        return out


# --- crash states ------------------------------------------------------------------


def _parent(path: str) -> str:
    return os.path.dirname(path)


def _meta_dirs(op: Op) -> tuple[str, ...]:
    if op.kind in ("rename", "link"):
        return (_parent(op.path), _parent(op.path2))
    return (_parent(op.path),)


@dataclass
class Plan:
    """One crash state: the first ``k`` operations were issued; ``meta`` of
    their directory operations survive; ``data`` says, per inode, what
    became of its unsynced writes."""

    k: int
    meta: int
    data: dict[int, tuple[str, int]] = field(default_factory=dict)  # ino -> (choice, cut)

    def label(self) -> str:
        return f"k={self.k} meta={self.meta} data={sorted(self.data.items())}"


def _plans_at(ops: list[Op], k: int) -> Iterator[Plan]:
    issued = ops[:k]
    last_sync = max((i for i, o in enumerate(issued) if o.kind == "sync"), default=-1)
    meta_idx = [i for i, o in enumerate(issued) if o.kind in META]
    forced = 0
    for pos, i in enumerate(meta_idx):
        dirs = _meta_dirs(issued[i])
        if i < last_sync or any(o.kind == "fsync_dir" and o.path in dirs
                                for o in issued[i + 1:]):
            forced = pos + 1
    unsynced: dict[int, list[int]] = {}
    for i, o in enumerate(issued):
        if o.kind in ("write", "truncate") and i > last_sync:
            later = any(x.kind == "fsync" and x.ino == o.ino for x in issued[i + 1:])
            if not later:
                unsynced.setdefault(o.ino, []).append(i)
    data_options: list[dict[int, tuple[str, int]]] = [{}]
    for ino, idx in sorted(unsynced.items()):
        data_options.append({ino: ("none", 0)})
        if len(idx) > 1:
            data_options.append({ino: ("drop_last", 0)})
            for j in range(len(idx) - 1):  # one earlier write lost, later ones kept
                data_options.append({ino: ("drop_one", j)})
        last = issued[idx[-1]]
        if last.kind == "write" and len(last.data) > SECTOR:
            for cut in range(SECTOR, len(last.data), SECTOR)[:MAX_CUTS]:
                data_options.append({ino: ("torn", cut)})
    if len(unsynced) > 1:
        data_options.append({ino: ("none", 0) for ino in unsynced})
    for meta in range(forced, len(meta_idx) + 1):
        for data in data_options:
            yield Plan(k, meta, data)


def crash_states(ops: list[Op]) -> Iterator[Plan]:
    """Every plan of the model, for every crash point 0..len(ops)."""
    for k in range(len(ops) + 1):
        yield from _plans_at(ops, k)


@dataclass
class Tree:
    """A materialized crash state: directories and files with their bytes."""

    dirs: list[str]
    files: dict[str, bytes]
    digest: str

    def write(self, dest: str) -> None:
        os.makedirs(dest)
        for d in self.dirs:
            os.makedirs(os.path.join(dest, d), exist_ok=True)
        for path, data in self.files.items():
            with open(os.path.join(dest, path), "wb") as fh:
                fh.write(data)


def materialize(before: Snapshot, ops: list[Op], plan: Plan, dest: str) -> str:
    """Write the state ``plan`` describes into the new directory ``dest``;
    returns a digest of it (equal states have equal digests)."""
    tree = build(before, ops, plan)
    tree.write(dest)
    return tree.digest


def build(before: Snapshot, ops: list[Op], plan: Plan) -> Tree:
    """The state ``plan`` describes, in memory."""
    issued = ops[: plan.k]
    dirs = set(before.dirs)
    entries = dict(before.entries)
    inodes = {i: bytearray(b) for i, b in before.inodes.items()}
    writes: dict[int, list[int]] = {}
    for i, o in enumerate(issued):
        if o.kind in ("write", "truncate"):
            writes.setdefault(o.ino, []).append(i)
    skip: set[int] = set()
    torn: dict[int, int] = {}
    for ino, (choice, cut) in plan.data.items():
        unsynced = [i for i in writes.get(ino, [])
                    if not any(x.kind in ("fsync", "sync") and (x.ino == ino or x.kind == "sync")
                               for x in issued[i + 1:])]
        if choice == "none":
            skip.update(unsynced)
        elif choice == "drop_last" and unsynced:
            skip.add(unsynced[-1])
        elif choice == "drop_one" and cut < len(unsynced):
            skip.add(unsynced[cut])
        elif choice == "torn" and unsynced:
            torn[unsynced[-1]] = cut
    meta_seen = 0
    for i, o in enumerate(issued):
        if o.kind in META:
            meta_seen += 1
            if meta_seen > plan.meta:
                continue
            if o.kind == "create":
                entries[o.path] = o.ino
                inodes.setdefault(o.ino, bytearray())
            elif o.kind == "rename":
                if o.path in entries:
                    entries[o.path2] = entries.pop(o.path)
                elif o.path in dirs:  # a directory: move it and everything under it
                    prefix = o.path + os.sep
                    dirs = {o.path2 + d[len(o.path):] if d == o.path or d.startswith(prefix)
                            else d for d in dirs}
                    entries = {o.path2 + p[len(o.path):] if p.startswith(prefix) else p: v
                               for p, v in entries.items()}
            elif o.kind == "unlink":
                entries.pop(o.path, None)
            elif o.kind == "link":
                if o.path in entries:
                    entries[o.path2] = entries[o.path]
            elif o.kind == "mkdir":
                dirs.add(o.path)
            elif o.kind == "rmdir":
                dirs.discard(o.path)
        elif o.kind in ("write", "truncate") and i not in skip:
            buf = inodes.setdefault(o.ino, bytearray())
            if o.kind == "truncate":
                del buf[o.size:]
                buf.extend(b"\0" * (o.size - len(buf)))
                continue
            data = o.data[: torn[i]] if i in torn else o.data
            if len(buf) < o.offset:
                buf.extend(b"\0" * (o.offset - len(buf)))
            buf[o.offset : o.offset + len(data)] = data
    digest = hashlib.blake2b(digest_size=16)
    out_dirs = []
    for d in sorted(dirs):
        if d and all(p == "" or p in dirs for p in _ancestors(d)):
            out_dirs.append(d)
            digest.update(b"D" + d.encode())
    files = {}
    for path, ino in sorted(entries.items()):
        if all(p == "" or p in dirs for p in _ancestors(path)):
            data = bytes(inodes.get(ino, b""))
            files[path] = data
            digest.update(b"F" + path.encode() + b"\0" + hashlib.blake2b(data).digest())
    return Tree(out_dirs, files, digest.hexdigest())


def _ancestors(path: str) -> list[str]:
    out = []
    p = _parent(path)
    while p:
        out.append(p)
        p = _parent(p)
    return out


def record(root: str, steps: list[Callable[[], Any]], opaque: tuple[str, ...] = ()
           ) -> tuple[Snapshot, list[Op], list[int]]:
    """Run ``steps`` in order with the recorder on; returns the state before,
    the operations, and after how many operations each step had returned.
    ``opaque``: name prefixes of files written below ``os`` (module doc),
    compared after each step."""
    rec = Recorder(root, opaque)
    ends = []
    with rec:
        for step in steps:
            step()
            rec.observe()
            ends.append(len(rec.ops))
    return rec.before, rec.ops, ends
