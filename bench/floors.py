"""Physical floors: the same work as the product, with nothing else.

Each floor does the one job a ledger operation cannot avoid, over the same
bytes, so a ratio product/floor shows what the product adds:

``rename_floor``    temp file + write the same framed batch + fsync + rename
                    + directory fsync (durability ``full``; ``normal`` skips
                    the directory fsync, ``off`` both fsyncs), as ``append``.
``read_decode``     read the same bytes once and msgspec-decode every line
                    (the provider view and ``check``).
``read_decode_kept`` the same, keeping every decoded row until the end, as a
                    reader that returns its rows must (the provider view):
                    beside the issue's floor, never instead of it.
``scan_fold_find``  the search floor: read, decode each line, take the
                    searchable text of every part (text; tool_call name + JSON
                    input; tool_result output; never reasoning), Unicode
                    case-fold it and ``str.find`` the folded query.
``raw_find``        ``bytes.find`` of the query over the raw bytes: no decoding,
                    no case folding -- the absolute floor, shown beside.
``tiktoken_raw``    tiktoken's own ``encode_ordinary`` of the same text.
``SyscallReplica``  the system calls one ``append`` makes (lock, listing, a
                    stat per segment, receipt read and two in-place writes,
                    reading the active segment, the rename commit of old
                    bytes + batch; sealing into a new segment and merging
                    as the ledger does) with none of the Python logic around
                    them: what the rename design costs by itself, so that
                    ledger/replica is what Python adds and replica/floor what
                    the design adds.
"""

from __future__ import annotations

import fcntl
import functools
import os
import random
import secrets
from collections.abc import Sequence
from typing import Any

import msgspec

from ledger.core.format import files as ffmt
from ledger.storage.files.merge import FANOUT

_dec = msgspec.json.Decoder()
_enc = msgspec.json.Encoder()
READ_CHUNK = 16 << 20


def rename_floor(directory: str, data: Sequence[bytes], durability: str = "full") -> None:
    tmp = os.path.join(directory, f".tmp-{secrets.token_hex(6)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        for chunk in data:
            os.write(fd, chunk)
        if durability != "off":
            os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, os.path.join(directory, "target"))
    if durability == "full":
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


class SyscallReplica:
    """A workspace-shaped directory with ``segments`` segment files whose
    active segment grows by each batch up to ``cap``; each call makes the
    system calls of one append, on the files the ledger's append would have.

    As the ledger does (``ledger.storage.files.workspace``): a full active
    segment is sealed and the batch starts the next segment number (one
    INDEX line appended, unsynced: a projection), so the listing and the
    stat per segment grow as the ledger's do; once ``FANOUT`` segments of
    the cap's size trail the sealed run they are merged into the first of
    them (temp + fsync + rename, unlink the rest, directory fsync: the
    durable steps of ``ledger.storage.files.merge``). The LOCK is fstat'ed
    before the flock and lstat'ed after it, and the tombstone checked
    before the lock and under it (the ledger's checks against a planted
    FIFO and a concurrent delete). Temp names come from a seeded generator,
    as the ledger's (no ``getrandom`` call)."""

    def __init__(self, directory: str, segments: int, cap: int) -> None:
        self.dir = directory
        self.cap = cap
        os.makedirs(directory, mode=0o700, exist_ok=True)
        self.numbers = list(range(1, max(segments, 1) + 1))
        self.small = 0  # trailing sealed segments of the cap's size
        for n in self.numbers:
            with open(os.path.join(directory, ffmt.segment_name(n)), "wb") as f:
                f.write(b"{}\n")
        for name in (ffmt.LOCK_NAME, ffmt.FORMAT_NAME, ffmt.INDEX_NAME):
            open(os.path.join(directory, name), "wb").close()
        with open(os.path.join(directory, ffmt.RECEIPT_NAME), "wb") as f:
            f.write(bytes(ffmt.RECEIPT_SIZE))
        self.tomb = os.path.join(os.path.dirname(directory), ".replica.deleting")
        self.rng = random.Random(0)

    def _path(self, n: int) -> str:
        return os.path.join(self.dir, _segment_name(n))

    def __call__(self, data: Sequence[bytes]) -> None:
        d = self.dir
        os.path.isdir(d)
        os.path.lexists(self.tomb)
        lock_path = os.path.join(d, ffmt.LOCK_NAME)
        lock = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        os.fstat(lock)
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.lstat(lock_path)
        os.path.lexists(self.tomb)
        os.listdir(d)
        dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        for name in map(_segment_name, self.numbers):
            os.stat(name, dir_fd=dfd, follow_symlinks=False)
        os.close(dfd)
        rfd = os.open(os.path.join(d, ffmt.RECEIPT_NAME), os.O_RDWR | os.O_CLOEXEC)
        os.fstat(rfd)
        os.pread(rfd, ffmt.RECEIPT_SIZE + 1, 0)
        os.pwrite(rfd, b"\1" * ffmt.RECEIPT_SIZE, 0)
        active = self._path(self.numbers[-1])
        sfd = os.open(active, os.O_RDONLY | os.O_CLOEXEC)
        size = os.fstat(sfd).st_size
        old = os.read(sfd, size + 1)
        os.close(sfd)
        sealed = len(old) >= self.cap
        if sealed:
            old = b""
            self.numbers.append(self.numbers[-1] + 1)
            active = self._path(self.numbers[-1])
        fd = self._commit(active, [old, *data] if old else list(data))
        os.fstat(fd)
        os.close(fd)
        fsync_dir(d)
        if sealed:
            ifd = os.open(os.path.join(d, ffmt.INDEX_NAME),
                          os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
            os.write(ifd, b'{"e":[0]}\n' * 2)
            os.close(ifd)
            self.small += 1
            if self.small >= FANOUT:
                self._merge()
        os.pwrite(rfd, b"\2" * ffmt.RECEIPT_SIZE, 0)
        os.close(rfd)
        fcntl.flock(lock, fcntl.LOCK_UN)
        os.close(lock)

    def _commit(self, target: str, chunks: list[bytes]) -> int:
        tmp = os.path.join(self.dir, f"{ffmt.TEMP_PREFIX}{self.rng.getrandbits(48):012x}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        os.writev(fd, chunks)
        os.fsync(fd)
        os.rename(tmp, target)
        return fd

    def _merge(self) -> None:
        """The trailing ``FANOUT`` sealed segments become the first of them."""
        run = self.numbers[-1 - FANOUT:-1]
        parts = []
        for n in run:
            with open(self._path(n), "rb") as f:
                parts.append(f.read())
        os.close(self._commit(self._path(run[0]), parts))
        for n in run[1:]:
            os.unlink(self._path(n))
        fsync_dir(self.dir)
        self.numbers = [*self.numbers[:-FANOUT], self.numbers[-1]]
        self.small = 0


_segment_name = functools.lru_cache(maxsize=None)(ffmt.segment_name)


def fsync_dir(path: str) -> None:
    dfd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    os.fsync(dfd)
    os.close(dfd)


def _chunks(path: str, start: int = 0) -> Any:
    """Whole lines of ``path`` from ``start``, in chunks of about READ_CHUNK."""
    with open(path, "rb", buffering=0) as f:
        f.seek(start)
        rest = b""
        while True:
            data = f.read(READ_CHUNK)
            if not data:
                break
            data = rest + data if rest else data
            cut = data.rfind(b"\n") + 1
            rest = data[cut:]
            yield data[:cut]
        if rest:
            yield rest


def read_decode(spans: Sequence[tuple[str, int]]) -> int:
    """Decode every line of the files from their offsets; returns the rows."""
    n = 0
    for path, start in spans:
        for data in _chunks(path, start):
            for line in data.splitlines():
                _dec.decode(line)
                n += 1
    return n


def read_decode_kept(spans: Sequence[tuple[str, int]]) -> int:
    """:func:`read_decode`, keeping every decoded row until all are decoded
    (the rows a view hands back live at once: their memory and the cyclic
    collector's passes over them, which ``read_decode`` frees as it goes, are
    part of any such reader's floor); returns the rows."""
    rows: list[Any] = []
    keep = rows.append
    for path, start in spans:
        for data in _chunks(path, start):
            for line in data.splitlines():
                keep(_dec.decode(line))
    return len(rows)


def _searchable(part: Any) -> str:
    t = part.get("type") if isinstance(part, dict) else None
    if t == "text":
        return str(part.get("text", ""))
    if t == "tool_call":
        return f"{part.get('name', '')} {_enc.encode(part.get('input')).decode('utf-8')}"
    if t == "tool_result":
        out = part.get("output")
        return out if isinstance(out, str) else _enc.encode(out).decode("utf-8")
    if t == "media":
        return "[media]"
    return ""


def scan_fold_find(spans: Sequence[tuple[str, int]], query: str) -> int:
    """Count the rows whose searchable text holds ``query`` (case-folded)."""
    folded = query.casefold()
    hits = 0
    for path, start in spans:
        for data in _chunks(path, start):
            for line in data.splitlines():
                row = _dec.decode(line)
                text = "\n".join(_searchable(p) for p in row.get("parts") or ())
                if text.casefold().find(folded) >= 0:
                    hits += 1
    return hits


def raw_find(spans: Sequence[tuple[str, int]], query: str) -> int:
    needle = query.encode("utf-8")
    hits = 0
    for path, start in spans:
        for data in _chunks(path, start):
            pos = data.find(needle)
            while pos >= 0:
                hits += 1
                pos = data.find(needle, pos + 1)
    return hits


def tiktoken_raw(encoding: Any, text: str) -> int:
    return len(encoding.encode_ordinary(text))
