"""Hostile RECEIPT files: reads neither hang nor follow, the receipt does not
verify, and the next write re-baselines to a regular 256-byte RECEIPT."""

from __future__ import annotations

import os
import shutil
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ledger import Store
from ledger.cli.core import stat_report
from ledger.core.format import files as ffmt
from ledger.storage.files.receipt import read_receipt, receipt_status
from tests.helpers import dicts, msg


def _bounded(fn: Callable[[], Any], what: str, timeout: float = 20.0) -> Any:
    """Run ``fn`` in a thread; fail (instead of hanging the suite) if it blocks."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"{what} blocked for {timeout} s"
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _setup(root: Path):
    store = Store(root, durability="off")
    h = store.history("ws")
    h.append_many([msg("a"), msg("b")])
    h.clear_soft()
    h.append(msg("c"))
    other = store.history("other")
    other.append_many([msg("x"), msg("y")])
    other.append(msg("z"))
    return h, other


def _symlink_to_valid_copy(ws: Path, tmp: Path, other: Path) -> Path:
    # The target holds this workspace's own, valid receipt: only following
    # the link would make it verify.
    target = tmp / "elsewhere-RECEIPT"
    shutil.copyfile(ws / ffmt.RECEIPT_NAME, target)
    (ws / ffmt.RECEIPT_NAME).unlink()
    os.symlink(target, ws / ffmt.RECEIPT_NAME)
    return target


def _symlink_dangling(ws: Path, tmp: Path, other: Path) -> Path:
    (ws / ffmt.RECEIPT_NAME).unlink()
    os.symlink(tmp / "nowhere", ws / ffmt.RECEIPT_NAME)
    return tmp / "nowhere"


def _fifo(ws: Path, tmp: Path, other: Path) -> None:
    (ws / ffmt.RECEIPT_NAME).unlink()
    os.mkfifo(ws / ffmt.RECEIPT_NAME, 0o600)


def _sparse_1gib(ws: Path, tmp: Path, other: Path) -> None:
    with open(ws / ffmt.RECEIPT_NAME, "r+b") as f:  # a valid head, then 1 GiB of holes
        f.truncate(1 << 30)


def _sparse_new_file(ws: Path, tmp: Path, other: Path) -> None:
    (ws / ffmt.RECEIPT_NAME).unlink()
    with open(ws / ffmt.RECEIPT_NAME, "wb") as f:
        f.truncate(1 << 30)


def _random_bytes(ws: Path, tmp: Path, other: Path) -> None:
    (ws / ffmt.RECEIPT_NAME).write_bytes(os.urandom(ffmt.RECEIPT_SIZE))


def _truncated_copy(ws: Path, tmp: Path, other: Path) -> None:
    data = (ws / ffmt.RECEIPT_NAME).read_bytes()
    (ws / ffmt.RECEIPT_NAME).write_bytes(data[:200])


def _one_byte_longer(ws: Path, tmp: Path, other: Path) -> None:
    data = (ws / ffmt.RECEIPT_NAME).read_bytes()
    (ws / ffmt.RECEIPT_NAME).write_bytes(data + b"\x00")


def _bit_flip(ws: Path, tmp: Path, other: Path) -> None:
    data = bytearray((ws / ffmt.RECEIPT_NAME).read_bytes())
    data[24] ^= 0x04  # next_seq
    (ws / ffmt.RECEIPT_NAME).write_bytes(bytes(data))


def _from_other_workspace(ws: Path, tmp: Path, other: Path) -> None:
    shutil.copyfile(other / ffmt.RECEIPT_NAME, ws / ffmt.RECEIPT_NAME)


def _empty_directory(ws: Path, tmp: Path, other: Path) -> None:
    (ws / ffmt.RECEIPT_NAME).unlink()
    (ws / ffmt.RECEIPT_NAME).mkdir()


def _zero_length(ws: Path, tmp: Path, other: Path) -> None:
    (ws / ffmt.RECEIPT_NAME).write_bytes(b"")


ATTACKS = {
    "symlink-to-valid-copy": _symlink_to_valid_copy,
    "symlink-dangling": _symlink_dangling,
    "fifo": _fifo,
    "sparse-1gib": _sparse_1gib,
    "sparse-1gib-new-file": _sparse_new_file,
    "random-bytes": _random_bytes,
    "truncated-copy": _truncated_copy,
    "one-byte-longer": _one_byte_longer,
    "bit-flip": _bit_flip,
    "copy-from-other-workspace": _from_other_workspace,
    "empty-directory": _empty_directory,
    "zero-length": _zero_length,
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_hostile_receipt(store_root: Path, tmp_path: Path, attack: str) -> None:
    h, other = _setup(store_root)
    ws, ows = store_root / "ws", store_root / "other"
    epoch, other_epoch = h.epoch, other.epoch
    rows = dicts(h)
    target = ATTACKS[attack](ws, tmp_path, ows)
    target_state = None
    if isinstance(target, Path) and target.exists():
        target_state = (target.read_bytes(), target.stat().st_mtime_ns)

    snap = _bounded(h.snapshot, "snapshot()")
    assert snap.verified is False, f"{attack}: a hostile receipt verified"
    assert snap.next_seq == 5 and snap.floor is not None and snap.floor.seq == 3
    assert _bounded(lambda: dicts(h), "rows()") == rows
    assert _bounded(lambda: [r.seq for r in h.provider_view()], "provider_view()") == [4]
    report = _bounded(lambda: stat_report(h), "stat")
    assert report["receipt"]["stamps_match"] is False
    assert _bounded(lambda: read_receipt(str(ws)), "read_receipt") is None or attack in (
        "copy-from-other-workspace", "bit-flip")

    r = _bounded(lambda: h.append(msg("d")), "append")
    assert r.seqs == [5]
    assert r.epoch not in (epoch, other_epoch)
    st = os.lstat(ws / ffmt.RECEIPT_NAME)
    assert stat.S_ISREG(st.st_mode), f"{attack}: RECEIPT is not a regular file after the write"
    assert st.st_size == ffmt.RECEIPT_SIZE and st.st_blocks * 512 <= 64 * 1024
    assert receipt_status(str(ws)) == "stable"
    snap = h.snapshot()
    assert snap.verified and snap.epoch == r.epoch and snap.floor.seq == 3
    assert h.append(msg("e")).epoch == r.epoch
    if target_state is not None:
        assert (target.read_bytes(), target.stat().st_mtime_ns) == target_state, (
            "the symlink was followed: its target changed"
        )
    if attack == "symlink-dangling":
        assert not target.exists(), "the dangling symlink was followed and its target created"
    # The other workspace is untouched by all of this.
    assert other.snapshot().verified and other.epoch == other_epoch


def test_foreign_receipt_file_gets_mode_0600_back(store_root: Path) -> None:
    """Files are 0600 (DESIGN 4): a RECEIPT replaced by someone else's
    world-readable regular file is not kept world-readable by the re-baseline."""
    h, _ = _setup(store_root)
    path = store_root / "ws" / ffmt.RECEIPT_NAME
    path.unlink()
    path.write_bytes(os.urandom(ffmt.RECEIPT_SIZE))
    os.chmod(path, 0o644)
    h.append(msg("d"))
    assert h.snapshot().verified
    assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
