"""The recall index's places after merges (``recall_places``, ``RecallIndex.
_replace_docs``): a merge moves rows to other segments and offsets; the next
write of the index moves its entries with them, so a ranked page reads each
row at its place, as a fresh index's page does, instead of finding it by seq
within the call's read budget (which ended a page after a few rows).

- another process merging, or a merge while no process had the index open:
  the page is a fresh index's, and the entries are a build's, places and
  checksums included;
- a merge record missing or forged: the places are left alone and known to
  be hints (rows found by seq, as before), never a row served from a wrong
  place; the later merges do not move them either;
- a process SIGKILLed in the middle of the move: the next search answers as
  a fresh index and the entries are a build's;
- a privacy floor: no row at or before it is ever a result.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ledger import Store
from ledger.core.format import files as ffmt
from ledger.storage.files import workspace as wsmod
from ledger.storage.files.index import append_entry
from ledger.storage.files.ports import unwrap
from tests.helpers import PYTHON, msg, subprocess_env
from tests.helpers.recall import rebuilt
from tests.storage.files.test_recall_tail import tables

SEGMENT = 1 << 16
WORDS = ("alpha", "beta", "gamma", "delta")

# Another process's operation on workspace "w" (argv: root, op, segment
# bytes): "merge", or "search-killed": a ranked search SIGKILLed after it
# moved the entries, before its transaction commits.
OTHER = """\
import os, signal, sys
import ledger.storage.files.workspace as wsmod
from ledger import Store
from ledger.storage.files import recall
wsmod.AUTO_MIN_SEALED = 1 << 30
root, op, segment = sys.argv[1], sys.argv[2], int(sys.argv[3])
h = Store(root, segment_bytes=segment, durability="off").history("w")
if op == "merge":
    assert h.engine.merge_segments() >= 1
elif op == "search-killed":
    real = recall._save_placed
    def killed(db, layout):
        real(db, layout)
        os.kill(os.getpid(), signal.SIGKILL)
    recall._save_placed = killed
    h.session_history().call({"action": "search", "query": "bluebird deploy",
                              "mode": "ranked", "current": True, "limit": 25})
"""


@pytest.fixture(autouse=True)
def _no_auto_merge(monkeypatch: pytest.MonkeyPatch) -> None:
    """Merges only when a test asks (``other(root, "merge")``)."""
    monkeypatch.setattr(wsmod, "AUTO_MIN_SEALED", 1 << 30)


def store(root: Path) -> Any:
    return Store(str(root), durability="off", segment_bytes=SEGMENT).history("w")


def filled(root: Path, rows: int = 480, then: int = 320) -> Any:
    """~0.9 MiB of rows naming "bluebird deploy", then ~0.3 MiB of others,
    in 64 KiB segments: a merge of the oldest 16 moves every row that names
    them."""
    h = store(root)
    for start in range(0, rows, 32):
        h.append_many([msg(f"turn {i} bluebird deploy {WORDS[i % 4]} "
                           + f"lorem ipsum dolor sit amet {i} " * 60)
                       for i in range(start, min(rows, start + 32))])
    for start in range(0, then, 32):
        h.append_many([msg(f"other {i} " + "x " * 500) for i in range(start, start + 32)])
    return h


def other(root: Path, op: str) -> int:
    return subprocess.run([PYTHON, "-c", OTHER, str(root), op, str(SEGMENT)], env=subprocess_env(),
                          timeout=120).returncode


def page(tool: Any, query: str = "bluebird deploy") -> dict[str, Any]:
    out = json.loads(tool.call({"action": "search", "query": query, "mode": "ranked",
                                "current": True, "limit": 25}))
    assert "error" not in out, out
    return {"items": out["items"], "skipped": out["skipped"]}


def fresh(root: Path, scratch: Path) -> dict[str, Any]:
    """The page of an index built whole from the log now."""
    with rebuilt(root, scratch, store) as tool:
        return page(tool)


def placed(root: Path) -> str | None:
    db = sqlite3.connect(root / "w" / ffmt.RECALL_NAME)
    try:
        got = db.execute("SELECT v FROM meta WHERE k = 'placed'").fetchone()
        return None if got is None else str(got[0])
    finally:
        db.close()


def layout(root: Path) -> int:
    return int(unwrap(store(root)).state().receipt.layout)


def test_a_page_after_another_process_merged_is_a_fresh_index_page(tmp_path: Path) -> None:
    """Fails on main: 3 of the fresh index's 25 items (each row of the merged
    segments found by seq, within the call's read budget)."""
    root = tmp_path / "root"
    h = filled(root)
    tool = h.session_history()
    before = page(tool)
    assert len(before["items"]) == 25
    was = layout(root)
    assert other(root, "merge") == 0
    assert layout(root) > was
    got = page(tool)
    want = fresh(root, tmp_path / "fresh")
    assert len(want["items"]) == 25
    assert got == want
    assert tables(root / "w") == tables(tmp_path / "fresh" / "w")  # places and checksums
    assert placed(root) == str(layout(root))
    # And on, after more rows and another merge.
    for start in range(640, 2000, 40):
        h.append_many([msg(f"turn {i} bluebird deploy later " + "pad " * 300)
                       for i in range(start, start + 40)])
    assert other(root, "merge") == 0
    assert page(tool) == fresh(root, tmp_path / "fresh2")
    assert tables(root / "w") == tables(tmp_path / "fresh2" / "w")


def test_a_merge_while_no_process_had_the_index_open(tmp_path: Path) -> None:
    root = tmp_path / "root"
    h = filled(root)
    tool = h.session_history()
    page(tool)
    tool.reader._recall.close()
    del tool, h
    assert store(root).engine.merge_segments() >= 1
    assert page(store(root).session_history()) == fresh(root, tmp_path / "fresh")
    assert tables(root / "w") == tables(tmp_path / "fresh" / "w")


def _drop_merge_records(root: Path) -> None:
    path = root / "w" / ffmt.INDEX_NAME
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(x for x in lines if not isinstance(
        ffmt.decode_index_entry(x.rstrip(b"\n")), ffmt.MergeRecord)))


def _forge_merge_records(root: Path) -> None:
    """Each merge record replaced by one whose bases are off by one row."""
    path = root / "w" / ffmt.INDEX_NAME
    lines = path.read_bytes().splitlines(keepends=True)
    kept, forged = [], []
    for x in lines:
        rec = ffmt.decode_index_entry(x.rstrip(b"\n"))
        if isinstance(rec, ffmt.MergeRecord):
            forged.append(ffmt.MergeRecord(rec.epoch, rec.layout, rec.into,
                                           [(n, b + 7) for n, b in rec.sources]))
        else:
            kept.append(x)
    path.write_bytes(b"".join(kept))
    for rec in forged:
        append_entry(str(root / "w"), rec)


@pytest.mark.parametrize("damage", [_drop_merge_records, _forge_merge_records])
def test_a_missing_or_forged_merge_record_leaves_the_places_as_hints(
        tmp_path: Path, damage: Any) -> None:
    """The entries are not moved and say so (``placed`` empty): every row is
    still found (by seq), in the fresh index's order, and none is read from
    a place a record made up; a later merge with its record does not move
    them either (their layout is not known)."""
    root = tmp_path / "root"
    h = filled(root)
    tool = h.session_history()
    page(tool)
    before = {d[0]: d[5:7] for d in tables(root / "w")["docs"]}
    assert other(root, "merge") == 0
    damage(root)
    tool.reader._recall.close()
    tool = store(root).session_history()  # INDEX read again
    got = page(tool)
    want = fresh(root, tmp_path / "fresh")
    assert got["items"] == want["items"][:len(got["items"])] and got["items"]
    assert placed(root) == ""
    after = {d[0]: d[5:7] for d in tables(root / "w")["docs"]}
    assert {s: after[s] for s in before} == before  # not moved
    for start in range(640, 2000, 40):
        h.append_many([msg(f"turn {i} bluebird deploy later " + "pad " * 300)
                       for i in range(start, start + 40)])
    assert other(root, "merge") == 0
    got = page(tool)
    assert got["items"] == fresh(root, tmp_path / "fresh2")["items"][:len(got["items"])]
    assert placed(root) == ""
    after = {d[0]: d[5:7] for d in tables(root / "w")["docs"]}
    assert {s: after[s] for s in before} == before


def test_a_search_killed_while_it_moves_the_entries(tmp_path: Path) -> None:
    """SIGKILL after the entries are moved, before the transaction commits:
    nothing of it is kept, and the next search moves them again."""
    root = tmp_path / "root"
    h = filled(root)
    tool = h.session_history()
    page(tool)
    tool.reader._recall.close()
    before = tables(root / "w")
    assert other(root, "merge") == 0
    assert other(root, "search-killed") == -signal.SIGKILL
    assert tables(root / "w") == before  # rolled back
    assert page(store(root).session_history()) == fresh(root, tmp_path / "fresh")
    assert tables(root / "w") == tables(tmp_path / "fresh" / "w")


def test_the_floor_after_a_merge(tmp_path: Path) -> None:
    """A privacy floor, rows after it, a merge: no row at or before the floor
    is a result, and the page and the entries are a fresh index's."""
    root = tmp_path / "root"
    h = filled(root, rows=320)
    h.clear_soft()
    floor = h.next_seq - 1  # the floor's row
    for start in range(320, 960, 32):
        h.append_many([msg(f"turn {i} bluebird deploy after " + "lorem ipsum " * 150)
                       for i in range(start, start + 32)])
    tool = h.session_history()
    page(tool)
    assert other(root, "merge") == 0
    got = page(tool)
    assert got == fresh(root, tmp_path / "fresh") and len(got["items"]) == 25
    assert all(item["seq"] > floor for item in got["items"])
    assert all("after" in item["text"] for item in got["items"])
    assert tables(root / "w") == tables(tmp_path / "fresh" / "w")
