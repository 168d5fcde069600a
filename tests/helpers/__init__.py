"""The tests' helpers: this module holds the ones shared across the suite
(rows, file trees, child-process environments, fault injection, log checks);
the modules beside it hold the specialised ones (``recovery``, ``rollover``,
``citus``, ``engine_contract``, ``crashfs``, ``cli_zoo``, ``cli_proc``,
``recall``) and the scripts tests run (``writer_proc``, ``agents_script``,
``pg_cluster``, ``citus_cluster``). Imported as ``tests.helpers``; nothing here is a test.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger.core.format import files as ffmt

if TYPE_CHECKING:  # pytest is not needed to import this (bench imports pg_cluster)
    import pytest

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
WRITER = str(Path(__file__).resolve().parent / "writer_proc.py")


def subprocess_env() -> dict[str, str]:
    """Environment for child interpreters: the repo first on sys.path, so the
    checkout is imported whatever the state of the editable install."""
    env = dict(os.environ)
    rest = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + rest if rest else "")
    env.pop("TLEDGER_ROOT", None)
    return env


def msg(text: str = "hello", role: str = "user", **extra: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "kind": "message", "role": role, "parts": [{"type": "text", "text": text}]
    }
    row.update(extra)
    return row


def tree(path: Path) -> dict[str, tuple[str, int, int, int, bytes | None]]:
    """Everything below ``path``: relative name -> (type, mode, mtime_ns, ino, bytes)."""
    out: dict[str, tuple[str, int, int, int, bytes | None]] = {}
    if not os.path.lexists(path):
        return out
    for dirpath, dirnames, filenames in os.walk(path):
        for name in [*dirnames, *filenames]:
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            rel = os.path.relpath(full, path)
            if os.path.isdir(full) and not os.path.islink(full):
                out[rel] = ("dir", st.st_mode, st.st_mtime_ns, st.st_ino, None)
            elif os.path.islink(full):
                target = os.readlink(full).encode()
                out[rel] = ("link", st.st_mode, st.st_mtime_ns, st.st_ino, target)
            else:
                with open(full, "rb") as f:
                    out[rel] = ("file", st.st_mode, st.st_mtime_ns, st.st_ino, f.read())
    st = os.lstat(path)
    out["."] = ("dir", st.st_mode, st.st_mtime_ns, st.st_ino, None)
    return out


def file_bytes(wsdir: Path, *, skip: tuple[str, ...] = ()) -> dict[str, bytes]:
    """name -> bytes of every regular file directly in ``wsdir``."""
    out = {}
    for name in sorted(os.listdir(wsdir)):
        full = wsdir / name
        if name in skip or not full.is_file():
            continue
        out[name] = full.read_bytes()
    return out


def temps(wsdir: Path) -> list[str]:
    return sorted(n for n in os.listdir(wsdir) if n.startswith(ffmt.TEMP_PREFIX))


def segment_files(wsdir: Path) -> list[Path]:
    return sorted(p for p in wsdir.iterdir() if ffmt.segment_number(p.name) is not None)


def dicts(h: Any, **kwargs: Any) -> list[dict[str, Any]]:
    return [r.to_dict() for r in h.rows(**kwargs)]


def check_log(rows: list[dict[str, Any]], where: str = "") -> dict[str, list[int]]:
    """Assert the log invariants of a history written only by tracked appends:
    seqs 1..N gap-free and strictly increasing, every batch whole (n rows,
    i = 0..n-1, adjacent). Returns batch id -> seqs."""
    seqs = [r["seq"] for r in rows]
    assert seqs == list(range(1, len(rows) + 1)), f"{where}: seqs not 1..N: {seqs[:50]}..."
    batches: dict[str, list[int]] = {}
    i = 0
    while i < len(rows):
        b = rows[i]["batch"]
        bid, n = b["id"], b["n"]
        assert bid not in batches, f"{where}: batch {bid} appears twice (not adjacent)"
        run = rows[i : i + n]
        assert len(run) == n, f"{where}: batch {bid} has {len(run)} of {n} rows"
        for k, r in enumerate(run):
            assert r["batch"] == {"id": bid, "n": n, "i": k}, (
                f"{where}: batch {bid} row {k} is {r['batch']} (torn or interleaved)"
            )
        batches[bid] = [r["seq"] for r in run]
        i += n
    return batches


# --- fault injection ----------------------------------------------------------

PRE_RENAME = (
    "lock_open",
    "pending_receipt_open",
    "pending_receipt_write",
    "open_temp",
    "write_temp",
    "fsync_temp",
)
AT_OR_AFTER_RENAME = ("rename", "fsync_dir")
# The stable receipt is written through the descriptor the writer opened on
# arrival, so its only step of its own is the write.
STABLE = ("stable_receipt_write",)
ALL_STEPS = PRE_RENAME + AT_OR_AFTER_RENAME + STABLE
ERRNOS = (errno.ENOSPC, errno.EIO)


class Faults:
    """Wrap os.open/write/writev/fsync/rename/pwrite/close so that the calls of one
    commit step fail with ``err`` while armed; everything else is delegated.

    A fault is persistent while armed (a full disk stays full): from the
    ``start``-th matching call on, every matching call fails. ``stable_*``
    steps start at the second receipt write of the append (the first is the
    pending receipt).
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch, step: str, err: int) -> None:
        assert step in ALL_STEPS, step
        self.step = step
        self.err = err
        self.armed = False
        self.fired = 0
        self._counts: dict[str, int] = {}
        self._tmp: set[int] = set()
        self._dir: set[int] = set()
        self._receipt: set[int] = set()
        names = ("open", "write", "writev", "fsync", "rename", "pwrite", "close")
        self._real = {n: getattr(os, n) for n in names}
        for name in self._real:
            monkeypatch.setattr(os, name, getattr(self, "_" + name))

    @contextlib.contextmanager
    def armed_for(self) -> Iterator[Faults]:
        self.armed = True
        self._counts.clear()
        try:
            yield self
        finally:
            self.armed = False

    def _hit(self, kind: str, start: int = 1) -> bool:
        if not self.armed:
            return False
        self._counts[kind] = self._counts.get(kind, 0) + 1
        return self._counts[kind] >= start

    def _fail(self, what: str) -> None:
        self.fired += 1
        raise OSError(self.err, f"{os.strerror(self.err)} (injected at {self.step}: {what})")

    def _open(self, path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        name = os.path.basename(os.fspath(path))
        step = self.step
        if name == ffmt.LOCK_NAME and flags & os.O_CREAT and step == "lock_open" and self._hit("l"):
            self._fail(f"open {name}")
        if name == ffmt.RECEIPT_NAME and flags & (os.O_WRONLY | os.O_RDWR):
            if step == "pending_receipt_open" and self._hit("ro"):
                self._fail(f"open {name}")
        if name.startswith(ffmt.TEMP_PREFIX) and step == "open_temp" and self._hit("t"):
            self._fail(f"open {name}")
        fd = self._real["open"](path, flags, *args, **kwargs)
        if name.startswith(ffmt.TEMP_PREFIX):
            self._tmp.add(fd)
        elif flags & getattr(os, "O_DIRECTORY", 0):
            self._dir.add(fd)
        elif name == ffmt.RECEIPT_NAME:
            self._receipt.add(fd)
        return fd

    def _close(self, fd: int) -> None:
        self._tmp.discard(fd)
        self._dir.discard(fd)
        self._receipt.discard(fd)
        self._real["close"](fd)

    def _write(self, fd: int, data: Any) -> int:
        if fd in self._tmp and self.step == "write_temp" and self._hit("w"):
            self._fail("write temp")
        return self._real["write"](fd, data)

    def _writev(self, fd: int, buffers: Any) -> int:
        if fd in self._tmp and self.step == "write_temp" and self._hit("w"):
            self._fail("writev temp")
        return self._real["writev"](fd, buffers)

    def _fsync(self, fd: int) -> None:
        if fd in self._tmp and self.step == "fsync_temp" and self._hit("f"):
            self._fail("fsync temp")
        if fd in self._dir and self.step == "fsync_dir" and self._hit("d"):
            self._fail("fsync dir")
        self._real["fsync"](fd)

    def _rename(self, src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        if (
            os.path.basename(os.fspath(src)).startswith(ffmt.TEMP_PREFIX)
            and self.step == "rename"
            and self._hit("r")
        ):
            self._fail("rename")
        self._real["rename"](src, dst, *args, **kwargs)

    def _pwrite(self, fd: int, data: Any, offset: int) -> int:
        if fd in self._receipt:
            if self.step == "pending_receipt_write" and self._hit("rw"):
                self._fail("pwrite receipt")
            if self.step == "stable_receipt_write" and self._hit("rw", start=2):
                self._fail("pwrite receipt")
        return self._real["pwrite"](fd, data, offset)


def read_acks(path: Path) -> dict[str, list[int]]:
    """A writer's acknowledged batches (``<batch id> <seq>...`` lines); a line
    without its newline is not an ack."""
    if not path.exists():
        return {}
    out = {}
    for line in path.read_bytes().split(b"\n")[:-1]:
        bid, *seqs = line.decode().split()
        out[bid] = [int(s) for s in seqs]
    return out
