"""Regressions found in review: each test reproduces a defect that was fixed."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ledger import CommitFailed, Store
from ledger.core.format import files as ffmt
from ledger.core.format import rows as fmt
from ledger.storage.files import segments as segs


def text(t: str) -> dict:
    return {"role": "user", "parts": [{"type": "text", "text": t}]}


def _many_segments(root: Path, n: int) -> Store:
    store = Store(root, segment_bytes=200, durability="off")
    h = store.history("ws")
    for i in range(n):
        h.append(text(f"row {i}"))
    return store


def test_failed_auto_merge_does_not_fail_the_append(tmp_path: Path, monkeypatch) -> None:
    store = _many_segments(tmp_path, 60)
    h = store.history("ws")
    real_writev = os.writev

    def writev(fd: int, buffers) -> int:
        if sum(len(b) for b in buffers) > 4096:  # the merge's copy, not a batch
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_writev(fd, buffers)

    monkeypatch.setattr(os, "writev", writev)
    results = [h.append(text(f"more {i}")) for i in range(30)]
    monkeypatch.undo()
    assert all(r.seqs for r in results)
    seqs = [r.seq for r in h.rows()]
    assert seqs == list(range(1, 91))
    h.append(text("next"))  # the next writer settles whatever the merge left
    assert not (tmp_path / "ws" / ffmt.MERGE_NAME).exists()
    assert [r.seq for r in h.rows()] == list(range(1, 92))


def test_merge_never_glues_a_torn_tail(tmp_path: Path) -> None:
    store = Store(tmp_path, segment_bytes=200, durability="off")
    h = store.history("ws")
    h.append(text("first"))
    with open(segs.segment_path(str(tmp_path / "ws"), 1), "ab") as f:
        f.write(b'{"seq":99,"torn')  # an untracked, torn tail
    for i in range(40):
        h.append(text(f"row {i}"))
    h.engine.merge_segments()
    readable = []
    for n in segs.list_segments(str(tmp_path / "ws")):
        for line in segs.iter_lines(segs.segment_path(str(tmp_path / "ws"), n)):
            row = fmt.decode_line(line.data) if line.complete else None
            if row is not None:
                readable.append(row["seq"])
    assert readable == list(range(1, 42))


def test_cli_history_on_a_missing_workspace_exits_1(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ledger", "--root", str(tmp_path), "history", "nosuch", "list"],
        capture_output=True, text=True,
    )
    assert proc.returncode == 1
    assert "nosuch" in proc.stderr


def test_batch_id_lookup_reads_only_the_tail(tmp_path: Path, monkeypatch) -> None:
    store = Store(tmp_path, segment_bytes=1 << 20, durability="off")
    h = store.history("ws")
    big = "x" * 4000
    for _ in range(8):
        h.append_many([text(big)] * 100)  # ~3 MiB
    read = []
    real = os.pread

    def pread(fd: int, n: int, off: int) -> bytes:
        data = real(fd, n, off)
        read.append(len(data))
        return data

    monkeypatch.setattr(os, "pread", pread)
    r = h.append(text("new"), batch_id="fresh-id")
    assert sum(read) <= (1 << 20) + 64 * 1024
    again = h.append(text("new"), batch_id="fresh-id")
    assert again.seqs == r.seqs


def test_stable_receipt_failure_after_commit_is_not_an_error(tmp_path: Path) -> None:
    h = Store(tmp_path, durability="off").history("ws")
    h.append(text("a"))
    assert h.snapshot().verified
    with pytest.raises(CommitFailed):
        # A tombstoned workspace refuses writes without touching the log.
        (tmp_path / ".ws.deleting").write_text("")
        h.append(text("b"))
    os.unlink(tmp_path / ".ws.deleting")
    assert [r.seq for r in h.rows()] == [1]
