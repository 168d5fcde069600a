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

import os
import secrets
import stat as stat_mod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import msgspec

from ledger import format as fmt
from ledger.errors import HistoryDamaged

READ_CHUNK = 1 << 20
DURABILITY_LEVELS = ("full", "normal", "off")


class CommitStepError(Exception):
    """An OS error during a commit, with the step it happened at."""

    def __init__(self, step: str, after_rename: bool, cause: OSError) -> None:
        super().__init__(f"{step}: {cause}")
        self.step = step
        self.after_rename = after_rename
        self.cause = cause


class MergeMarker(msgspec.Struct):
    """``MERGE``: a segment merge in progress (see ``ledger.merge``)."""

    into: int
    sources: list[int] = msgspec.field(name="from")
    size: int


def read_merge_marker(wsdir: str) -> MergeMarker | None:
    path = os.path.join(wsdir, fmt.MERGE_NAME)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
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
    numbers = [n for n in map(fmt.segment_number, names) if n is not None]
    numbers.sort()
    if fmt.MERGE_NAME in names:
        marker = read_merge_marker(wsdir)
        if marker is not None:
            s = stamp(segment_path(wsdir, marker.into))
            if s is not None and s.size == marker.size:
                copies = set(marker.sources) - {marker.into}
                numbers = [n for n in numbers if n not in copies]
    return numbers


def segment_path(wsdir: str, number: int) -> str:
    return os.path.join(wsdir, fmt.segment_name(number))


def stamp(path: str) -> fmt.Stamp | None:
    try:
        return fmt.Stamp.of(os.stat(path, follow_symlinks=False))
    except FileNotFoundError:
        return None


def stamps(wsdir: str, numbers: list[int]) -> list[tuple[int, fmt.Stamp]]:
    """Stamps of the given segments (lstat: a symlink is never followed).
    Raises HistoryDamaged for an entry that is not a regular file."""
    out = []
    for n in numbers:
        path = segment_path(wsdir, n)
        try:
            st = os.stat(path, follow_symlinks=False)
        except FileNotFoundError:
            out.append((n, fmt.ZERO_STAMP))
            continue
        if not stat_mod.S_ISREG(st.st_mode):
            raise HistoryDamaged(
                f"{path} is not a regular file (a symlink, directory or device); move it "
                "away and run `tledger check`"
            )
        out.append((n, fmt.Stamp.of(st)))
    return out


def stray_temps(wsdir: str) -> list[str]:
    try:
        return sorted(n for n in os.listdir(wsdir) if n.startswith(fmt.TEMP_PREFIX))
    except FileNotFoundError:
        return []


def remove_stray_temps(wsdir: str, names: list[str] | None = None) -> int:
    """Remove temp files of dead writers; call only under the exclusive lock."""
    removed = 0
    temps = stray_temps(wsdir) if names is None else [
        n for n in names if n.startswith(fmt.TEMP_PREFIX)
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
) -> None:
    """Atomically make ``wsdir/target`` hold exactly ``chunks`` (see module doc)."""
    tmp = os.path.join(wsdir, f"{fmt.TEMP_PREFIX}{os.getpid()}-{secrets.token_hex(6)}")
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
            for chunk in chunks:
                view = memoryview(chunk)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
            if durability != "off":
                step = "fsync temp file"
                os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        _unlink_quietly(tmp)
        raise CommitStepError(step, False, exc) from exc
    try:
        os.rename(tmp, os.path.join(wsdir, target))
    except OSError as exc:
        _unlink_quietly(tmp)
        raise CommitStepError("rename", True, exc) from exc
    if durability == "full" or (durability == "normal" and new_file):
        try:
            fsync_dir(wsdir)
        except OSError as exc:
            raise CommitStepError("fsync directory", True, exc) from exc


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


@dataclass
class Line:
    offset: int
    data: bytes  # without the trailing newline
    complete: bool  # False for a last line with no newline (a torn tail)


def iter_lines_fd(fd: int, start: int = 0, chunk: int = READ_CHUNK) -> Iterator[Line]:
    """Stream the lines of an open file from byte ``start``; memory is bounded
    by the chunk size plus the longest line."""
    pos = start
    buf = b""
    buf_start = start
    while True:
        data = os.pread(fd, chunk, pos)
        if not data:
            break
        pos += len(data)
        buf = buf + data if buf else data
        begin = 0
        while True:
            nl = buf.find(b"\n", begin)
            if nl < 0:
                break
            yield Line(buf_start + begin, buf[begin:nl], True)
            begin = nl + 1
        buf = buf[begin:]
        buf_start += begin
    if buf:
        yield Line(buf_start, buf, False)


def iter_lines(path: str, start: int = 0) -> Iterator[Line]:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        yield from iter_lines_fd(fd, start)
    finally:
        os.close(fd)


def split_lines(data: bytes, base: int = 0) -> list[Line]:
    out = []
    begin = 0
    while True:
        nl = data.find(b"\n", begin)
        if nl < 0:
            break
        out.append(Line(base + begin, data[begin:nl], True))
        begin = nl + 1
    if begin < len(data):
        out.append(Line(base + begin, data[begin:], False))
    return out
