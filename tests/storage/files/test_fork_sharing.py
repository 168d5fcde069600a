"""A file-engine fork shares its source's segment files (hard links): what it
costs, and that no path of the engine writes a shared file in place -- every
rewrite, merge, repair and delete of either side leaves the other's bytes as
they were. The guard wraps ``os`` (the code path users run): opening an
existing segment file for writing, or truncating one, fails the test."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger import Store
from ledger.core.format import files as ffmt
from recovery.repair import repair
from tests.helpers import msg

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_TRUNC


@pytest.fixture
def guard(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Record every in-place write of an existing segment file."""
    seen: list[str] = []
    real_open, real_truncate, real_ftruncate = os.open, os.truncate, os.ftruncate
    fds: dict[int, str] = {}

    def is_segment(path: Any) -> bool:
        name = os.path.basename(os.fspath(path))
        return name.startswith(ffmt.SEGMENT_PREFIX) and name.endswith(ffmt.SEGMENT_SUFFIX)

    def open_(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if is_segment(path) and flags & WRITE_FLAGS and not flags & os.O_EXCL \
                and os.path.exists(path):
            seen.append(f"open for writing: {path}")
        fd = real_open(path, flags, *args, **kwargs)
        if is_segment(path):
            fds[fd] = os.fspath(path)
        return fd

    def truncate(path: Any, length: int) -> None:
        if is_segment(path):
            seen.append(f"truncate: {path}")
        real_truncate(path, length)

    def ftruncate(fd: int, length: int) -> None:
        if fd in fds:
            seen.append(f"ftruncate: {fds[fd]}")
        real_ftruncate(fd, length)

    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(os, "truncate", truncate)
    monkeypatch.setattr(os, "ftruncate", ftruncate)
    yield seen


def _segments(path: Path) -> dict[str, tuple[int, bytes]]:
    return {p.name: (p.stat().st_ino, p.read_bytes()) for p in sorted(path.iterdir())
            if p.name.startswith(ffmt.SEGMENT_PREFIX)}


def _grown(tmp_path: Path) -> Store:
    store = Store(tmp_path, durability="off", segment_bytes=600)
    h = store.history("src")
    h.append(msg("old secret"))
    h.clear_soft()
    for i in range(12):
        h.append_many([msg(f"q{i} " + "x" * 60), msg(f"a{i}", "assistant")])
    return store


def test_a_fork_links_what_it_can_and_copies_only_a_prefix(tmp_path: Path) -> None:
    store = _grown(tmp_path)
    src, fork_dir = tmp_path / "src", tmp_path / "fork"
    rows = list(store.history("src").rows())
    ends = {r.segment: r.seq for r in rows}  # the last seq of each segment
    at, seg = next((r.seq, r.segment) for r in rows if r.segment > 2
                   and r.batch["i"] == r.batch["n"] - 1 and r.seq != ends[r.segment])
    store.history("src").fork("fork", at=at)  # a batch end inside segment `seg`
    before, mine = _segments(src), _segments(fork_dir)
    shared = [n for n in mine if n in before and mine[n][0] == before[n][0]]
    assert shared == [ffmt.segment_name(n) for n in sorted(ends) if n < seg]  # linked
    assert all((fork_dir / n).stat().st_nlink == 2 for n in shared)
    own = [n for n in mine if n not in shared]
    assert own == [ffmt.segment_name(seg), ffmt.segment_name(seg + 1)]  # prefix, event
    # the prefix's INDEX entry, written by the fork, is what a scan of its bytes says
    from ledger.storage.files.index import read_entries, scan_segment
    recorded = read_entries(str(fork_dir)).sealed[seg]
    assert recorded == scan_segment(str(fork_dir), seg, recorded.stamp)
    assert mine[own[0]][1].startswith(before[own[0]][1][: mine[own[0]][1].index(b"\n") + 1])
    # the source's receipt was republished: same epoch, still verified
    assert store.history("src").engine.state().verified


OPS: dict[str, Callable[[Store, str], Any]] = {
    "purge": lambda s, ws: s.history(ws).purge_before_floor(),
    "truncate": lambda s, ws: s.history(ws).truncate_after(4),
    "reject": lambda s, ws: s.history(ws).reject(3),
    "rewind": lambda s, ws: s.history(ws).rewind(to=4),
    "merge": lambda s, ws: s.history(ws).engine.merge_segments(),
    "append": lambda s, ws: s.history(ws).append(msg("more")),
    "delete": lambda s, ws: s.delete(ws),
}


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("side", ["src", "fork"])
def test_no_path_writes_a_shared_file_in_place(tmp_path: Path, guard: list[str], op: str,
                                               side: str) -> None:
    store = _grown(tmp_path)
    store.history("src").fork("fork", at=20)
    other = "fork" if side == "src" else "src"
    kept = _segments(tmp_path / other)
    rows = [r.line for r in store.history(other).rows()]
    guard.clear()
    OPS[op](store, side)
    assert guard == []
    assert _segments(tmp_path / other) == kept  # same inodes, same bytes
    assert [r.line for r in store.history(other).rows()] == rows


@pytest.mark.parametrize("side", ["src", "fork"])
def test_repair_of_one_side_leaves_the_other_as_it_was(tmp_path: Path, guard: list[str],
                                                       side: str) -> None:
    """Damage written through one name of a shared file shows on both (the
    engine cannot prevent that); each side's repair rewrites its own name and
    leaves the other's bytes alone, and the other's repair then works."""
    store = _grown(tmp_path)
    store.history("src").fork("fork", at=20)
    seg = tmp_path / "src" / ffmt.segment_name(2)
    assert seg.stat().st_nlink == 2
    data = bytearray(seg.read_bytes())
    data[20] ^= 0x01
    with open(seg, "r+b") as f:  # the test's damage, in place, through the source's name
        f.write(data)
    other = "fork" if side == "src" else "src"
    kept = _segments(tmp_path / other)
    guard.clear()
    report = repair(store.history(side))
    assert report.consistent and guard == []
    assert _segments(tmp_path / other) == kept
    assert repair(store.history(other)).consistent
    for ws in ("src", "fork"):
        store.history(ws).append(msg("after repair"))
        assert store.history(ws).provider_view()[-1].parts[0]["text"] == "after repair"


def test_backup_and_migration_keep_the_origin(tmp_path: Path) -> None:
    import shutil

    store = _grown(tmp_path / "root")
    fork = store.history("src").fork("fork", at=10)
    origin = fork.origin
    assert origin is not None
    dest = tmp_path / "copy"
    fork.backup(str(dest))
    shutil.copytree(dest, tmp_path / "root" / "restored")
    assert store.history("restored").origin == origin.__class__(
        "restored", origin.source, origin.seq, origin.epoch, origin.created)
    mem = Store("memory://", durability="off")
    mem.history("src").append(msg("hello"))
    mem_fork = mem.history("src").fork("f")
    store.history("migrated").engine.load_rows(mem_fork.rows())
    got = store.history("migrated").origin
    assert got is not None and (got.source, got.seq) == ("src", 1)
