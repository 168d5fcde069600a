"""Idempotent retries (batch_id) and conditional appends (expect_next_seq,
expect_window)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from core_helpers import AT_OR_AFTER_RENAME, Faults, check_log, dicts, msg, tree

from ledger import CommitUncertain, Store, WindowChanged
from ledger.core.errors import Conflict


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


def test_batch_ids_are_per_workspace(store_root: Path) -> None:
    store = Store(store_root, durability="off")
    a, b = store.history("a"), store.history("b")
    assert a.append(msg(), batch_id="same").seqs == [1]
    a.append(msg())
    assert b.append(msg(), batch_id="same").seqs == [1]
    assert len(dicts(b)) == 1


def test_batch_id_that_is_a_substring_of_another(store_root: Path) -> None:
    """The scan for a committed id must match ids, not bytes that contain them."""
    h = _h(store_root)
    h.append(msg("long"), batch_id="job-10")
    h.append(msg("text mentions job-1 and \"job-1\""))
    r = h.append(msg("short"), batch_id="job-1")
    assert r.seqs == [3]
    assert [d["batch"]["id"] for d in dicts(h)].count("job-1") == 1


def test_expect_next_seq(store_root: Path) -> None:
    h = _h(store_root)
    assert h.append(msg("a"), expect_next_seq=1).seqs == [1]
    before = tree(store_root)
    for wrong in (1, 3, 0, 100):
        with pytest.raises(Conflict) as info:
            h.append(msg("b"), expect_next_seq=wrong)
        assert not isinstance(info.value, WindowChanged)
        assert "2" in str(info.value)
    assert tree(store_root) == before
    assert h.append_many([msg("b"), msg("c")], expect_next_seq=2).seqs == [2, 3]
    assert h.clear_soft(expect_next_seq=4).seqs == [4]


def test_expect_window(store_root: Path) -> None:
    h = _h(store_root)
    r = h.append(msg("a"), expect_window=0)
    assert r.window == 0
    c = h.clear_soft()
    before = tree(store_root)
    with pytest.raises(WindowChanged):
        h.append(msg("stale"), expect_window=r.window)
    with pytest.raises(WindowChanged):
        h.rollover([msg("t")], expect_window=r.window)
    assert tree(store_root) == before
    assert h.append(msg("fresh"), expect_window=c.window).seqs == [3]
    ro = h.rollover([msg("t")], expect_window=c.window)
    assert ro.window == 4 != c.window
    with pytest.raises(WindowChanged):
        h.compact([msg("s")], expect_window=c.window)
    assert h.compact([msg("s")], expect_window=ro.window).window == 7


def test_idempotent_retry_wins_over_stale_conditions(store_root: Path) -> None:
    """A retry of a committed batch returns its result even though its
    conditions no longer hold (they held when it was committed)."""
    h = _h(store_root)
    r = h.append(msg("a"), batch_id="job", expect_next_seq=1, expect_window=0)
    h.clear_soft()
    again = h.append(msg("a"), batch_id="job", expect_next_seq=1, expect_window=0)
    assert again.seqs == r.seqs == [1]
    assert len(dicts(h)) == 2


@pytest.mark.parametrize("rows", [3, 40], ids=["3-big-rows", "40-rows"])
def test_retry_of_a_batch_bigger_than_the_idempotency_window(store_root: Path, rows: int) -> None:
    """A batch of more than 1 MiB (the window the retry looks in): the retry
    still returns every seq of the original, not just those in the window,
    and writes nothing."""
    h = _h(store_root)
    h.append(msg("before"))
    pad = "x" * ((3 << 20) // (2 * rows))  # about 1.5 MiB in all
    batch = [msg(f"{i} {pad}") for i in range(rows)]
    first = h.append_many(batch, batch_id="big-1")
    assert first.seqs == list(range(2, 2 + rows))
    before = tree(store_root / "ws")
    again = h.append_many(batch, batch_id="big-1")
    assert again.seqs == first.seqs
    assert tree(store_root / "ws") == before
    assert h.append(msg("next")).seqs == [2 + rows]
