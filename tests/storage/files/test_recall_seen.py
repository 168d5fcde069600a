"""What the recall index's catch-up trusts between two ranked searches
(``ledger.storage.files.recall``'s ``_Seen``, ``ledger.storage.files.appended``):

- while every segment's stamp is the one the last search found, nothing is
  read again; after this process's own appends, their lines come from memory;
  either way the answers are a fresh index's, and no segment is read;
- another process appending between two searches, another handle of the
  same workspace in this process, an edit of a row the index holds, a log
  put back: each leaves a stamp no record names, the log is read and
  checked again, and the answers are a fresh index's.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from ledger import Store
from ledger.core.format import files as ffmt
from ledger.core.format import rows as fmt
from ledger.storage.files import appended, recall
from ledger.storage.files import segments as segs
from tests.helpers import PYTHON, msg, subprocess_env
from tests.storage.files.test_recall_tail import answer, answers, fresh_answers, history

# A timestamp tick: an edit later than this after the last write has new times.
TICK = 0.05


def started(root: Path) -> tuple[Any, Any]:
    h = history(root)
    h.append_many([msg("Can you help me plan a trip?"), msg("Sure: three days.", "assistant")])
    tool = h.session_history()
    answers(tool)  # builds the index
    return h, tool


def segment_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts every read of a segment by the recall index (its reads of rows
    and of the line a mark ends at) from now on."""
    opened: list[int] = []
    lines, one = recall.RecallIndex._lines, recall.RecallIndex._read_line_hash

    def counted_lines(self: Any, st: Any, start: tuple[int, int]) -> Any:
        opened.append(1)
        return lines(self, st, start)

    def counted_hash(self: Any, number: int, at: int) -> str:
        opened.append(1)
        return one(self, number, at)

    monkeypatch.setattr(recall.RecallIndex, "_lines", counted_lines)
    monkeypatch.setattr(recall.RecallIndex, "_read_line_hash", counted_hash)
    return opened


def test_own_appends_are_caught_up_from_memory_with_a_fresh_index_answers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "root"
    h, tool = started(root)
    opened = segment_reads(monkeypatch)
    for i, text in enumerate(["bluebird deploy rollback", "the heron cache is warm",
                              "kubectl rollout undo deploy/bluebird"]):
        h.append_many([msg(text), msg(f"noted {i}", "assistant")])
        got = answers(tool)
        assert not opened, "the catch-up read the log after this process's own append"
        got_again = answers(tool)  # nothing new: nothing read either
        assert not opened
        monkeypatch.undo()
        assert got == got_again == fresh_answers(root, tmp_path / f"fresh{i}")
        opened = segment_reads(monkeypatch)


def test_another_process_appending_between_two_searches(tmp_path: Path) -> None:
    root = tmp_path / "root"
    h, tool = started(root)
    h.append_many([msg("bluebird deploy rollback"), msg("cache warm", "assistant")])
    answers(tool)  # caught up from memory
    script = ("import sys\nfrom ledger import Store\n"
              "Store(sys.argv[1], durability='off').history('w').append_many(["
              "{'role': 'user', 'parts': [{'type': 'text', 'text': 'zebra crossing heron'}]}])\n")
    subprocess.run([PYTHON, "-c", script, str(root)], check=True, env=subprocess_env(),
                   timeout=120)
    first = h.next_seq - 1
    assert answer(tool, "zebra")["items"][0]["seq"] == first
    assert answers(tool) == fresh_answers(root, tmp_path / "fresh1")
    # Then this process appends again: its own record no longer leads from
    # what was checked (the other process's file came between).
    subprocess.run([PYTHON, "-c", script, str(root)], check=True, env=subprocess_env(),
                   timeout=120)
    second = h.next_seq - 1
    h.append_many([msg("otter facts"), msg("a trip to Lisbon", "assistant")])
    assert {first, second} <= {i["seq"] for i in answer(tool, "zebra")["items"]}
    assert answers(tool) == fresh_answers(root, tmp_path / "fresh2")
    # This process appends, then the other: the record leads from what was
    # checked, but not to the file there now.
    h.append_many([msg("pasta tonight")])
    subprocess.run([PYTHON, "-c", script, str(root)], check=True, env=subprocess_env(),
                   timeout=120)
    third = h.next_seq - 1
    assert {first, second, third} <= {i["seq"] for i in answer(tool, "zebra")["items"]}
    assert answers(tool) == fresh_answers(root, tmp_path / "fresh3")


def test_another_handle_of_the_workspace_in_this_process(tmp_path: Path) -> None:
    root = tmp_path / "root"
    h, tool = started(root)
    h.append_many([msg("bluebird deploy rollback")])
    answers(tool)
    other = Store(str(root), durability="off").history("w")  # its own workspace object
    other.append_many([msg("zebra crossing heron")])
    h.append_many([msg("otter facts")])  # this handle's record starts after the other's
    assert answer(tool, "zebra")["items"][0]["seq"] == h.next_seq - 2
    assert answers(tool) == fresh_answers(root, tmp_path / "fresh")


def test_a_row_edited_in_place_after_a_search_is_not_answered_from_the_index(
        tmp_path: Path) -> None:
    """Nothing appended between two searches, but the last row's line was
    rewritten in place (same size, its checksum right, new times): the
    index is checked again and answers for the row as it is now."""
    root = tmp_path / "root"
    h, tool = started(root)
    h.append_many([msg("alpha quokka beta")])
    assert answer(tool, "quokka")["items"]
    time.sleep(TICK)
    wsdir = root / "w"
    number = max(segs.segments_in(str(wsdir), os.listdir(wsdir)))
    path = wsdir / ffmt.segment_name(number)
    data = path.read_bytes()
    start = data.rindex(b"\n", 0, len(data) - 1) + 1
    body = fmt.body_of(data[start:-1])
    assert body is not None and b"quokka" in body
    line = fmt.frame(body.replace(b"quokka", b"wombat"))
    assert len(line) == len(data) - start
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, line, start)
    finally:
        os.close(fd)
    assert answer(tool, "quokka")["items"] == []
    assert answer(tool, "wombat")["items"][0]["seq"] == h.next_seq - 1
    assert answers(tool) == fresh_answers(root, tmp_path / "fresh")


def test_a_log_put_back_between_two_searches(tmp_path: Path) -> None:
    """The log copied back to an earlier state (the rows this process
    appended since lost, as after a crash at durability off), then this
    process appends again: its record no longer leads from the file there."""
    root = tmp_path / "root"
    h, tool = started(root)
    wsdir = root / "w"
    saved = tmp_path / "saved"
    os.makedirs(saved)
    for name in os.listdir(wsdir):
        if not name.startswith(ffmt.RECALL_NAME) and (wsdir / name).is_file():
            (saved / name).write_bytes((wsdir / name).read_bytes())
    h.append_many([msg("zebra lost in the crash")])
    assert answer(tool, "zebra")["items"]
    time.sleep(TICK)
    for name in os.listdir(saved):
        (wsdir / name).write_bytes((saved / name).read_bytes())
    assert answer(tool, "zebra")["items"] == []
    h2 = history(root)
    h2.append_many([msg("a yak at the same seq")])
    h.append_many([msg("otter facts")])
    assert answer(tool, "zebra")["items"] == []
    assert answers(tool) == fresh_answers(root, tmp_path / "fresh")


def test_the_record_of_appends_is_bounded_and_chained() -> None:
    """A process that appends and never searches holds at most KEEP_STEPS
    appends and KEEP_BYTES of lines; an append that does not start from the
    file the last one committed starts the record again."""
    def stamp(n: int) -> ffmt.Stamp:
        return ffmt.Stamp(1, n, n * 10, n, n)

    rec = appended.Appends()
    line = b"x" * 99 + b"\n"
    for n in range(appended.KEEP_STEPS + 10):
        rec.add(appended.Step(1, stamp(n), stamp(n + 1), n * 100, [line], 100))
    last = appended.KEEP_STEPS + 10
    assert rec.lines_after(1, stamp(9), 900, stamp(last)) is None  # dropped
    got = rec.lines_after(1, stamp(last - appended.KEEP_STEPS), (last - appended.KEEP_STEPS) * 100,
                          stamp(last))
    assert got is not None and len(got) == appended.KEEP_STEPS
    assert got[0] == ((last - appended.KEEP_STEPS) * 100, line[:-1])
    assert rec.lines_after(1, stamp(last - 1), (last - 1) * 100, stamp(last - 1)) is None  # not now
    big = [b"y" * (appended.KEEP_BYTES // 2 - 1) + b"\n"]
    for n in range(last, last + 3):
        rec.add(appended.Step(1, stamp(n), stamp(n + 1), 0, big, appended.KEEP_BYTES // 2))
    assert rec.lines_after(1, stamp(last + 1), 0, stamp(last + 3)) is not None
    assert rec.lines_after(1, stamp(last), 0, stamp(last + 3)) is None  # over KEEP_BYTES
    rec.add(appended.Step(1, stamp(500), stamp(501), 0, [line], 100))  # another writer between
    assert rec.lines_after(1, stamp(last + 2), 0, stamp(501)) is None
    assert rec.lines_after(1, stamp(500), 0, stamp(501)) == [(0, line[:-1])]
