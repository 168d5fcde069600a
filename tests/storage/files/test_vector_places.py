"""The semantic channel's candidates are read where the recall index has
their rows now (``FileReader.similar``, ``RecallIndex.places_of``), as the
lexical channel's are: a vector keeps the place where its row was when
embedded, and without the line's size ``locate_at`` found every row only
the vectors found by seq, within the call's read budget, so a page ended
after a few items, fewer still after a merge moved the rows.

- rows found by the vectors alone: a full page, in a fresh store's order,
  also for rows still in the index's unindexed tail;
- after another process's merge: the fresh store's page (the index's
  entries moved by the merge's INDEX record, ``_replace_docs``);
- a merge record missing or forged: the places are left as hints and each
  row is found by seq, never read from a place a record made up.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from ledger import Store
from ledger.core.format import files as ffmt
from ledger.storage.files import workspace as wsmod
from tests.helpers import msg
from tests.helpers.recall import rebuilt
from tests.storage.files.test_recall_places import (
    SEGMENT,
    _drop_merge_records,
    _forge_merge_records,
    layout,
    other,
    placed,
)

pytest.importorskip("numpy")  # the semantic extra

LIMIT = 25


class Whiskers:
    """A deterministic embedder: the query "feline" and every row naming
    "whiskers" point one way (each row a little apart, by its turn), the
    rest the other way; no row holds the word "feline", so only the
    vectors find these rows."""

    name = "whiskers-test"
    dimension = 2

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out = []
        for t in texts:
            turn = re.search(r"turn (\d+) ", t)
            if turn is None and "feline" in t:
                out.append([1.0, 0.0])
            elif turn is not None and "whiskers" in t:
                out.append([1.0, 0.001 * (int(turn.group(1)) % 97)])
            else:
                out.append([0.0, 1.0])
        return out


@pytest.fixture(autouse=True)
def _no_auto_merge(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wsmod, "AUTO_MIN_SEALED", 1 << 30)


def store(root: Path) -> Any:
    return Store(str(root), durability="off", segment_bytes=SEGMENT,
                 embedder=Whiskers()).history("w")


def filled(root: Path) -> Any:
    """~1.6 MiB of rows naming "whiskers", then others, in 64 KiB segments:
    a merge of the oldest 16 moves the first rows the vectors find."""
    h = store(root)
    for start in range(0, 900, 32):
        h.append_many([msg(f"turn {i} whiskers " + "lorem ipsum dolor sit amet " * 60)
                       for i in range(start, min(900, start + 32))])
    for start in range(0, 320, 32):
        h.append_many([msg(f"other {i} " + "x " * 500) for i in range(start, start + 32)])
    return h


def page(tool: Any) -> list[tuple[int, str]]:
    out = json.loads(tool.call({"action": "search", "query": "feline", "mode": "ranked",
                                "current": True, "limit": LIMIT}))
    assert "error" not in out, out
    return [(item["seq"], item["text"]) for item in out["items"]]


def fresh(root: Path, scratch: Path) -> list[tuple[int, str]]:
    """The page of a store whose index and vectors are built whole from the log now."""
    with rebuilt(root, scratch, store, ffmt.VECTORS_NAME + "*") as tool:
        return page(tool)


def test_rows_the_vectors_alone_find_fill_a_page(tmp_path: Path) -> None:
    """Fails on main: 8 of 25 items (each row found by seq)."""
    root = tmp_path / "root"
    h = filled(root)
    tool = h.session_history()
    got = page(tool)
    assert len(got) == LIMIT
    assert got == fresh(root, tmp_path / "fresh")
    assert all(f"turn {seq - 1} whiskers" in text for seq, text in got)
    assert tool.reader._recall._tail is None or not tool.reader._recall._tail.docs
    # Rows appended since: in the index's unindexed tail, read at their places too.
    first = h.next_seq
    h.append_many([msg(f"turn {i} whiskers " + "lorem ipsum dolor sit amet " * 60)
                   for i in (970, 1067, 1164, 1261)])  # the best cosine (turn % 97 == 0)
    got = page(tool)
    assert len(got) == LIMIT and [seq for seq, _ in got[:4]] == list(range(first + 3,
                                                                            first - 1, -1))
    tail = tool.reader._recall._tail
    assert tail is not None and first in tail.docs  # not in SQLite yet
    assert got == fresh(root, tmp_path / "fresh2")


def test_a_page_after_another_process_merged(tmp_path: Path) -> None:
    """Fails on main: 3 of the fresh store's 25 items (8 before the merge)."""
    root = tmp_path / "root"
    h = filled(root)
    tool = h.session_history()
    page(tool)
    was = layout(root)
    assert other(root, "merge") == 0
    assert layout(root) > was
    got = page(tool)
    assert len(got) == LIMIT
    assert got == fresh(root, tmp_path / "fresh")
    assert placed(root) == str(layout(root))


@pytest.mark.parametrize("damage", [_drop_merge_records, _forge_merge_records])
def test_a_missing_or_forged_merge_record_finds_rows_by_seq(tmp_path: Path,
                                                            damage: Any) -> None:
    """The entries stay where they were (``placed`` empty): each row the
    vectors find is found by seq, the page a prefix of the fresh store's,
    no row read from a place a record made up."""
    root = tmp_path / "root"
    h = filled(root)
    tool = h.session_history()
    page(tool)
    assert other(root, "merge") == 0
    damage(root)
    tool.reader._recall.close()
    tool = store(root).session_history()  # INDEX read again
    got = page(tool)
    assert placed(root) == ""
    want = fresh(root, tmp_path / "fresh")
    assert got and got == want[: len(got)]
    assert all(f"turn {seq - 1} whiskers" in text for seq, text in got)
