"""The append-receipt protocol: pending -> mutate -> stable, and epochs.

An epoch survives verified appends (this process or another) and changes on
any other mutation; clear/rollover/compact are appends, so they keep the
epoch and move the window marker.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
from pathlib import Path

import pytest

from ledger import CommitFailed, Store
from ledger.core.format import files as ffmt
from ledger.storage.files.receipt import read_receipt, receipt_status
from tests.helpers import PYTHON, WRITER, Faults, dicts, file_bytes, msg, subprocess_env


def _h(root: Path, **kw):
    return Store(root, durability=kw.pop("durability", "off"), **kw).history("ws")


def test_first_write_gets_an_epoch_and_a_stable_receipt(store_root: Path) -> None:
    h = _h(store_root)
    r = h.append(msg())
    assert r.epoch != 0 and r.window == 0 and r.seqs == [1]
    rec = read_receipt(str(store_root / "ws"))
    assert rec is not None and rec.stable and rec.epoch == r.epoch and rec.next_seq == 2
    assert (store_root / "ws" / ffmt.RECEIPT_NAME).stat().st_size == ffmt.RECEIPT_SIZE
    snap = h.snapshot()
    assert snap.verified and snap.epoch == r.epoch and snap.next_seq == 2


@pytest.mark.parametrize("step", ["pending_receipt_write", "pending_receipt_open"])
@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EIO, errno.EMFILE], ids=errno.errorcode.get)
def test_pending_publish_fails_nothing_changes(
    store_root: Path, monkeypatch: pytest.MonkeyPatch, step: str, err: int
) -> None:
    h = _h(store_root, durability="full")
    h.append_many([msg("a"), msg("b")])
    ws = store_root / "ws"
    before = file_bytes(ws)
    epoch, window = h.epoch, h.window
    faults = Faults(monkeypatch, step, err)
    with faults.armed_for(), pytest.raises(CommitFailed):
        h.append(msg("never"))
    assert faults.fired
    assert file_bytes(ws) == before  # receipt included
    snap = h.snapshot()
    assert snap.verified and snap.epoch == epoch and h.window == window
    assert h.append(msg("c")).epoch == epoch  # still a verified append


@pytest.mark.parametrize("step", ["stable_receipt_write"])
def test_stable_publish_fails_success_and_pending(
    store_root: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    h = _h(store_root, durability="full")
    first = h.append(msg("a"))
    faults = Faults(monkeypatch, step, errno.EIO)
    with faults.armed_for():
        r = h.append(msg("b"))
    assert faults.fired
    assert r.seqs == [2] and r.epoch == first.epoch  # the append itself was verified
    assert [d["seq"] for d in dicts(h)] == [1, 2]
    rec = read_receipt(str(store_root / "ws"))
    assert rec is not None and not rec.stable, receipt_status(str(store_root / "ws"))
    assert rec.epoch == first.epoch
    assert h.snapshot().verified is False
    r3 = h.append(msg("c"))
    assert r3.seqs == [3] and r3.epoch != first.epoch
    assert h.snapshot().verified and h.epoch == r3.epoch


def test_tracked_appends_keep_the_epoch_across_segments(store_root: Path) -> None:
    h = _h(store_root, segment_bytes=300)
    epoch = h.append(msg("first")).epoch
    for k in range(30):
        r = h.append_many([msg(f"row {k} " + "y" * (k * 13 % 150))] * (1 + k % 3))
        assert r.epoch == epoch, f"append {k} changed the epoch"
        assert h.epoch == epoch and h.snapshot().verified
    assert len(h.snapshot().segments) > 5


def test_appends_from_another_process_keep_the_epoch(store_root: Path) -> None:
    h = _h(store_root)
    epoch = h.append(msg("mine")).epoch
    for _ in range(2):
        p = subprocess.run([PYTHON, WRITER, "append1", str(store_root), "ws"],
                           capture_output=True, text=True, env=subprocess_env(), timeout=60)
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout)["epoch"] == epoch
        assert h.epoch == epoch and h.snapshot().verified
    assert h.append(msg("mine again")).epoch == epoch
    assert [d["seq"] for d in dicts(h)] == [1, 2, 3, 4]


def test_clear_rollover_compact_keep_epoch_and_move_window(store_root: Path) -> None:
    h = _h(store_root)
    epoch = h.append_many([msg("a"), msg("b")]).epoch
    assert h.window == 0

    r = h.clear_soft()
    assert r.epoch == epoch and r.window == r.seqs[0] == 3 and h.window == 3
    assert h.snapshot().floor is not None and h.snapshot().floor.seq == 3

    h.append(msg("c"))
    r = h.rollover([msg("trigger")])
    assert len(r.seqs) == 3 and r.epoch == epoch
    assert r.window == r.seqs[0] == h.window == 5
    assert h.snapshot().floor.seq == 3  # a rollover is not a privacy floor

    r = h.compact([msg("summary", role="assistant")])
    assert r.epoch == epoch and r.window == r.seqs[0] == h.window == 8
    assert h.epoch == epoch and h.snapshot().verified

    rows = dicts(h)
    assert [d["kind"] for d in rows] == ["message", "message", "reset", "message", "reset",
                                         "lead_in", "message", "reset", "message"]
    assert rows[4]["reset"] == {"reason": "rollover"} and rows[7]["reset"] == {
        "reason": "compaction"}
    view = [d.to_dict()["seq"] for d in h.provider_view()]
    assert view == [9]


def test_window_marker_survives_a_rebaseline(store_root: Path) -> None:
    """After an untracked change the state is derived from the log: window
    and floor come out the same as the receipt had them."""
    h = _h(store_root, segment_bytes=250)
    h.append(msg("a"))
    h.clear_soft()
    for k in range(6):
        h.append(msg(f"m{k}"))
    h.rollover([msg("t")])
    for k in range(6):
        h.append(msg(f"n{k}"))
    snap = h.snapshot()
    assert snap.verified
    window, floor = snap.window_seq, snap.floor
    seg = sorted((store_root / "ws").glob("seg-*.jsonl"))[-1]
    st = seg.stat()
    os.utime(seg, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    derived = h.snapshot()
    assert not derived.verified
    assert derived.window_seq == window
    assert (derived.floor.seq, derived.floor.segment, derived.floor.offset) == (
        floor.seq, floor.segment, floor.offset)
    r = h.append(msg("after"))
    assert r.window == window and r.epoch != snap.epoch


def test_untracked_change_gets_a_new_epoch_on_next_write(store_root: Path) -> None:
    h = _h(store_root)
    epoch = h.append(msg("a")).epoch
    seg = store_root / "ws" / "seg-00000001.jsonl"
    with open(seg, "ab") as f:
        f.write(seg.read_bytes())  # a whole valid line, written behind the store's back
    assert not h.snapshot().verified
    assert h.epoch == epoch  # unchanged until the next write re-baselines
    r = h.append(msg("b"))
    assert r.epoch != epoch and h.epoch == r.epoch and h.snapshot().verified
    # The high-water mark never goes back: the copied line's seq 1 is not reused.
    assert r.seqs == [2]
    r2 = h.append(msg("c"))
    assert r2.epoch == r.epoch


def test_rebaseline_after_a_lost_receipt(store_root: Path) -> None:
    h = _h(store_root)
    epoch = h.append_many([msg("a"), msg("b")]).epoch
    (store_root / "ws" / ffmt.RECEIPT_NAME).unlink()
    snap = h.snapshot()
    assert not snap.verified and snap.next_seq == 3
    r = h.append(msg("c"))
    assert r.seqs == [3] and r.epoch != epoch
    assert h.snapshot().verified
