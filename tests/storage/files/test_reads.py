"""Reads: read-only copies, no file created by a read, missing and invalid
workspaces, permissions, rows(after_seq) and get(seq) across many segments."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest

from ledger import InvalidWorkspace, Store, WorkspaceNotFound
from ledger.cli.core import stat_report
from tests.helpers import dicts, msg, segment_files, tree


def _filled(root: Path, segment_bytes: int = 1 << 16) -> Any:
    h = Store(root, durability="off", segment_bytes=segment_bytes).history("ws")
    h.append_many([msg("one"), msg("two", role="assistant")])
    h.clear_soft()
    h.append_many([msg("three"), msg("four", role="assistant")])
    h.rollover([msg("five")])
    h.append(msg("six", role="assistant"))
    return h


def _read_everything(h: Any) -> dict[str, Any]:
    return {
        "rows": dicts(h),
        "after": dicts(h, after_seq=3),
        "get": [h.get(s).to_dict() if h.get(s) else None for s in range(0, 12)],
        "view": [r.to_dict() for r in h.provider_view()],
        "epoch": h.epoch,
        "window": h.window,
        "snapshot": h.snapshot(),
        "stat": stat_report(h),
        "workspaces": h.store.workspaces(),
    }


def _chmod_tree(path: Path, writable: bool) -> None:
    for dirpath, dirnames, filenames in os.walk(path):
        for name in [*dirnames, *filenames]:
            p = os.path.join(dirpath, name)
            mode = os.lstat(p).st_mode
            os.chmod(p, (mode | stat.S_IWUSR) if writable else (mode & ~0o222))
    mode = os.lstat(path).st_mode
    os.chmod(path, (mode | stat.S_IWUSR) if writable else (mode & ~0o222))


@pytest.mark.parametrize("segment_bytes", [1 << 16, 200])
def test_read_only_copy_reads_the_same_and_creates_nothing(
    tmp_path: Path, segment_bytes: int
) -> None:
    src = tmp_path / "src"
    h = _filled(src, segment_bytes)
    original = _read_everything(h)
    copy = tmp_path / "copy"
    shutil.copytree(src, copy)
    _chmod_tree(copy, writable=False)
    try:
        before = tree(copy)
        hc = Store(copy).history("ws")
        got = _read_everything(hc)
        after = tree(copy)
    finally:
        _chmod_tree(copy, writable=True)
    assert after == before, "a read created, changed or touched a file"
    for key in ("rows", "after", "get", "view", "epoch", "window", "workspaces"):
        assert got[key] == original[key], key
    # A copy has other inodes: it reads fine but is not the verified original.
    assert got["rows"][-1]["parts"][0]["text"] == "six"


def test_reads_create_nothing_on_a_writable_store(store_root: Path) -> None:
    h = _filled(store_root)
    before = tree(store_root)
    _read_everything(h)
    assert tree(store_root) == before


def test_reads_without_a_lock_file(tmp_path: Path) -> None:
    """A copy that lost its LOCK (or never had one) still reads, and the read
    does not create LOCK."""
    src = tmp_path / "src"
    h = _filled(src)
    want = dicts(h)
    (src / "ws" / "LOCK").unlink()
    before = tree(src)
    assert dicts(h) == want and h.snapshot() is not None
    assert tree(src) == before


def test_missing_workspace_has_the_empty_snapshot_and_reading_creates_nothing(
    store_root: Path,
) -> None:
    # The same state on every engine (tests/contract/appends.py); here: not a
    # byte is created, not even a root that does not exist.
    Store(store_root, durability="off").history("other").append(msg())
    before = tree(store_root)
    fresh = store_root.parent / "no-root"
    for h in (Store(store_root).history("nosuch"), Store(fresh).history("nosuch")):
        snap = h.snapshot()
        assert (snap.next_seq, snap.epoch, snap.window, snap.floor) == (1, 0, None, None)
        assert (h.epoch, h.window, h.next_seq) == (0, 0, 1)
    assert tree(store_root) == before
    assert not fresh.exists()


@pytest.mark.parametrize(
    "read",
    [
        lambda h: list(h.rows()),
        lambda h: list(h.rows(after_seq=3)),
        stat_report,
    ],
    ids=["rows", "rows-after", "stat"],
)
def test_missing_workspace_is_workspace_not_found(store_root: Path, read: Any) -> None:
    store = Store(store_root)
    Store(store_root, durability="off").history("other").append(msg())
    before = tree(store_root)
    with pytest.raises(WorkspaceNotFound) as info:
        read(store.history("nosuch"))
    assert "nosuch" in str(info.value)
    assert tree(store_root) == before
    # And on a root that does not exist at all, nothing is created.
    fresh = store_root.parent / "no-root"
    with pytest.raises(WorkspaceNotFound):
        read(Store(fresh).history("nosuch"))
    assert not fresh.exists()
    assert Store(fresh).workspaces() == []
    assert not fresh.exists()


INVALID_IDS = ["", ".", "..", "../x", "a/b", "a\\b", "/abs", "a\x00b", "x" * 129, ".hidden",
               ".tledger", "a\nb", "a b", "ü", "a/../b", None, 5, b"ws"]


@pytest.mark.parametrize("ws", INVALID_IDS, ids=repr)
def test_invalid_workspace_id(store_root: Path, ws: Any) -> None:
    store = Store(store_root)
    with pytest.raises(InvalidWorkspace):
        store.history(ws).append(msg())
    assert not store_root.exists()
    assert not (store_root.parent / "x").exists() and not (store_root.parent / "b").exists()


def test_files_0600_and_dirs_0700(store_root: Path) -> None:
    old = os.umask(0o022)
    try:
        h = _filled(store_root, segment_bytes=200)
    finally:
        os.umask(old)
    ws = store_root / "ws"
    assert stat.S_IMODE(store_root.stat().st_mode) == 0o700
    assert stat.S_IMODE(ws.stat().st_mode) == 0o700
    names = sorted(os.listdir(ws))
    assert {"LOCK", "RECEIPT", "FORMAT"} <= set(names) and len(segment_files(ws)) > 1
    for name in names:
        mode = stat.S_IMODE((ws / name).stat().st_mode)
        want = 0o700 if (ws / name).is_dir() else 0o600
        assert mode == want, f"{name}: {oct(mode)}"
    assert h.workspace == "ws"




def _long_line_between(root: Path) -> Any:
    """One segment: 500 short rows, a 300 KB row, 700 short rows. Bisecting
    for a row of the tail probes inside the long line."""
    h = Store(root, durability="off", segment_bytes=8 << 20).history("ws")
    for b in range(10):
        h.append_many([msg(f"before {b} {i} needle") for i in range(50)])
    h.append(msg("x" * 300_000 + " needle"))
    for b in range(14):
        h.append_many([msg(f"after {b} {i} needle") for i in range(50)])
    assert len(segment_files(root / "ws")) == 1
    return h


def test_a_row_after_a_long_line_is_read_in_one_call(tmp_path: Path) -> None:
    # Bisection used to "look earlier" from inside the long line, and the scan from
    # where it ended ran out of rows before the tail's last ~250 rows: each came back
    # as an empty page with a cursor instead of the row.
    h = _long_line_between(tmp_path)
    tool = h.session_history()
    for seq in range(900, 1202):
        page = json.loads(tool.call({"action": "read", "seq": seq}))
        assert [item["seq"] for item in page["items"]] == [seq], (seq, page)
        assert page["cursor"] is None
