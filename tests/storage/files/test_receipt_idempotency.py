"""Idempotent retries (batch_id) on the file engine: after CommitUncertain at
every step at or after the rename, and a retry that touches no file.
Conditional appends and retries of any batch size on every engine are in the
contract (tests/contract/appends.py)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from ledger import CommitUncertain, Store
from tests.helpers import AT_OR_AFTER_RENAME, Faults, check_log, dicts, msg, tree


def _h(root: Path, **kw):
    return Store(root, durability=kw.pop("durability", "off"), **kw).history("ws")


def _batch(tag: str) -> list[dict]:
    return [msg(f"{tag} 1"), msg(f"{tag} 2", role="assistant"), msg(f"{tag} 3")]


@pytest.mark.parametrize("segment_bytes", [1 << 16, 64], ids=["rewrite-active", "new-segment"])
@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EIO], ids=errno.errorcode.get)
@pytest.mark.parametrize("step", AT_OR_AFTER_RENAME)
def test_retry_after_commit_uncertain_lands_exactly_once(
    store_root: Path, monkeypatch: pytest.MonkeyPatch, step: str, err: int, segment_bytes: int
) -> None:
    h = _h(store_root, durability="full", segment_bytes=segment_bytes)
    h.append_many(_batch("before"))
    faults = Faults(monkeypatch, step, err)
    with faults.armed_for(), pytest.raises(CommitUncertain) as info:
        h.append_many(_batch("retry"), batch_id="job-42")
    assert faults.fired and info.value.batch_id == "job-42"
    r = h.append_many(_batch("retry"), batch_id="job-42")
    again = h.append_many(_batch("retry"), batch_id="job-42")
    assert again.seqs == r.seqs == [4, 5, 6]
    rows = dicts(h)
    batches = check_log(rows)
    assert batches["job-42"] == [4, 5, 6]
    assert [d["batch"]["id"] for d in rows].count("job-42") == 3
    assert h.append(msg("next")).seqs == [7]


def test_retry_without_batch_id_after_uncertain_uses_the_generated_one(
    store_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = _h(store_root, durability="full")
    h.append(msg("before"))
    faults = Faults(monkeypatch, "fsync_dir", errno.EIO)
    with faults.armed_for(), pytest.raises(CommitUncertain) as info:
        h.append_many(_batch("gen"))
    bid = info.value.batch_id
    r = h.append_many(_batch("gen"), batch_id=bid)
    assert r.seqs == [2, 3, 4]
    assert [d["batch"]["id"] for d in dicts(h)].count(bid) == 3


@pytest.mark.parametrize("segment_bytes", [1 << 16, 200])
def test_retrying_a_committed_batch_returns_original_and_writes_nothing(
    store_root: Path, segment_bytes: int
) -> None:
    h = _h(store_root, segment_bytes=segment_bytes)
    first = h.append_many(_batch("a"), batch_id="job-1")
    for k in range(8):
        h.append_many(_batch(f"filler {k}"))
    before = tree(store_root)
    retry = h.append_many(_batch("different content"), batch_id="job-1")
    assert retry.seqs == first.seqs == [1, 2, 3]
    assert retry.epoch == first.epoch and retry.batch_id == "job-1"
    assert tree(store_root) == before, "an idempotent retry wrote something"
    one = h.append(msg("single"), batch_id="job-single")
    assert h.append(msg("other"), batch_id="job-single").seqs == one.seqs


