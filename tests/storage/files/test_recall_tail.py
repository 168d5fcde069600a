"""The recall index's unindexed tail (``ledger.storage.files.recall_tail``):
rows appended after the index's mark are read into the searching process and
scored with the index's rows, then folded into the index.

- after every small batch (messages, windows, tool calls, the tool's own
  echo), a ranked search answers exactly what an index built whole from the
  log answers, scores and snippets included, before and after folds;
- a privacy floor after rows the tail held: none of them is ever a result,
  and the scores are those of a history that never had them;
- another process folding or rebuilding the index meanwhile: the tail is
  read again, nothing counted twice;
- a log that lost rows the tail held (a crash at durability off): never a
  result.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from ledger import Store
from ledger.core.format import files as ffmt
from ledger.storage.files import recall, recall_tail
from tests.helpers import msg
from tests.helpers.recall import rebuilt

QUERIES = ("bluebird deploy", "heron cache otter", '"bluebird launch" fine', "kubectl svc",
           "trip pasta", "session history deploy")


def history(root: Path, name: str = "w") -> Any:
    return Store(str(root), durability="off").history(name)


def answer(tool: Any, query: str, **kw: Any) -> dict[str, Any]:
    out = json.loads(tool.call({"action": "search", "query": query, "mode": "ranked",
                                "current": True, "limit": 25, **kw}))
    assert "error" not in out, out
    return {"items": out["items"], "skipped": out["skipped"]}


def answers(tool: Any) -> list[dict[str, Any]]:
    return [answer(tool, q) for q in QUERIES]


def fresh_answers(root: Path, scratch: Path) -> list[dict[str, Any]]:
    """What an index built whole from the log answers: the workspace copied
    without its index, searched by a new store."""
    with rebuilt(root, scratch, history) as tool:
        return answers(tool)


def indexed_upto(root: Path) -> int:
    """The last seq the index's database holds (its tail not included)."""
    db = sqlite3.connect(root / "w" / ffmt.RECALL_NAME)
    try:
        return int(db.execute("SELECT v FROM meta WHERE k = 'upto'").fetchone()[0])
    finally:
        db.close()


def batches() -> list[Any]:
    """Small batches of every kind a tail reads, as callables on a history."""
    call = {"kind": "message", "role": "assistant", "parts": [
        {"type": "tool_call", "id": "c1", "name": "shell",
         "input": {"cmd": "kubectl get svc bluebird"}}]}
    result = {"kind": "message", "role": "tool", "parts": [
        {"type": "tool_result", "id": "c1", "output": "heron 8443/TCP 3d"}]}
    echo_call = {"kind": "message", "role": "assistant", "parts": [
        {"type": "tool_call", "id": "c2", "name": "session_history",
         "input": {"action": "search", "query": "bluebird deploy"}}]}
    echo = {"kind": "message", "role": "tool", "parts": [
        {"type": "tool_result", "id": "c2", "output": "bluebird deploy heron cache"}]}
    return [
        lambda h: h.append_many([msg("bluebird deploy rollback"), msg("cache warm", "assistant")]),
        lambda h: h.append(msg("the otter swims; the heron waits", "assistant")),
        lambda h: h.rollover([msg("bluebird launch went fine")]),
        lambda h: h.append_many([call, result]),
        lambda h: h.append_many([msg("deploy heron cache"), msg("a trip to Lisbon")]),
        lambda h: h.append_many([echo_call, echo]),
        lambda h: h.append(msg("bluebird heron otter deploy cache " * 3)),
        lambda h: h.compact([msg("summary: the bluebird deploy and the heron cache")]),
        lambda h: h.append_many([msg("pasta tonight", "assistant"), msg("otter facts")]),
        lambda h: h.append(msg("kubectl rollout undo deploy/bluebird")),
    ]


def test_the_tail_answers_as_a_fresh_index_before_and_after_folds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recall_tail, "FOLD_ROWS", 5)
    root = tmp_path / "root"
    h = history(root)
    h.append_many([msg("Can you help me plan a trip?"), msg("Sure: three days.", "assistant")])
    tool = h.session_history()
    answers(tool)  # builds the index
    built = indexed_upto(root)
    tail_seen = folds = 0
    for i, add in enumerate(batches() * 2):
        add(h)
        got = answers(tool)
        assert got == fresh_answers(root, tmp_path / f"fresh{i}"), i
        upto = indexed_upto(root)
        last = h.next_seq - 1
        tail_seen += upto < last
        folds += upto > built
        built = upto
        window = json.loads(tool.call({"action": "list"}))["items"][-1]["window"]
        assert answer(tool, "bluebird heron", window=window) == answer(
            history(tmp_path / f"fresh{i}").session_history(), "bluebird heron", window=window)
    assert tail_seen >= 10 and folds >= 3  # both paths ran, many times


def test_a_floor_after_the_tail_hides_its_rows_and_their_statistics(tmp_path: Path) -> None:
    after = ["bluebird deploy notes", "the heron cache is warm", "rollback of the bluebird"]

    def fill(h: Any, before: list[str]) -> Any:
        h.append_many([msg("Can you help me plan a trip?"), msg("Sure.", "assistant")])
        tool = h.session_history()
        answers(tool)  # the index is built here; what follows goes to the tail
        h.append_many([msg(t) for t in before])
        seen = answer(tool, "bluebird")["items"]
        h.clear_soft()
        h.append_many([msg(t) for t in after])
        return tool, seen

    loud = [f"bluebird deploy rollback {'bluebird ' * i}heron {i}" for i in range(6)]
    a, seen_a = fill(history(tmp_path, "a"), loud)
    b, seen_b = fill(history(tmp_path, "b"), ["pasta"] * 6)
    assert len(seen_a) >= 6 and not seen_b  # the loud rows were found from the tail
    assert answers(a) == answers(b)
    for res in answers(a):
        assert all(item["seq"] > 9 for item in res["items"])


def test_another_process_folding_or_rebuilding_meanwhile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recall_tail, "FOLD_ROWS", 4)
    root = tmp_path / "root"
    h = history(root)
    h.append_many([msg("Can you help me plan a trip?"), msg("Sure.", "assistant")])
    mine = h.session_history()
    answers(mine)
    adds = batches()
    adds[0](h)
    answers(mine)  # two rows in my tail
    other = history(root).session_history()  # another reader, its own index handle
    for add in adds[1:4]:
        add(h)
    answers(other)  # its tail filled and folded: the index moved past my tail's base
    assert indexed_upto(root) == h.next_seq - 1
    assert answers(mine) == fresh_answers(root, tmp_path / "fresh1")
    adds[4](h)
    answers(mine)
    other.reader._recall.close()
    for name in os.listdir(root / "w"):  # deleted behind my back: rebuilt by the next search
        if name.startswith(ffmt.RECALL_NAME):
            os.unlink(root / "w" / name)
    assert answers(history(root).session_history()) == fresh_answers(root, tmp_path / "f2")
    adds[5](h)
    assert answers(mine) == fresh_answers(root, tmp_path / "fresh3")


def test_rows_the_log_lost_are_never_served_from_the_tail(tmp_path: Path) -> None:
    """A crash at durability off can lose the log's last batch while this
    process holds it in its tail: that row is never a result."""
    h = history(tmp_path)
    h.append_many([msg("alpha one"), msg("alpha two")])
    tool = h.session_history()
    assert answer(tool, "alpha")["items"]  # the index holds rows 1 and 2
    wsdir = tmp_path / "w"
    saved = tmp_path / "saved"
    shutil.copytree(wsdir, saved)
    h.append(msg("zebra lost in the crash"))
    assert [i["seq"] for i in answer(tool, "zebra")["items"]] == [3, 2]
    assert indexed_upto(tmp_path) == 2  # row 3 is in the tail only
    for name in os.listdir(saved):  # the log goes back; the index and the tail stay
        if not name.startswith(ffmt.RECALL_NAME):
            shutil.copy2(saved / name, wsdir / name)
    h2 = history(tmp_path)
    assert answer(tool, "zebra")["items"] == []
    h2.append(msg("a yak at seq three"))
    assert [i["seq"] for i in answer(tool, "yak")["items"]] == [3, 2]
    assert answer(tool, "zebra")["items"] == []


def verified(root: Path) -> None:
    """The index's database passes ``recall.verify``: every term's document
    frequency is its number of postings, every row's pairs are its postings."""
    db = sqlite3.connect(root / "w" / ffmt.RECALL_NAME)
    try:
        recall.verify(db)
    finally:
        db.close()


def test_folds_by_two_handles_and_after_a_rebuild_keep_every_count(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fold takes the terms its connection's last fold wrote from memory
    only while no other connection wrote: folds alternating between two
    handles, and a fold after its own handle rebuilt the index (a new
    floor), each leave the counts a fresh index has."""
    monkeypatch.setattr(recall_tail, "FOLD_ROWS", 3)
    root = tmp_path / "root"
    h = history(root)
    h.append_many([msg("Can you help me plan a trip?"), msg("Sure.", "assistant")])
    one, two = h.session_history(), history(root).session_history()
    answers(one)
    adds = batches() * 2
    folds = 0
    for i, add in enumerate(adds):
        add(h)
        before = indexed_upto(root)
        got = answers(one if (i // 2) % 2 == 0 else two)
        folds += indexed_upto(root) > before
        verified(root)
        assert got == fresh_answers(root, tmp_path / f"fresh{i}"), i
    assert folds >= 5
    # One handle only: a fold, a new floor (the index built again from it on
    # this handle, its term ids given anew), then folds again.
    for add in adds[:4]:
        add(h)
        answers(one)
    h.clear_soft()
    h.append_many([msg("bluebird deploy after the floor"), msg("heron cache", "assistant")])
    answers(one)
    for k, add in enumerate(adds[:8]):
        add(h)
        assert answers(one) == fresh_answers(root, tmp_path / f"floor{k}"), k
        verified(root)


def tables(wsdir: Path) -> dict[str, list[Any]]:
    """What the index's database holds of the rows: every table but its
    mark and its segments' ends (which say where and how far it read); the
    entries with the place of each row's line (moved with the merges)."""
    db = sqlite3.connect(wsdir / ffmt.RECALL_NAME)
    try:
        return {t: sorted(db.execute(f"SELECT * FROM {t}").fetchall())
                for t in ("docs", "post", "df", "echo", "wins")}
    finally:
        db.close()


def test_folds_and_catch_ups_write_what_a_build_from_the_log_writes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Term ids (given in the order the rows name the terms), document
    frequencies, postings, entries, windows and echo entries: the tail
    folded, and rows caught up in SQLite a few at a time (more than the tail
    takes, chunks committed between), leave the database what an index
    built whole from the log holds, table by table."""
    monkeypatch.setattr(recall_tail, "FOLD_ROWS", 3)
    root = tmp_path / "root"
    h = history(root)
    h.append_many([msg("Can you help me plan a trip?"), msg("Sure: three days.", "assistant")])
    tool = h.session_history()
    answers(tool)
    folded = in_sqlite = 0
    for i, add in enumerate(batches() * 4):
        add(h)
        with monkeypatch.context() as m:
            if i % 4 == 3:  # all of it in SQLite: 2 rows a batch, chunks of 8 postings
                m.setattr(recall, "FOLD_BYTES", 0)
                m.setattr(recall, "BATCH_ROWS", 2)
                m.setattr(recall, "CHUNK_POSTINGS", 8)
                in_sqlite += 1
            answers(tool)
        if indexed_upto(root) == h.next_seq - 1:
            fresh_answers(root, tmp_path / f"fresh{i}")
            assert tables(root / "w") == tables(tmp_path / f"fresh{i}" / "w"), i
            folded += i % 4 != 3
    assert folded >= 4 and in_sqlite >= 10


def test_after_a_merge_the_rows_past_the_mark_are_read_into_the_tail(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A merge moves rows to other segments: the index's mark is found again
    by its row's seq and saved where that row is now, and the rows after it
    are read into the tail, not written to the database; every answer is a
    fresh index's, and the tail's later folds write what a build writes."""
    from ledger.storage.files.ports import unwrap

    monkeypatch.setattr(recall_tail, "FOLD_ROWS", 7)
    root = tmp_path / "root"
    h = Store(str(root), durability="off", segment_bytes=150).history("w")
    h.append(msg("Can you help me plan a trip?"))
    tool = h.session_history()
    answers(tool)
    words = ["bluebird deploy", "heron cache", "otter", "kubectl svc", "trip pasta"]
    layout = unwrap(h).state().receipt.layout
    merges = kept = folds = 0
    for i in range(48):
        h.append(msg(f"turn {i}: {words[i % 5]} {words[(i * 3) % 5]} " + "~" * 100))
        upto = indexed_upto(root)
        got = answers(tool)
        fresh = fresh_answers(root, tmp_path / f"fresh{i}")
        assert got == fresh, i
        verified(root)
        now = unwrap(h).state().receipt.layout
        if now != layout:
            merges += 1
            db = sqlite3.connect(root / "w" / ffmt.RECALL_NAME)
            saved = db.execute("SELECT v FROM meta WHERE k = 'layout'").fetchone()[0]
            db.close()
            assert saved == str(now), i  # the mark names the merged segments
            kept += indexed_upto(root) == upto  # nothing written but the mark
            layout = now
        if indexed_upto(root) == h.next_seq - 1 and indexed_upto(root) > upto:
            folds += 1
            assert tables(root / "w") == tables(tmp_path / f"fresh{i}" / "w"), i
    assert merges >= 3 and kept >= 2 and folds >= 3


def _resume_reads(monkeypatch: pytest.MonkeyPatch) -> dict[int, int]:
    """Lines of each segment the index reads while it finds its row again
    after a merge (``RecallIndex._resume``), counted through the real reads."""
    from ledger.storage.files import segments

    read: dict[int, int] = {}
    inside = [False]
    real_lines, real_resume = segments.iter_lines, recall.RecallIndex._resume

    def iter_lines(path: str, *args: Any, **kw: Any) -> Any:
        for line in real_lines(path, *args, **kw):
            if inside[0]:
                number = ffmt.segment_number(os.path.basename(path))
                read[number] = read.get(number, 0) + 1
            yield line

    def resume(self: Any, *args: Any) -> Any:
        inside[0] = True
        try:
            return real_resume(self, *args)
        finally:
            inside[0] = False

    monkeypatch.setattr(segments, "iter_lines", iter_lines)
    monkeypatch.setattr(recall.RecallIndex, "_resume", resume)
    return read


def test_after_a_merge_the_segments_it_left_alone_are_not_read_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The index finds its row again after a merge without reading the
    segments the merge did not touch (their files the same, each segs entry
    holding the count of lines up to its line): only the merged segments and
    those after them are read, and every answer is a fresh index's."""
    from ledger.storage.files.ports import unwrap

    monkeypatch.setattr(recall_tail, "FOLD_ROWS", 7)
    read = _resume_reads(monkeypatch)
    root = tmp_path / "root"
    h = Store(str(root), durability="off", segment_bytes=150).history("w")
    h.append(msg("Can you help me plan a trip?"))
    tool = h.session_history()
    answers(tool)
    words = ["bluebird deploy", "heron cache", "otter", "kubectl svc", "trip pasta"]

    def stamps() -> dict[int, Any]:
        st = unwrap(h).state()
        return dict(st.sealed)

    before, layout = stamps(), unwrap(h).state().receipt.layout
    merges = skipped = 0
    for i in range(64):
        h.append(msg(f"turn {i}: {words[i % 5]} {words[(i * 3) % 5]} " + "~" * 100))
        read.clear()
        got = answers(tool)
        assert got == fresh_answers(root, tmp_path / f"fresh{i}"), i
        verified(root)
        now_layout, now = unwrap(h).state().receipt.layout, stamps()
        if now_layout != layout:
            merges += 1
            left_alone = {n for n, s in now.items() if before.get(n) == s}
            assert not left_alone & set(read), (i, sorted(left_alone), read)
            moved = set(now) - left_alone
            assert set(read) <= moved | {max(now) + 1}, (i, read)
            skipped += len(left_alone) >= 2
            layout = now_layout
        before = stamps()
    assert merges >= 3 and skipped >= 2


def test_a_line_lost_from_a_merged_segment_still_rebuilds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The segments a merge left alone are not read again, but the lines of
    the others are counted as before: one lost from a merged segment (its file
    changed, the log's layout with it) makes the index rebuild, and it answers
    as a fresh index over what the log holds now."""
    from ledger.storage.files.ports import unwrap

    monkeypatch.setattr(recall_tail, "FOLD_ROWS", 3)
    read = _resume_reads(monkeypatch)
    root = tmp_path / "root"
    h = Store(str(root), durability="off", segment_bytes=150).history("w")
    tool = h.session_history()
    layout = None
    for i in range(40):
        h.append(msg(f"turn {i}: heron {i} otter " + "~" * 100))
        answers(tool)
        now = unwrap(h).state().receipt.layout
        if layout is not None and now != layout and i > 20:
            break
        layout = now
    else:
        pytest.fail("no merge")
    sealed = [n for n, _s in unwrap(h).state().sealed]
    merged = max(sealed)  # the segment the last merge wrote
    h.append(msg("the last turn: a pelican"))
    path = root / "w" / ffmt.segment_name(merged)
    data = path.read_bytes().splitlines(keepends=True)
    assert len(data) >= 2
    path.write_bytes(b"".join(data[:1] + data[2:]))  # a line lost from the middle
    read.clear()
    got = answers(tool)
    assert got == fresh_answers(root, tmp_path / "fresh")
    assert read and min(read) >= merged  # found by counting: the segments before not read
    verified(root)


def test_the_tail_is_kept_across_a_merge(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A merge moves the tail's rows without changing a byte: the tail is
    moved with them (the merge's INDEX record), not read nor counted again.
    After each one-row append exactly that row's terms are counted, also
    after the appends that merged; every answer is a fresh index's, and the
    folds write what a build writes, every row's place included (the index's
    rows are moved with the merges too)."""
    from ledger.core import searchable
    from ledger.storage.files.ports import unwrap

    monkeypatch.setattr(recall_tail, "FOLD_ROWS", 12)
    counted: list[int] = []
    real = searchable.indexed_terms

    def counting(row: dict[str, Any], *args: Any, **kw: Any) -> Any:
        counted.append(int(row.get("seq", 0)))
        return real(row, *args, **kw)

    monkeypatch.setattr(recall, "indexed_terms", counting)
    root = tmp_path / "root"
    h = Store(str(root), durability="off", segment_bytes=150).history("w")
    h.append(msg("Can you help me plan a trip?"))
    tool = h.session_history()
    answers(tool)
    words = ["bluebird deploy", "heron cache", "otter", "kubectl svc", "trip pasta"]
    layout = unwrap(h).state().receipt.layout
    kept = folds = 0
    for i in range(64):
        h.append(msg(f"turn {i}: {words[i % 5]} {words[(i * 3) % 5]} " + "~" * 100))
        upto = indexed_upto(root)
        counted.clear()
        got = answers(tool)
        assert counted == [h.next_seq - 1], (i, counted)  # the new row alone
        assert got == fresh_answers(root, tmp_path / f"fresh{i}"), i
        now = unwrap(h).state().receipt.layout
        if now != layout:
            kept += indexed_upto(root) < h.next_seq - 2  # a tail of two rows or more moved
            layout = now
        if indexed_upto(root) > upto:
            folds += 1
            # Every row entered where it is now, those the merges moved too.
            assert tables(root / "w") == tables(tmp_path / f"fresh{i}" / "w"), i
    assert kept >= 3 and folds >= 3
