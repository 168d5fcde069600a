"""Sealed-segment merges: content, order, floors, windows and cursors survive;
an interrupted merge is invisible to readers and finished by the next writer."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ledger import Store
from ledger.core.format import files as ffmt
from ledger.storage.files import merge
from ledger.storage.files import segments as segs


def text(t: str) -> dict:
    return {"role": "user", "parts": [{"type": "text", "text": t}]}


@pytest.fixture
def no_auto_merge(monkeypatch: pytest.MonkeyPatch) -> None:
    """Appends leave every small segment in place, so a test can merge them."""
    monkeypatch.setattr("ledger.storage.files.workspace.AUTO_MIN_SEALED", 1 << 30)


def build(root: Path, n: int = 300) -> Store:
    store = Store(root, segment_bytes=256, durability="off")
    h = store.history("ws")
    for i in range(n):
        if i == n // 3:
            h.clear_soft()
        if i == 2 * n // 3:
            h.rollover([text("roll")])
        h.append(text(f"tok {i}"))
    return store


def seg_files(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "ws").iterdir() if p.name.startswith("seg-"))


def test_merge_keeps_rows_epoch_floor_and_window(tmp_path: Path, no_auto_merge: None) -> None:
    store = build(tmp_path)
    h = store.history("ws")
    before = [r.to_dict() for r in h.rows()]
    st0 = h.snapshot()
    files0 = seg_files(tmp_path)
    assert h.engine.merge_segments() >= 1
    st1 = h.snapshot()
    assert len(seg_files(tmp_path)) < len(files0) // 4
    assert [r.to_dict() for r in h.rows()] == before
    assert st1.verified and st1.epoch == st0.epoch
    assert st1.receipt is not None and st0.receipt is not None
    assert st1.receipt.layout == st0.receipt.layout + 1
    assert (st1.floor.seq, st1.window_seq, st1.next_seq) == (
        st0.floor.seq, st0.window_seq, st0.next_seq)
    assert [r.seq for r in h.provider_view()] == [
        r["seq"] for r in before if r["seq"] > st0.window_seq and r["kind"] != "reset"]
    # The merged positions really are where the boundaries are.
    data = (tmp_path / "ws" / ffmt.segment_name(st1.floor.segment)).read_bytes()
    line = data[st1.floor.offset: data.index(b"\n", st1.floor.offset)]
    assert json.loads(line)["seq"] == st1.floor.seq


def _follow(tool, args: dict, between=None) -> list[list]:
    """Every page of a query, followed by its cursor; ``between(k)`` runs
    before page k + 1 is asked for."""
    pages = []
    out = json.loads(tool.call(args))
    while True:
        assert "error" not in out, out
        pages.append(out["items"])
        if not out["cursor"]:
            return pages
        if between is not None:
            between(len(pages))
        out = json.loads(tool.call({**args, "cursor": out["cursor"]}))


def build_windows(root: Path) -> Store:
    """A floor, then many rollovers: many windows for ``list`` to page through."""
    store = build(root, 90)
    h = store.history("ws")
    for i in range(200):
        if i % 25 == 0:
            h.rollover([text(f"roll {i}")])
        h.append(text(f"tok more {i}"))
    return store


@pytest.mark.parametrize("args", [
    {"action": "search", "query": "tok", "limit": 7},
    {"action": "list", "limit": 1},
])
def test_a_cursor_is_carried_over_merges(
    tmp_path: Path, no_auto_merge: None, args: dict
) -> None:
    make = build if args["action"] == "search" else build_windows
    expected = _follow(make(tmp_path / "a").history("ws").session_history(), args)
    assert len(expected) >= 3
    h = make(tmp_path / "b").history("ws")
    layouts = []

    def merge_and_grow(k: int) -> None:
        if k % 2:
            h.append(text(f"tok late {k}"))  # after the query's end: never served
        assert h.engine.merge_segments() >= 0
        layouts.append(h.snapshot().receipt.layout)

    got = _follow(h.session_history(), args, merge_and_grow)
    assert got == expected
    assert layouts[-1] >= 1  # merges happened while the cursor was held


def test_a_cursor_expires_when_a_merge_record_is_missing(tmp_path: Path, no_auto_merge) -> None:
    store = build(tmp_path)
    h = store.history("ws")
    tool = h.session_history()
    first = json.loads(tool.call({"action": "search", "query": "tok", "limit": 5}))
    assert first["cursor"]
    h.engine.merge_segments()
    (tmp_path / "ws" / ffmt.INDEX_NAME).unlink()  # the projection, records included
    fresh_tool = Store(tmp_path).history("ws").session_history()
    again = json.loads(fresh_tool.call({"action": "search", "query": "tok", "limit": 5,
                                        "cursor": first["cursor"]}))
    assert again["error"]["code"] == "stale_cursor"
    fresh = json.loads(fresh_tool.call({"action": "search", "query": "tok", "limit": 5}))
    assert [i["seq"] for i in fresh["items"]] == [i["seq"] for i in first["items"]]
    read = json.loads(fresh_tool.call({"action": "read", "seq": st_seq(h)}))
    assert read["items"][0]["text"].startswith("tok")


def test_a_cursor_of_another_epoch_is_not_carried_over(tmp_path: Path, no_auto_merge) -> None:
    h = build(tmp_path).history("ws")
    tool = h.session_history()
    first = json.loads(tool.call({"action": "search", "query": "tok", "limit": 5}))
    h.engine.merge_segments()
    h.rebaseline()  # a new epoch: the merge records of the old one do not apply
    again = json.loads(tool.call({"action": "search", "query": "tok", "limit": 5,
                                  "cursor": first["cursor"]}))
    assert again["error"]["code"] == "stale_cursor"


def st_seq(h) -> int:
    return h.snapshot().floor.seq + 3


def test_appends_merge_on_their_own_and_keep_the_epoch(tmp_path: Path) -> None:
    store = Store(tmp_path, segment_bytes=128, durability="off")
    h = store.history("ws")
    epochs = {h.append(text(f"row {i}")).epoch for i in range(merge.AUTO_MIN_SEALED * 3)}
    assert len(epochs) == 1
    # 48 one-row segments without merging; tiered merges keep fewer than
    # FANOUT per size class, and a history this small has two classes.
    assert len(seg_files(tmp_path)) <= 2 * merge.FANOUT
    assert [r.seq for r in h.rows()] == list(range(1, merge.AUTO_MIN_SEALED * 3 + 1))


@pytest.mark.parametrize("stage", ["marker", "renamed", "one_unlinked"])
def test_interrupted_merge_is_invisible_and_settled(
    tmp_path: Path, stage: str, no_auto_merge: None
) -> None:
    store = build(tmp_path, 120)
    h = store.history("ws")
    before = [r.to_dict() for r in h.rows()]
    st = h.snapshot()
    run = merge.plan(st.sealed, store.segment_bytes)
    assert run
    wsdir = str(tmp_path / "ws")
    total = sum(dict(st.sealed)[n].size for n in run)
    marker = {"into": run[0], "from": run, "size": total}
    (tmp_path / "ws" / ffmt.MERGE_NAME).write_text(json.dumps(marker))
    if stage != "marker":
        blob = b"".join((tmp_path / "ws" / ffmt.segment_name(n)).read_bytes() for n in run)
        (tmp_path / "ws" / ffmt.segment_name(run[0])).write_bytes(blob)
    if stage == "one_unlinked":
        os.unlink(segs.segment_path(wsdir, run[1]))
    # A reader sees the same rows, once each, before any writer settles.
    assert [r.to_dict() for r in h.rows()] == before
    h.append(text("after"))
    assert not (tmp_path / "ws" / ffmt.MERGE_NAME).exists()
    assert [r.to_dict() for r in h.rows()][:-1] == before
    if stage != "marker":
        assert all(not os.path.exists(segs.segment_path(wsdir, n)) for n in run[1:])


def test_plan_is_tiered() -> None:
    stamp = lambda size: ffmt.Stamp(0, 0, size, 0, 0)  # noqa: E731
    small = [(i, stamp(300)) for i in range(1, 15)]
    assert merge.plan(small, 256) is None  # 14 of a class: not yet
    full = [(i, stamp(300)) for i in range(1, 17)]
    assert merge.plan(full, 256) == list(range(1, 17))
    big_then_small = [(1, stamp(300 * 16)), *[(i, stamp(300)) for i in range(2, 18)]]
    assert merge.plan(big_then_small, 256) == list(range(2, 18))


def test_plan_does_not_stall_behind_a_capped_merge() -> None:
    """Segments overshoot the cap by up to a batch, so a capped merge of the
    next class takes FANOUT - 1 of them and its product stays just below that
    class's limit. The next run of the class must still merge (it was refused
    for good: the file count then grew with the history, and every append
    stats every segment)."""
    stamp = lambda size: ffmt.Stamp(0, 0, size, 0, 0)  # noqa: E731
    cap, max_bytes = 256, 256 * merge.FANOUT ** 2
    one_class_up = 256 * merge.FANOUT + 40  # a level-1 merge's product, 1% over its class
    capped = (merge.FANOUT - 1) * one_class_up  # what a capped level-2 merge makes
    assert capped < max_bytes < merge.FANOUT * one_class_up
    sealed = [(1, stamp(capped)),
              *[(i, stamp(one_class_up)) for i in range(2, 2 + merge.FANOUT)]]
    assert merge.plan(sealed, cap, max_bytes) == list(range(2, 1 + merge.FANOUT))
    # Fewer than FANOUT behind it: nothing is due yet.
    assert merge.plan(sealed[:-1], cap, max_bytes) is None


def test_plan_does_not_stall_behind_a_merge_that_overshoots_more() -> None:
    """The sizes a Store-grown history had (64 KiB cap, 16 MiB automatic
    limit): level-1 segments of about 1.15 MiB, so a capped level-2 merge
    made 13 of them (14.95 MiB), under the ``full`` bound but unable to take
    one more. Behind it the next FANOUT of the class merge."""
    stamp = lambda size: ffmt.Stamp(0, 0, size, 0, 0)  # noqa: E731
    cap, max_bytes = 64 << 10, merge.AUTO_MAX_MERGE_BYTES
    level1 = int(1.15 * (1 << 20))
    capped = 13 * level1
    assert capped + level1 > max_bytes
    sealed = [(1, stamp(capped)), *[(i, stamp(level1)) for i in range(2, 2 + merge.FANOUT)]]
    got = merge.plan(sealed, cap, max_bytes)
    assert got is not None and got[0] == 2 and len(got) == 13  # 13 fit in 16 MiB
    assert merge.plan(sealed[: merge.FANOUT], cap, max_bytes) is None  # 15 behind: not yet


def test_a_streaming_read_survives_a_merge_under_it(tmp_path: Path, no_auto_merge) -> None:
    """rows() lists segments under the lock and reads them outside it; a merge
    that moves rows meanwhile (the next segment vanishes, or the merged one
    holds rows already yielded) costs a new listing, never a row twice or a
    lost row."""
    store = build(tmp_path)
    h = store.history("ws")
    expected = [r.seq for r in h.rows()]
    assert len(seg_files(tmp_path)) > merge.FANOUT
    for taken in (1, 40, 150):  # before, inside and after the first merged run
        stream = h.rows()
        seen = [next(stream).seq for _ in range(taken)]
        assert h.engine.merge_segments() >= 1
        seen += [r.seq for r in stream]
        assert seen == expected, taken
        store = build(tmp_path / f"again-{taken}")
        h = store.history("ws")


def test_a_streaming_read_refuses_to_cross_a_rewrite(tmp_path: Path, no_auto_merge) -> None:
    from ledger import HistoryDamaged

    h = build(tmp_path).history("ws")
    stream = h.rows()
    next(stream)
    h.engine.merge_segments()  # rows move: the stream must list again...
    h.truncate_after(250)  # ...and finds a new epoch: its rows changed
    with pytest.raises(HistoryDamaged, match="read again"):
        list(stream)
