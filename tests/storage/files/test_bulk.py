"""The bulk loader: sealed segments written directly under the lock."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import Store
from ledger.core.errors import CommitFailed, InvalidRow, LedgerError
from ledger.core.format import files as ffmt
from ledger.core.format import rows as fmt
from ledger.storage.files import segments as segs
from ledger.storage.files.bulk import Batch, bulk_load
from ledger.storage.files.index import read_entries, scan_segment
from ledger.transcript.history import History


def bulk_row(i: int, size: int = 40, role: str = "user") -> dict[str, Any]:
    """Row ``i`` with a fixed id and ts, so two loads compare byte for byte."""
    return {
        "id": f"r_{i}",
        "kind": "message",
        "role": role,
        "parts": [{"type": "text", "text": f"row {i} " + "x" * size}],
        "ts": 1_700_000_000_000 + i,
        "extra": {"k": i},
    }


def rollover(i: int) -> list[dict[str, Any]]:
    return [
        {"kind": "reset", "role": "system", "parts": [], "reset": {"reason": "rollover"}},
        {"kind": "lead_in", "role": "system", "parts": [{"type": "text", "text": f"w{i}"}]},
        bulk_row(i),
    ]


def manual_reset() -> list[dict[str, Any]]:
    return [{"kind": "reset", "role": "system", "parts": [], "reset": {"reason": "manual"}}]


def all_bytes(h: History) -> bytes:
    path = h.engine.path
    return b"".join(
        Path(segs.segment_path(path, n)).read_bytes() for n in segs.list_segments(path)
    )


def derived_state(h: History) -> Any:
    """The state rebuilt from the segments alone (receipt ignored)."""
    os.unlink(os.path.join(h.engine.path, ffmt.RECEIPT_NAME))
    h._derived = {}
    return h.engine.state()


def snapshot_files(path: str) -> dict[str, bytes]:
    return {n: Path(path, n).read_bytes() for n in sorted(os.listdir(path)) if n != ffmt.LOCK_NAME}


@pytest.fixture
def store(store_root: Path) -> Store:
    return Store(store_root, durability="off")


def test_rows_read_back_equal_and_state_verified(store: Store) -> None:
    h = store.history("ws")
    batches = [[bulk_row(3 * b + j) for j in range(3)] for b in range(50)]
    res = bulk_load(h, batches, segment_target_bytes=2000)
    assert (res.first_seq, res.next_seq, res.rows, res.batches) == (1, 151, 150, 50)
    assert len(res.segments) > 3
    got = [r.to_dict() for r in h.rows()]
    assert [r["seq"] for r in got] == list(range(1, 151))
    for b, batch in enumerate(batches):
        for j, row in enumerate(batch):
            out = got[3 * b + j]
            assert {k: out[k] for k in row} == row
            assert out["batch"]["n"] == 3 and out["batch"]["i"] == j
    st = h.snapshot()
    assert st.verified and st.epoch == res.epoch and st.next_seq == 151
    assert st.segments == res.segments


def test_same_bytes_as_append_many(store_root: Path) -> None:
    batches = [Batch([bulk_row(2 * b), bulk_row(2 * b + 1, role="assistant")], f"b_{b}")
               for b in range(20)]
    a = Store(store_root / "a", durability="off").history("ws")
    for batch in batches:
        a.append_many(batch.rows, batch_id=batch.batch_id)
    b = Store(store_root / "b", durability="off").history("ws")
    bulk_load(b, batches, segment_target_bytes=700)
    # prepare_batch stamps ts only on rows without one; every row here has one.
    assert all_bytes(a) == all_bytes(b)


def test_batches_never_span_segments(store: Store) -> None:
    h = store.history("ws")
    batches = [[bulk_row(i, size=10 + 37 * (i % 7)) for _ in range(1 + i % 4)] for i in range(40)]
    batches.append([bulk_row(99, size=5000)])  # bigger than the target: a segment of its own
    res = bulk_load(h, batches, segment_target_bytes=1500)
    for number in res.segments:
        lines = list(segs.iter_lines(segs.segment_path(h.engine.path, number)))
        rows = [fmt.decode_line(line.data) for line in lines]
        assert all(r is not None for r in rows)
        assert rows[0]["batch"]["i"] == 0
        assert rows[-1]["batch"]["i"] == rows[-1]["batch"]["n"] - 1
        size = os.path.getsize(segs.segment_path(h.engine.path, number))
        assert size <= 1500 or len({r["batch"]["id"] for r in rows}) == 1


def test_append_after_bulk_keeps_epoch(store: Store) -> None:
    h = store.history("ws")
    res = bulk_load(h, [[bulk_row(i)] for i in range(10)])
    r = h.append(bulk_row(100))
    assert r.seqs == [11]
    assert r.epoch == res.epoch
    r2 = h.append_many([bulk_row(101), bulk_row(102)])
    assert r2.seqs == [12, 13] and r2.epoch == res.epoch
    assert [row.seq for row in h.rows()] == list(range(1, 14))
    assert h.snapshot().verified


def test_bulk_after_appends_continues_and_seals(store: Store) -> None:
    h = store.history("ws")
    first = h.append_many([bulk_row(0), bulk_row(1)])
    before = segs.list_segments(h.engine.path)
    res = bulk_load(h, [[bulk_row(2)], [bulk_row(3)]])
    assert res.first_seq == 3 and res.next_seq == 5
    assert res.epoch != first.epoch
    assert res.segments == [before[-1] + 1]
    assert [row.seq for row in h.rows()] == [1, 2, 3, 4]
    st = h.snapshot()
    assert st.verified and st.sealed[-1][0] == before[-1]
    assert h.append(bulk_row(4)).seqs == [5]


def test_boundaries_and_floors_match_a_scan(store: Store) -> None:
    h = store.history("ws")
    batches: list[list[dict[str, Any]]] = [[bulk_row(i)] for i in range(5)]
    batches += [manual_reset(), [bulk_row(10)], rollover(11), [bulk_row(12), bulk_row(13)],
                rollover(14)]
    batches += [[bulk_row(20 + i)] for i in range(5)]
    res = bulk_load(h, batches, segment_target_bytes=600, internal=True)
    st = h.snapshot()
    # seqs: rows 1-5, manual reset 6, row 7, rollover 8-10, rows 11-12, rollover reset 13.
    assert st.floor is not None and st.floor.seq == 6
    assert st.window is not None and st.window.seq == 13 and res.window == 13
    derived = derived_state(h)
    assert not derived.verified
    for got, want in ((st.window, derived.window), (st.floor, derived.floor)):
        assert got is not None and want is not None
        assert (got.seq, got.segment, got.offset) == (want.seq, want.segment, want.offset)
    assert derived.next_seq == st.next_seq


def test_provider_view_after_bulk_rollover(store: Store) -> None:
    h = store.history("ws")
    batches = [[bulk_row(i)] for i in range(30)] + [rollover(1)]
    bulk_load(h, [*batches, [bulk_row(50), bulk_row(51)]], segment_target_bytes=800,
              internal=True)
    view = [r.to_dict() for r in h.provider_view()]
    assert [r["kind"] for r in view] == ["lead_in", "message", "message", "message"]
    assert [r["id"] for r in view[1:]] == ["r_1", "r_50", "r_51"]


def test_manual_reset_only_as_first_row_or_floor(store: Store) -> None:
    """A rollover without its lead-in counts as manual: a floor (fail closed)."""
    h = store.history("ws")
    bad = [{"kind": "reset", "role": "system", "parts": [], "reset": {"reason": "rollover"}},
           bulk_row(1)]
    bulk_load(h, [[bulk_row(0)], bad], internal=True)
    st = h.snapshot()
    assert st.floor is not None and st.floor.seq == 2


def test_resets_refused_without_internal(store: Store) -> None:
    h = store.history("ws")
    h.append(bulk_row(0))
    before = snapshot_files(h.engine.path)
    with pytest.raises(InvalidRow, match="bulk batch 1"):
        bulk_load(h, [[bulk_row(1)], manual_reset()])
    assert snapshot_files(h.engine.path) == before
    assert h.snapshot().verified


def test_bad_row_midway_leaves_history_unchanged(store: Store) -> None:
    h = store.history("ws")
    r = h.append(bulk_row(0))
    before = snapshot_files(h.engine.path)

    def gen() -> Iterator[list[dict[str, Any]]]:
        for i in range(200):
            yield [bulk_row(i, size=100)]
        yield [{"kind": "message", "role": "nobody", "parts": []}]

    with pytest.raises(InvalidRow, match="bulk batch 200"):
        bulk_load(h, gen(), segment_target_bytes=1000)
    assert snapshot_files(h.engine.path) == before
    st = h.snapshot()
    assert st.verified and st.epoch == r.epoch
    assert h.append(bulk_row(1)).seqs == [2]


def test_iterator_error_rolls_back(store: Store) -> None:
    h = store.history("ws")
    h.append(bulk_row(0))
    before = snapshot_files(h.engine.path)

    class Boom(Exception):
        pass

    def gen() -> Iterator[list[dict[str, Any]]]:
        for i in range(50):
            yield [bulk_row(i, size=200)]
        raise Boom

    with pytest.raises(Boom):
        bulk_load(h, gen(), segment_target_bytes=1000)
    assert snapshot_files(h.engine.path) == before


def test_commit_failure_is_commit_failed(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    h = store.history("ws")
    h.append(bulk_row(0))
    before = snapshot_files(h.engine.path)
    real = segs.commit_file
    calls = {"n": 0}

    def flaky(*args: Any, **kwargs: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 3:
            raise segs.CommitStepError("fsync temp file", False, OSError(5, "EIO"))
        real(*args, **kwargs)

    monkeypatch.setattr(segs, "commit_file", flaky)
    with pytest.raises(CommitFailed, match="fsync temp file"):
        bulk_load(h, [[bulk_row(i, size=300)] for i in range(20)], segment_target_bytes=800)
    monkeypatch.setattr(segs, "commit_file", real)
    assert snapshot_files(h.engine.path) == before
    assert h.snapshot().verified


def test_empty_input_touches_nothing(store_root: Path) -> None:
    h = Store(store_root).history("ws")
    res = bulk_load(h, [])
    assert res.rows == 0 and res.first_seq == res.next_seq == 1
    assert not store_root.exists()


def test_bad_arguments(store: Store) -> None:
    h = store.history("ws")
    with pytest.raises(LedgerError):
        bulk_load(h, [[bulk_row(0)]], durability="sometimes")
    with pytest.raises(LedgerError):
        bulk_load(h, [[bulk_row(0)]], segment_target_bytes=0)
    assert not h.exists()


@settings(max_examples=25)
@given(
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=25),
    target=st.integers(100, 3000),
    pre=st.integers(0, 3),
)
def test_property_layout(tmp_path_factory: pytest.TempPathFactory, sizes: list[int], target: int,
                         pre: int) -> None:
    h = Store(tmp_path_factory.mktemp("s"), durability="off").history("ws")
    for i in range(pre):
        h.append(bulk_row(1000 + i))
    batches = [
        [bulk_row(10 * b + j, size=(b * 31) % 400) for j in range(n)] for b, n in enumerate(sizes)
    ]
    res = bulk_load(h, batches, segment_target_bytes=target)
    rows = [r.to_dict() for r in h.rows()]
    assert [r["seq"] for r in rows] == list(range(1, pre + sum(sizes) + 1))
    assert [r["id"] for r in rows[pre:]] == [row["id"] for b in batches for row in b]
    st = h.snapshot()
    assert st.verified and st.next_seq == res.next_seq == pre + sum(sizes) + 1
    assert h.append(bulk_row(5000)).epoch == res.epoch


def test_index_entries_match_a_scan(store: Store) -> None:
    h = store.history("ws")
    h.append_many([bulk_row(0), bulk_row(1)])
    batches: list[list[dict[str, Any]]] = [[bulk_row(i)] for i in range(2, 12)]
    batches += [manual_reset(), rollover(20), [bulk_row(30)], rollover(31)]
    bulk_load(h, batches, segment_target_bytes=500, internal=True)
    entries = read_entries(h.engine.path).sealed
    numbers = segs.list_segments(h.engine.path)
    assert sorted(entries) == numbers
    for number in numbers:
        stamp = segs.stamp(segs.segment_path(h.engine.path, number))
        assert stamp is not None
        assert entries[number] == scan_segment(h.engine.path, number, stamp)


def test_fresh_workspace_gets_format(store: Store) -> None:
    h = store.history("ws")
    bulk_load(h, [[bulk_row(0)]])
    assert Path(h.engine.path, ffmt.FORMAT_NAME).read_bytes() == ffmt.FORMAT_TEXT


def test_many_small_segments_merge_after_bulk(store_root: Path) -> None:
    """A bulk load that leaves many segments is merged by later appends (or
    merge_segments) without changing a row."""
    h = Store(store_root, durability="off", segment_bytes=128).history("ws")
    res = bulk_load(h, [[bulk_row(i)] for i in range(300)], segment_target_bytes=1)
    assert len(res.segments) == 300
    before = [r.to_dict() for r in h.rows()]
    h.append(bulk_row(300))
    h.engine.merge_segments()
    assert len(segs.list_segments(h.engine.path)) < 300
    after = [r.to_dict() for r in h.rows()]
    assert after[:-1] == before and after[-1]["seq"] == 301
    assert h.snapshot().verified
