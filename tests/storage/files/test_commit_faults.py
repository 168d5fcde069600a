"""Fault injection at every step of a commit, with ENOSPC and EIO.

The os functions the storage core calls are wrapped (``tests.helpers.Faults``):
the calls of one step fail while the append runs, everything else is real.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from ledger import CommitFailed, CommitUncertain, LedgerError, Store
from ledger.core.format import files as ffmt
from ledger.storage.files.receipt import receipt_status
from tests.helpers import (
    AT_OR_AFTER_RENAME,
    ERRNOS,
    PRE_RENAME,
    STABLE,
    Faults,
    check_log,
    dicts,
    file_bytes,
    msg,
    temps,
)


def _history(root: Path, segment_bytes: int = 1 << 16):
    h = Store(root, durability="full", segment_bytes=segment_bytes).history("ws")
    h.append_many([msg("one"), msg("two", role="assistant")])
    h.append_many([msg("three")])
    return h


def _batch(tag: str) -> list[dict]:
    return [msg(f"{tag} a"), msg(f"{tag} b", role="assistant"), msg(f"{tag} c")]


@pytest.mark.parametrize("segment_bytes", [1 << 16, 64], ids=["rewrite-active", "new-segment"])
@pytest.mark.parametrize("err", ERRNOS, ids=errno.errorcode.get)
@pytest.mark.parametrize("step", PRE_RENAME)
def test_fault_before_rename_is_commit_failed(
    store_root: Path, monkeypatch: pytest.MonkeyPatch, step: str, err: int, segment_bytes: int
) -> None:
    h = _history(store_root, segment_bytes)
    ws = store_root / "ws"
    before = file_bytes(ws, skip=(ffmt.RECEIPT_NAME,))
    receipt_before = (ws / ffmt.RECEIPT_NAME).read_bytes()
    epoch = h.epoch
    rows_before = dicts(h)
    faults = Faults(monkeypatch, step, err)
    with faults.armed_for(), pytest.raises(CommitFailed) as info:
        h.append_many(_batch("lost"), batch_id="b-lost")
    assert faults.fired, f"the fault at {step} never fired"
    assert info.value.batch_id == "b-lost"
    assert file_bytes(ws, skip=(ffmt.RECEIPT_NAME,)) == before
    assert temps(ws) == []
    assert dicts(h) == rows_before
    # Nothing changed, so the receipt still vouches for the history: same
    # epoch, still verified (cursors stay valid).
    snap = h.snapshot()
    assert snap.verified, f"receipt after CommitFailed at {step}: {receipt_status(str(ws))}"
    assert snap.epoch == epoch
    if step.startswith("pending_receipt") or step == "lock_open":
        assert (ws / ffmt.RECEIPT_NAME).read_bytes() == receipt_before
    r = h.append_many(_batch("next"))
    assert r.seqs == [4, 5, 6]
    check_log(dicts(h))


@pytest.mark.parametrize("err", ERRNOS, ids=errno.errorcode.get)
@pytest.mark.parametrize("step", AT_OR_AFTER_RENAME)
def test_fault_at_or_after_rename_is_commit_uncertain(
    store_root: Path, monkeypatch: pytest.MonkeyPatch, step: str, err: int
) -> None:
    h = _history(store_root)
    ws = store_root / "ws"
    rows_before = dicts(h)
    faults = Faults(monkeypatch, step, err)
    with faults.armed_for(), pytest.raises(CommitUncertain) as info:
        h.append_many(_batch("maybe"))
    assert faults.fired
    bid = info.value.batch_id
    assert isinstance(bid, str) and bid
    assert temps(ws) == []
    after = dicts(h)
    # The old rows, or the old rows and the whole batch; never part of it.
    assert after in (rows_before, rows_before + after[len(rows_before):])
    new = after[len(rows_before):]
    assert new == [] or ([r["batch"]["id"] for r in new] == [bid] * 3 and len(new) == 3)
    if step == "fsync_dir":
        assert len(new) == 3  # the rename happened: the batch is there
    assert not h.snapshot().verified  # the pending receipt is left in place
    r = h.append_many(_batch("next"))
    assert r.seqs[0] == len(after) + 1
    check_log(dicts(h))
    assert h.snapshot().verified


@pytest.mark.parametrize("err", ERRNOS, ids=errno.errorcode.get)
@pytest.mark.parametrize("step", STABLE)
def test_fault_in_stable_receipt_reports_success(
    store_root: Path, monkeypatch: pytest.MonkeyPatch, step: str, err: int
) -> None:
    h = _history(store_root)
    ws = store_root / "ws"
    epoch = h.epoch
    faults = Faults(monkeypatch, step, err)
    with faults.armed_for():
        r = h.append_many(_batch("kept"))
    assert faults.fired
    assert r.seqs == [4, 5, 6]
    assert [d["seq"] for d in dicts(h)] == [1, 2, 3, 4, 5, 6]
    assert receipt_status(str(ws)) == "pending"
    assert not h.snapshot().verified
    r2 = h.append_many(_batch("next"))
    assert r2.seqs == [7, 8, 9]
    assert r2.epoch != epoch  # re-baselined after the unpublished receipt
    assert h.snapshot().verified
    check_log(dicts(h))


@pytest.mark.parametrize(
    "step", ["open_temp", "write_temp", "fsync_temp", "rename", "fsync_dir", "lock_open",
             "pending_receipt_write"]
)
def test_fault_on_the_first_write_of_a_workspace(
    store_root: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    """The first write also commits FORMAT; a fault there is a LedgerError
    (CommitFailed or CommitUncertain), and the next write leaves a complete
    workspace: FORMAT, whole batches."""
    h = Store(store_root, durability="full").history("ws")
    faults = Faults(monkeypatch, step, errno.ENOSPC)
    with faults.armed_for(), pytest.raises(LedgerError) as info:
        h.append_many(_batch("first"))
    assert faults.fired
    assert isinstance(info.value, (CommitFailed, CommitUncertain)), type(info.value)
    r = h.append_many(_batch("second"))
    rows = dicts(h)
    check_log(rows)
    assert rows[-3:] == [d for d in rows if d["batch"]["id"] == r.batch_id]
    assert (store_root / "ws" / ffmt.FORMAT_NAME).read_bytes() == ffmt.FORMAT_TEXT
    assert temps(store_root / "ws") == []


def test_short_writes_are_continued(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A commit writes every byte even when the kernel takes a few at a time."""
    from ledger.storage.files import segments as segs

    real = os.writev

    def stingy(fd: int, buffers: list) -> int:
        return real(fd, [bytes(memoryview(buffers[0])[:5])])

    monkeypatch.setattr(os, "writev", stingy)
    chunks = [b"first line\n", b"", b"x" * 1000, "é, 漢字\n".encode()]
    segs.commit_file(str(tmp_path), "target", chunks, durability="off", new_file=True)
    assert (tmp_path / "target").read_bytes() == b"".join(chunks)
