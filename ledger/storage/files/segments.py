"""Segment files: listing, stamps, streaming reads and the atomic rename commit.

The commit (``commit_file``) is the one place that makes bytes durable:

1. ``os.open`` a temporary file ``.tmp-<pid>-<random>`` with
   ``O_CREAT|O_EXCL|O_NOFOLLOW`` and mode 0600 in the workspace directory;
2. write every byte; ``fsync`` it (durability ``full`` and ``normal``);
3. ``rename`` it over the target, which readers see atomically: the old file
   or the new one, never a torn mix;
4. ``fsync`` the directory (``full``; ``normal`` only when the target is new),
   so the rename itself survives a power loss.

Steps 1-2 failing leave the history untouched (the temp file is removed);
step 3 or 4 failing leaves it uncertain, which ``CommitStep`` tells apart.
"""

from __future__ import annotations

import errno
import os
import stat as stat_mod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import msgspec

from ledger.core.errors import UnsafePath
from ledger.core.format import files as ffmt
from ledger.core.rows import unique_hex

READ_CHUNK = 1 << 20


def describe_mode(mode: int) -> str:
    """What a file type is, in words ("a directory", "a FIFO", ...)."""
    for test, name in ((stat_mod.S_ISREG, "a regular file"), (stat_mod.S_ISDIR, "a directory"),
                       (stat_mod.S_ISLNK, "a symlink"), (stat_mod.S_ISFIFO, "a FIFO"),
                       (stat_mod.S_ISSOCK, "a socket"), (stat_mod.S_ISCHR, "a character device"),
                       (stat_mod.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def not_regular(path: str, what: str) -> UnsafePath:
    return UnsafePath(
        f"{path} is {what}, not a regular file: nothing was read or changed; move it away "
        "(or restore the file) and run `tledger check`"
    )


_OPEN_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def open_regular(path: str, flags: int = os.O_RDONLY, mode: int = 0o600) -> int:
    """Open ``path`` as what a history's files must be: a regular file. A
    symlink is never followed and a FIFO never waited on (``O_NOFOLLOW``,
    ``O_NONBLOCK``, then ``fstat``); anything else is ``UnsafePath`` naming it.
    Other OS errors (missing, permission) are raised as they are."""
    return open_regular_stat(path, flags, mode)[0]


def open_regular_stat(path: str, flags: int = os.O_RDONLY, mode: int = 0o600
                      ) -> tuple[int, os.stat_result]:
    """:func:`open_regular`, and the ``fstat`` it took of the file (for a
    caller that needs the size: no second ``fstat``)."""
    try:
        fd = os.open(path, flags | _OPEN_FLAGS, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise not_regular(path, "a symlink") from None
        if exc.errno in (errno.EISDIR, errno.ENXIO):
            try:
                what = describe_mode(os.lstat(path).st_mode)
            except OSError:
                what = "not a regular file"
            raise not_regular(path, what) from None
        raise
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        raise
    if not stat_mod.S_ISREG(st.st_mode):
        os.close(fd)
        raise not_regular(path, describe_mode(st.st_mode))
    return fd, st


class CommitStepError(Exception):
    """An OS error during a commit, with the step it happened at."""

    def __init__(self, step: str, after_rename: bool, cause: OSError) -> None:
        super().__init__(f"{step}: {cause}")
        self.step = step
        self.after_rename = after_rename
        self.cause = cause


class MergeMarker(msgspec.Struct):
    """``MERGE``: a segment merge in progress (see ``ledger.storage.files.merge``)."""

    into: int
    sources: list[int] = msgspec.field(name="from")
    size: int


def read_merge_marker(wsdir: str) -> MergeMarker | None:
    path = os.path.join(wsdir, ffmt.MERGE_NAME)
    try:
        fd = open_regular(path)
    except (OSError, UnsafePath):
        return None
    try:
        data = os.read(fd, 1 << 16)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        return msgspec.json.decode(data, type=MergeMarker)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def list_segments(wsdir: str) -> list[int]:
    """Segment numbers present in ``wsdir``, ascending, without the copies
    that a merge interrupted after its rename left behind."""
    try:
        names = os.listdir(wsdir)
    except FileNotFoundError:
        return []
    return segments_in(wsdir, names)


def segments_in(wsdir: str, names: list[str]) -> list[int]:
    """The segment numbers among a listing of ``wsdir`` (see list_segments)."""
    # Every name of the listing through the memo in C (``map``, ``filter``):
    # a directory lists the same names append after append.
    known = _NUMBERS
    found = list(map(known.get, names))
    if None in found:
        if len(known) + len(names) > _NAMES_MAX:
            known.clear()
        for name in names:
            if name not in known:
                n = ffmt.segment_number(name) if name.startswith(ffmt.SEGMENT_PREFIX) else None
                known[name] = 0 if n is None else n  # 0: not a segment (numbers start at 1)
        found = list(map(known.get, names))
    numbers = sorted(filter(None, found))
    if ffmt.MERGE_NAME in names:
        marker = read_merge_marker(wsdir)
        if marker is not None:
            s = stamp(segment_path(wsdir, marker.into))
            if s is not None and s.size == marker.size:
                copies = set(marker.sources) - {marker.into}
                numbers = [n for n in numbers if n not in copies]
    return numbers


def segment_path(wsdir: str, number: int) -> str:
    return os.path.join(wsdir, ffmt.segment_name(number))


def stamp(path: str) -> ffmt.Stamp | None:
    try:
        return ffmt.Stamp.of(os.stat(path, follow_symlinks=False))
    except FileNotFoundError:
        return None


def stamps(
    wsdir: str, numbers: list[int], shared: list[int] | None = None
) -> list[tuple[int, ffmt.Stamp]]:
    """Stamps of the given segments (lstat: a symlink is never followed).
    Raises HistoryDamaged for an entry that is not a regular file. With
    ``shared``, the numbers of segments that have another link (a fork's,
    a hard-linked backup's) are appended to it.

    Every append and every page of a read stats every segment, so this is a
    hot loop: names are resolved against one directory descriptor, each
    segment's name is formatted once per process, and the stamp is built
    from the stat result without a Python-level constructor.
    """
    try:
        dfd = os.open(wsdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return [(n, ffmt.ZERO_STAMP) for n in numbers]
    out = []
    stat, isreg, names, make = os.stat, stat_mod.S_ISREG, _NAMES, tuple.__new__
    stamp_cls = ffmt.Stamp
    try:
        for n in numbers:
            name = names.get(n)
            if name is None:
                name = _name_of(n)
            try:
                st = stat(name, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                out.append((n, ffmt.ZERO_STAMP))
                continue
            if not isreg(st.st_mode):
                raise not_regular(segment_path(wsdir, n), describe_mode(st.st_mode))
            out.append((n, make(stamp_cls, (st.st_dev, st.st_ino, st.st_size,
                                            st.st_mtime_ns, st.st_ctime_ns))))
            if shared is not None and st.st_nlink > 1:
                shared.append(n)
    finally:
        os.close(dfd)
    return out


_NAMES: dict[int, str] = {}
_NUMBERS: dict[str, int] = {}  # name in a listing -> segment number, 0 if none (regex once)
_NAMES_MAX = 1 << 16


def _name_of(number: int) -> str:
    """``ffmt.segment_name``, remembered (segment numbers repeat on every append)."""
    name = ffmt.segment_name(number)
    if len(_NAMES) >= _NAMES_MAX:
        _NAMES.clear()
    _NAMES[number] = name
    return name


def stray_temps(wsdir: str) -> list[str]:
    try:
        return sorted(n for n in os.listdir(wsdir) if n.startswith(ffmt.TEMP_PREFIX))
    except FileNotFoundError:
        return []


def remove_stray_temps(wsdir: str, names: list[str] | None = None) -> int:
    """Remove temp files of dead writers; call only under the exclusive lock."""
    removed = 0
    temps = stray_temps(wsdir) if names is None else [
        n for n in names if n.startswith(ffmt.TEMP_PREFIX)
    ]
    for name in temps:
        try:
            os.unlink(os.path.join(wsdir, name))
            removed += 1
        except FileNotFoundError:
            pass
    return removed


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def commit_file(
    wsdir: str, target: str, chunks: Iterable[bytes], *, durability: str, new_file: bool
) -> ffmt.Stamp:
    """Atomically make ``wsdir/target`` hold exactly ``chunks`` (see module doc).
    Returns the stamp of the committed file (``fstat`` after the rename, which
    changes its ctime)."""
    # O_EXCL turns a clash of names into a failed open, never a shared file.
    tmp = os.path.join(wsdir, f"{ffmt.TEMP_PREFIX}{_PID[0]}-{unique_hex(12)}")
    step = "open temp file"
    try:
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
    except OSError as exc:
        raise CommitStepError(step, False, exc) from exc
    try:
        try:
            step = "write temp file"
            _write_all(fd, chunks)
            if durability != "off":
                step = "fsync temp file"
                os.fsync(fd)
        except OSError as exc:
            unlink_quietly(tmp, OSError)
            raise CommitStepError(step, False, exc) from exc
        try:
            os.rename(tmp, os.path.join(wsdir, target))
        except OSError as exc:
            unlink_quietly(tmp, OSError)
            raise CommitStepError("rename", True, exc) from exc
        try:
            st = os.fstat(fd)
            committed = _make_stamp(ffmt.Stamp, (st.st_dev, st.st_ino, st.st_size,
                                                 st.st_mtime_ns, st.st_ctime_ns))
        except OSError as exc:  # pragma: no cover - fstat of an open file
            raise CommitStepError("fstat", True, exc) from exc
    finally:
        os.close(fd)
    if durability == "full" or (durability == "normal" and new_file):
        try:
            fsync_dir(wsdir)
        except OSError as exc:
            raise CommitStepError("fsync directory", True, exc) from exc
    return committed


_WRITEV_MAX = 512  # buffers per call, well under IOV_MAX (1024 on Linux)
_make_stamp = tuple.__new__  # a Stamp from its five fields, without the Python-level __new__
# This process's id, for temp names (one system call fewer per commit).
_PID = [os.getpid()]
os.register_at_fork(after_in_child=lambda: _PID.__setitem__(0, os.getpid()))


def _write_all(fd: int, chunks: Iterable[bytes]) -> None:
    """Write every chunk, gathering small ones into one ``writev`` (a batch is
    one call) while holding at most about READ_CHUNK bytes at a time. A list
    of chunks (already held) goes to ``writev`` as it is when it fits one call."""
    if type(chunks) is list and len(chunks) <= _WRITEV_MAX:
        _writev_all(fd, chunks)
        return
    pending: list[bytes | memoryview] = []
    held = 0
    for chunk in chunks:
        if not chunk:
            continue
        pending.append(chunk)
        held += len(chunk)
        if held >= READ_CHUNK or len(pending) >= _WRITEV_MAX:
            _writev_all(fd, pending)
            pending, held = [], 0
    if pending:
        _writev_all(fd, pending)


def _writev_all(fd: int, bufs: list[bytes | memoryview]) -> None:
    while bufs:
        written = os.writev(fd, bufs)
        while bufs and written >= len(bufs[0]):
            written -= len(bufs[0])
            bufs = bufs[1:]
        if written:
            bufs = [memoryview(bufs[0])[written:], *bufs[1:]]


def unlink_quietly(path: str, ignore: type[OSError] = FileNotFoundError) -> None:
    """Remove ``path``; a file already gone is no error (with ``ignore=OSError``
    no failure is: best-effort cleanup)."""
    try:
        os.unlink(path)
    except ignore:
        pass


def read_file(path: str) -> bytes:
    """The whole file, by plain system calls (no buffered file object);
    UnsafePath when it is not a regular file."""
    fd, st = open_regular_stat(path)
    try:
        size = st.st_size
        data = os.read(fd, size + 1)
        if len(data) <= size:
            return data
        parts = [data]  # grew since the fstat: read on to the end
        while chunk := os.read(fd, READ_CHUNK):
            parts.append(chunk)
        return b"".join(parts)
    finally:
        os.close(fd)


@dataclass
class Line:
    offset: int
    data: bytes  # without the trailing newline
    complete: bool  # False for a last line with no newline (a torn tail)


def _runs(fd: int, start: int, chunk: int, known: int | None = None
          ) -> Iterator[tuple[int, bytes, int, bool]]:
    """(offset, buffer, end, complete): ``buffer[:end]`` is a run of whole
    lines read from file offset ``offset`` (``complete``), or the last bytes of
    the file, a line without a newline (not ``complete``). The buffer is not
    copied to cut it at ``end``: the next read starts at the cut instead (the
    few bytes after it are read twice), so no chunk is ever joined or copied;
    a line longer than the chunk is read again with twice the room.

    ``known``: the file's size as the caller's ``fstat`` saw it. A read that
    came back short, ending in a newline at or past that size, reached the
    end of the file: no read of nothing follows it (a syscall and a buffer
    of the chunk's size, never touched). A short read before it (a file
    system may return one) reads on, as without ``known``."""
    base = start
    size = chunk
    while True:
        buf = os.pread(fd, size, base)
        if not buf:
            return
        cut = buf.rfind(b"\n")
        if cut < 0:
            if len(buf) < size:  # the end of the file: a line without a newline
                yield base, buf, len(buf), False
                return
            size *= 2
            continue
        yield base, buf, cut + 1, True
        n = len(buf)
        del buf  # the chunk goes before the next read (memory: one chunk)
        if known is not None and cut + 1 == n < size and base + n >= known:
            return
        base += cut + 1
        size = chunk


def iter_runs_fd(fd: int, start: int = 0, chunk: int = READ_CHUNK, *,
                 known: int | None = None) -> Iterator[tuple[int, bytes, int, bool]]:
    """(offset, buffer, end, complete) runs of an open file from byte
    ``start``: ``buffer[:end]`` is whole lines ending in a newline
    (``complete``), or the last bytes of the file without one (a torn tail);
    ``buffer`` may hold more bytes after ``end``, which the next run starts
    with. For a caller that can work on the buffer without cutting it (no
    copy of the chunk); :func:`iter_chunks_fd` cuts it. ``known``: the size
    the caller's ``fstat`` of ``fd`` gave (see ``_runs``)."""
    return _runs(fd, start, chunk, known)


def iter_chunks_fd(fd: int, start: int = 0, chunk: int = READ_CHUNK
                   ) -> Iterator[tuple[int, bytes, bool]]:
    """(offset, bytes, complete) pieces of an open file from byte ``start``:
    runs of whole lines, each piece ending in a newline, then a last piece
    without one (a torn tail). A line longer than the chunk is read whole, so
    memory is bounded by the chunk size plus the longest line."""
    for base, buf, end, complete in _runs(fd, start, chunk):
        yield base, buf[:end] if end < len(buf) else buf, complete
        del buf  # not held while the next chunk is read


def iter_lines_fd(fd: int, start: int = 0, chunk: int = READ_CHUNK) -> Iterator[Line]:
    """Stream the lines of an open file from byte ``start``; memory is bounded
    by the chunk size plus the longest line."""
    for base, buf, end, _complete in _runs(fd, start, chunk):
        yield from _lines(buf, base, end)
        del buf  # not held while the next chunk is read


def iter_lines(path: str, start: int = 0) -> Iterator[Line]:
    fd = open_regular(path)
    try:
        yield from iter_lines_fd(fd, start)
    finally:
        os.close(fd)


def _lines(data: bytes, base: int, end: int) -> Iterator[Line]:
    begin = 0
    while True:
        nl = data.find(b"\n", begin, end)
        if nl < 0:
            break
        yield Line(base + begin, data[begin:nl], True)
        begin = nl + 1
    if begin < end:
        yield Line(base + begin, data[begin:end], False)


def split_lines(data: bytes, base: int = 0) -> list[Line]:
    """The lines of ``data`` (read from file offset ``base``); a last line
    without a newline is marked incomplete (a torn tail)."""
    return list(_lines(data, base, len(data)))
