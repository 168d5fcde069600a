"""The INDEX projection that writers keep: the entry a writer records when it
seals a segment (from its own account of the appends) is exactly what a scan
of the segment's bytes computes, and a reader's incremental INDEX reads see
what every writer appended."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger import Store
from ledger.storage.files import segments as segs
from ledger.storage.files.index import BoundaryIndex, read_entries, scan_segment


def text(t: str) -> dict:
    return {"role": "user", "parts": [{"type": "text", "text": t}]}


def _grow(h, n: int) -> None:
    for i in range(n):
        if i % 7 == 3:
            h.clear_soft()
        elif i % 11 == 5:
            h.rollover([text(f"trigger {i}")])
        elif i % 13 == 8:
            h.compact([text(f"summary {i}")])
        else:
            h.append_many([text(f"row {i} " + "x" * (i % 90)) for _ in range(1 + i % 3)])


@pytest.mark.parametrize("merging", [True, False])
def test_sealed_entries_equal_a_scan_of_the_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, merging: bool
) -> None:
    if not merging:  # every entry is then one a writer recorded when sealing
        monkeypatch.setattr("ledger.storage.files.workspace.AUTO_MIN_SEALED", 1 << 30)
    h = Store(tmp_path, segment_bytes=900, durability="off").history("ws")
    _grow(h, 120)
    sealed = read_entries(h.engine.path).sealed
    st = h.snapshot()
    assert len(st.sealed) >= (4 if merging else 20)
    for number, stamp in st.sealed:
        assert number in sealed, f"segment {number} was sealed without an INDEX entry"
        assert sealed[number] == scan_segment(h.engine.path, number, stamp), number


def test_a_writer_that_did_not_see_the_appends_still_records_a_true_entry(
    tmp_path: Path,
) -> None:
    # Two writers take turns: neither has its own account of what the other
    # appended, so each must fall back to scanning before it seals.
    a = Store(tmp_path, segment_bytes=700, durability="off").history("ws")
    b = Store(tmp_path, segment_bytes=700, durability="off").history("ws")
    for i in range(60):
        (a if i % 3 else b).append_many([text(f"turn {i} " + "y" * (i % 50))])
        if i % 9 == 4:
            (b if i % 2 else a).clear_soft()
    sealed = read_entries(a.engine.path).sealed
    for number, stamp in a.snapshot().sealed:
        assert sealed[number] == scan_segment(a.engine.path, number, stamp)


def test_incremental_index_reads_pick_up_later_entries(tmp_path: Path) -> None:
    h = Store(tmp_path, segment_bytes=600, durability="off").history("ws")
    _grow(h, 30)
    reader = BoundaryIndex(h.engine.path)
    first = {n: reader.info(n, s) for n, s in h.snapshot().sealed}
    read_so_far = reader._index_read
    _grow(h, 40)
    st = h.snapshot()
    for n, s in st.sealed:
        assert reader.info(n, s) == scan_segment(h.engine.path, n, s)
    assert reader._index_read > read_so_far
    kept = [(n, s) for n, s in st.sealed if n in first and first[n].stamp == s]
    assert all(first[n] == reader.info(n, s) for n, s in kept)
    # A replaced INDEX (not just grown) is read again from the start.
    index = Path(h.engine.path) / "INDEX"
    data = index.read_bytes()
    index.unlink()
    index.write_bytes(data[: len(data) // 2])
    fresh = BoundaryIndex(h.engine.path)
    reader._load()
    for n, s in st.sealed:
        assert reader.info(n, s) == fresh.info(n, s) == scan_segment(h.engine.path, n, s)
    assert segs.list_segments(h.engine.path)


def _fresh_view(path: str) -> tuple:
    fresh = BoundaryIndex(path)
    fresh._load()
    return fresh._active, fresh._recorded, fresh._persisted, fresh._index_read


def test_a_writer_takes_in_its_own_index_lines_without_reading_them_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The lines an append writes when it seals a segment (its active entry
    # and the sealed segment's) are what a read of INDEX would give, so the
    # writer's view equals a fresh read's -- and INDEX is not read again
    # while no other process wrote to it.
    monkeypatch.setattr("ledger.storage.files.workspace.AUTO_MIN_SEALED", 1 << 30)
    h = Store(tmp_path, segment_bytes=900, durability="off").history("ws")
    _grow(h, 20)
    index = h.engine.index
    reads: list[int] = []
    real = read_entries
    monkeypatch.setattr("ledger.storage.files.index.read_entries",
                        lambda wsdir, start=0: reads.append(start) or real(wsdir, start))
    sealed_before = len(h.snapshot().sealed)
    _grow(h, 60)
    assert len(h.snapshot().sealed) > sealed_before + 5
    assert reads == []
    assert (index._active, index._recorded, index._persisted, index._index_read) == \
        _fresh_view(h.engine.path)
    for number, stamp in h.snapshot().sealed:
        assert index.info(number, stamp) == scan_segment(h.engine.path, number, stamp)


def test_a_writer_reads_the_index_lines_another_writer_added(tmp_path: Path) -> None:
    a = Store(tmp_path, segment_bytes=700, durability="off").history("ws")
    b = Store(tmp_path, segment_bytes=700, durability="off").history("ws")
    for i in range(80):
        (a if i % 4 else b).append_many([text(f"turn {i} " + "z" * (i % 60))])
        if i % 10 == 6:
            (b if i % 2 else a).clear_soft()
    path = a.engine.path
    for h in (a, b):
        h.engine.index._load()
        idx = h.engine.index
        active, recorded, persisted, end = _fresh_view(path)
        assert (idx._active, idx._recorded, idx._index_read) == (active, recorded, end)
        assert persisted <= idx._persisted
    sealed = read_entries(path).sealed
    for number, stamp in a.snapshot().sealed:
        assert sealed[number] == scan_segment(path, number, stamp)
