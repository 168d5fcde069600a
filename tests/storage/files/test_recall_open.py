"""Opening the file engine's recall index in a new process (issue 31,
thirteenth round): the whole-index ``verify`` runs once per state of the
file, not at every process's first ranked search.

- an intact index recorded verified (``recall_verified``) is opened in a new
  process without the whole verify, after a build and after a fold alike,
  and answers as before;
- any write to its files since the record (a byte edited in place with its
  modification time put back, a write by another SQLite connection, a copy,
  another boot) makes the next open verify it whole: damage is found and
  rebuilt, and the answers are a fresh index's.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import xxhash

from ledger.core.format import files as ffmt
from ledger.storage.files import recall, recall_tail, recall_verified
from tests.helpers import msg
from tests.storage.files.test_recall_hardening import answers as ranked_answers
from tests.storage.files.test_recall_hardening import history

QUERIES = ("bluebird deploy", "heron cache", "otter", "deploy rollback cache")
ROOT = Path(__file__).resolve().parents[3]

# A new process: counts the whole verifies its searches run, prints the
# answers (one JSON line).
CHILD = r"""
import json, sys
from ledger import Store
from ledger.storage.files import recall
calls = [0]
real = recall.verify
def counted(db):
    calls[0] += 1
    real(db)
recall.verify = counted
tool = Store(sys.argv[1], durability="off").history("w").session_history()
out = [tool.call({"action": "search", "query": q, "mode": "ranked", "current": True,
                  "limit": 25}) for q in json.loads(sys.argv[2])]
print(json.dumps({"verifies": calls[0], "answers": out}))
"""


def seeded(root: Path) -> Any:
    h = history(root)
    h.append_many([msg("bluebird deploy rollback"), msg("cache warm", "assistant")])
    h.rollover([msg("bluebird launch went fine")])
    h.append_many([msg("the otter swims; the heron waits", "assistant"),
                   msg("deploy heron cache"), msg("bluebird heron otter deploy cache"),
                   msg("rollback the cache deploy, then deploy again"),
                   msg("heron heron heron: a cache of one word")])
    return h


def answers(h: Any) -> list[str]:
    return ranked_answers(h, QUERIES)


def in_new_process(root: Path) -> tuple[int, list[str]]:
    got = subprocess.run([sys.executable, "-c", CHILD, str(root), json.dumps(QUERIES)],
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True,
                         text=True, check=True)
    out = json.loads(got.stdout.strip().splitlines()[-1])
    return int(out["verifies"]), list(out["answers"])


@pytest.fixture
def verifies(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Whole verifies run by this process's searches, counted."""
    calls = [0]
    real = recall.verify

    def counted(db: sqlite3.Connection) -> None:
        calls[0] += 1
        real(db)

    monkeypatch.setattr(recall, "verify", counted)
    return calls


def fresh_answers(h: Any, root: Path) -> list[str]:
    """What a new index, built from the log now, answers."""
    recall.RecallIndex(str(root / "w")).discard()
    return answers(h)


def test_a_new_process_opens_an_intact_index_without_the_whole_verify(tmp_path: Path) -> None:
    h = seeded(tmp_path)
    want = answers(h)  # builds the index and records it verified
    assert (tmp_path / "w" / (ffmt.RECALL_NAME + recall_verified.SUFFIX)).exists()
    for _ in range(2):
        assert in_new_process(tmp_path) == (0, want)


def test_a_fold_is_recorded_so_the_next_process_opens_it_without_the_whole_verify(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, verifies: list[int]) -> None:
    """The record follows this process's own writes (a fold, with the
    ``-wal`` it leaves checkpointed and deleted when the process ends)."""
    monkeypatch.setattr(recall_tail, "FOLD_ROWS", 1)
    h = seeded(tmp_path)
    answers(h)
    h.append_many([msg("a heron deploy after the build"), msg("otter rollback")])
    tool = h.session_history()
    tool.call({"action": "search", "query": "heron", "mode": "ranked", "current": True})
    assert tool.reader._recall.stats()["docs"] == 10  # folded into the database
    tool.reader._recall.close()
    assert verifies == [0]  # built here, then opened by its record, folded here
    got = in_new_process(tmp_path)
    assert got == (0, fresh_answers(h, tmp_path))


def top_seq(answer: str) -> int:
    return int(json.loads(answer)["items"][0]["seq"])


def forged_length(db: sqlite3.Connection, seq: int) -> None:
    """A forgery no query sees: a row's length times 40, its entry's
    checksum made again, so its score falls; only the whole verify (the
    terms the rows hold against the mark's count) finds it."""
    got = db.execute("SELECT * FROM docs WHERE seq = ?", (seq,)).fetchone()
    assert got is not None
    _, win, length, size, tids, seg, off, _h = got
    db.execute("UPDATE docs SET len = ?, h = ? WHERE seq = ?",
               (length * 40, recall._doc_h(seq, win, length * 40, size, tids, seg, off), seq))


def write_in_place(path: Path, data: bytes) -> None:
    """``data`` over the file's bytes (same inode and size), its access and
    modification times put back: only its change time moves."""
    before = path.stat()
    assert len(data) == before.st_size
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino, before.st_size, before.st_mtime_ns)


def test_a_byte_edit_with_its_times_put_back_is_verified_whole_and_rebuilt(
        tmp_path: Path, verifies: list[int]) -> None:
    h = seeded(tmp_path)
    want = answers(h)
    path = tmp_path / "w" / ffmt.RECALL_NAME
    write_in_place(path, path.read_bytes())  # the same bytes: still a write
    before = verifies[0]
    assert answers(h) == want and verifies[0] == before + 1  # verified whole, recorded
    assert answers(h) == want and verifies[0] == before + 1  # then trusted
    # A forged length with a valid checksum, made by SQLite on a copy whose
    # bytes are written over the file in place.
    copy = tmp_path / "forged.sqlite"
    shutil.copyfile(path, copy)
    db = sqlite3.connect(copy)
    forged_length(db, top_seq(want[3]))
    db.commit()
    db.close()
    data = copy.read_bytes()
    assert data != path.read_bytes()
    write_in_place(path, data)
    before = verifies[0]
    assert answers(h) == want  # found by the whole verify, rebuilt
    assert verifies[0] == before + 1
    assert in_new_process(tmp_path) == (0, want)  # the rebuilt index recorded


def test_a_write_by_another_connection_is_never_recorded_as_verified(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, verifies: list[int]) -> None:
    """A connection that knew the index verified does not record it again
    after another connection wrote (SQLite's data_version moved), even when
    its own fold comes after: the next process verifies whole, finds the
    forged length and rebuilds."""
    monkeypatch.setattr(recall_tail, "FOLD_ROWS", 1)
    h = seeded(tmp_path)
    answers(h)
    tool = h.session_history()
    tool.call({"action": "search", "query": "otter", "mode": "ranked", "current": True})
    other = sqlite3.connect(tmp_path / "w" / ffmt.RECALL_NAME)
    forged_length(other, top_seq(answers(h)[3]))
    other.commit()
    other.close()
    h.append_many([msg("one more heron"), msg("and an otter")])
    tool.call({"action": "search", "query": "heron", "mode": "ranked", "current": True})
    assert tool.reader._recall.stats()["docs"] == 10  # folded on top of the forgery
    tool.reader._recall.close()
    assert in_new_process(tmp_path) == (1, fresh_answers(h, tmp_path))


def test_a_copy_another_boot_or_a_torn_record_is_verified_whole(
        tmp_path: Path, verifies: list[int]) -> None:
    h = seeded(tmp_path / "a")
    want = answers(h)
    shutil.copytree(tmp_path / "a", tmp_path / "b")  # new inodes, the record copied along
    assert in_new_process(tmp_path / "b") == (1, want)
    assert in_new_process(tmp_path / "b") == (0, want)  # recorded for the copy's files
    record = tmp_path / "a" / "w" / (ffmt.RECALL_NAME + recall_verified.SUFFIX)
    good = record.read_bytes()
    for bad in (good[:-5], good.replace(b" 1 ", b" 0 ", 1), b"", b"\xff" * 40):
        record.write_bytes(bad)
        assert in_new_process(tmp_path / "a") == (1, want), bad
    other = good.split()
    other[2] = b"00000000-0000-0000-0000-000000000000"  # another boot (checksum redone)
    body = b" ".join(other[:6])
    record.write_bytes(body + b" " + xxhash.xxh3_64_hexdigest(body).encode() + b"\n")
    assert not recall_verified.valid(str(tmp_path / "a" / "w" / ffmt.RECALL_NAME))
    assert in_new_process(tmp_path / "a") == (1, want)


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_a_record_that_is_not_a_regular_file_is_refused(tmp_path: Path, kind: str) -> None:
    h = seeded(tmp_path)
    answers(h)
    record = tmp_path / "w" / (ffmt.RECALL_NAME + recall_verified.SUFFIX)
    record.unlink()
    outside = tmp_path / "outside"
    if kind == "symlink":
        outside.write_text("keep")
        record.symlink_to(outside)
    else:
        os.mkfifo(record)
    out = answers(h)
    assert all(json.loads(o)["error"]["code"] == "history_unavailable" for o in out)
    if kind == "symlink":
        assert outside.read_text() == "keep"


def test_two_connections_folding_in_turn_keep_the_index_recorded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, verifies: list[int]) -> None:
    """Two long-lived tools (two connections, as two processes) fold in
    turn: each finds the other's fold recorded before its own, so its own
    is recorded too, and a new process opens the index without the whole
    verify."""
    monkeypatch.setattr(recall_tail, "FOLD_ROWS", 1)
    h = seeded(tmp_path)
    answers(h)
    args = {"action": "search", "query": "heron", "mode": "ranked", "current": True}
    one, two = h.session_history(), h.session_history()
    one.call(args)
    two.call(args)
    assert one.reader._recall is not None and two.reader._recall is not None
    assert one.reader._recall is not two.reader._recall  # two connections
    for i in range(3):
        for tool in (one, two):
            h.append_many([msg(f"heron number {i} of {id(tool) % 7}")])
            tool.call(args)
    docs = {one.reader._recall.stats()["docs"], two.reader._recall.stats()["docs"]}
    assert docs == {14}  # every row folded by one or the other
    one.reader._recall.close()
    two.reader._recall.close()
    assert verifies == [0]
    assert in_new_process(tmp_path) == (0, fresh_answers(h, tmp_path))
