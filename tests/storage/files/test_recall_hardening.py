"""The file engine's recall index hardened like the log (issue 30, cases 4 and 5).

- never opened through a link: a symlink (to a database outside the root, or
  dangling), a hard link, a directory or a FIFO at the index's path or at
  SQLite's ``-wal``/``-shm``/``-journal`` paths is refused (ranked search is
  ``history_unavailable`` naming it), nothing outside the root is written or
  created, ``check`` reports it and ``repair`` removes it;
- damaged, it is detected and rebuilt: after any single-byte change or any
  truncation of the index file, a ranked call answers exactly what a fresh
  index answers (or ``history_unavailable``), never a raw exception nor a
  different ranking; ``check`` reports the damage.

Byte flips run over an index of small pages (``recall.PAGE_SIZE`` = 512: about
5 KiB), so every page kind (schema, b-tree interior and leaf, WITHOUT ROWID
tables, the header) is hit within a few seconds.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from ledger import Store
from ledger.core.format import files as ffmt
from ledger.storage.files import recall, recall_tail
from recovery.check import check
from recovery.repair import repair
from tests.helpers import msg

QUERIES = ("bluebird deploy", "heron cache", "otter", '"bluebird launch" fine')


def history(root: Path) -> Any:
    return Store(str(root), durability="off").history("w")


def seeded(root: Path) -> Any:
    h = history(root)
    h.append_many([msg("bluebird deploy rollback"), msg("cache warm", "assistant")])
    h.rollover([msg("bluebird launch went fine")])
    h.append_many([msg("the otter swims; the heron waits", "assistant"),
                   msg("deploy heron cache"), msg("bluebird heron otter deploy cache")])
    return h


def answers(h: Any, queries: tuple[str, ...] = QUERIES) -> list[str]:
    tool = h.session_history()
    try:
        return [tool.call({"action": "search", "query": q, "mode": "ranked", "current": True,
                           "limit": 25})
                for q in queries]
    finally:
        if tool.reader._recall is not None:
            tool.reader._recall.close()


def index_files(h: Any, root: Path) -> Path:
    """Build the index and close it (its WAL folded in): the database path."""
    answers(h)
    path = root / "w" / ffmt.RECALL_NAME
    assert path.exists() and not Path(str(path) + "-wal").exists()
    return path


def unavailable(out: list[str]) -> bool:
    return all(json.loads(o).get("error", {}).get("code") == "history_unavailable"
               for o in out)


# --- links and special files ------------------------------------------------------------


def outside_database(tmp_path: Path) -> tuple[Path, bytes]:
    other = tmp_path / "outside.sqlite"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE meta(k TEXT PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID")
    db.execute("INSERT INTO meta VALUES ('owner', 'someone else')")
    db.commit()
    db.close()
    return other, other.read_bytes()


@pytest.mark.parametrize("suffix", ["", "-wal", "-shm", "-journal"])
def test_a_symlink_is_never_followed(tmp_path: Path, suffix: str) -> None:
    root = tmp_path / "root"
    h = seeded(root)
    path = index_files(h, root)
    want = answers(h)
    other, before = outside_database(tmp_path)
    link = Path(str(path) + suffix)
    link.unlink(missing_ok=True)
    if suffix == "":
        for extra in ("-wal", "-shm"):
            Path(str(path) + extra).unlink(missing_ok=True)
    os.symlink(other, link)
    got = answers(h)
    assert unavailable(got)
    message = json.loads(got[0])["error"]["message"]
    assert "symlink" in message and str(link) in message and "not opened" in message
    assert other.read_bytes() == before  # nothing written through it
    assert not Path(str(other) + "-wal").exists() and not Path(str(other) + "-journal").exists()
    found = [f for f in check(h).findings if f.code == "recall_index_unsafe"]
    assert found and found[0].severity == "damage" and not check(h).ok
    repair(h)
    assert not os.path.islink(link) and other.read_bytes() == before
    assert answers(h) == want
    assert check(h).ok


def test_a_dangling_symlink_creates_nothing_outside(tmp_path: Path) -> None:
    root = tmp_path / "root"
    h = seeded(root)
    target = tmp_path / "elsewhere" / "made.sqlite"
    target.parent.mkdir()
    os.symlink(target, root / "w" / ffmt.RECALL_NAME)
    assert unavailable(answers(h))
    assert not target.exists() and os.listdir(target.parent) == []
    assert [f.code for f in check(h).findings] == ["recall_index_unsafe"]
    repair(h)
    assert not unavailable(answers(h)) and not target.exists()


def test_a_hard_link_a_directory_and_a_fifo_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    h = seeded(root)
    path = index_files(h, root)
    want = answers(h)
    twin = tmp_path / "twin.sqlite"
    os.link(path, twin)
    before = twin.read_bytes()
    h.append(msg("a new otter row"))
    got = answers(h)
    assert unavailable(got) and "hard link" in json.loads(got[0])["error"]["message"]
    assert twin.read_bytes() == before
    twin.unlink()
    assert not unavailable(answers(h))
    for make in (os.mkdir, os.mkfifo):
        for suffix in ("", "-wal", "-shm"):
            Path(str(path) + suffix).unlink(missing_ok=True)
        make(str(path))
        assert unavailable(answers(h))  # a FIFO is never waited on
        assert "recall_index_unsafe" in {f.code for f in check(h).findings}
        (os.rmdir if make is os.mkdir else os.unlink)(path)
    assert answers(h) != want and not unavailable(answers(h))  # the new row is found


# --- damage ---------------------------------------------------------------------------


@pytest.fixture
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recall, "PAGE_SIZE", 512)


def damaged(tmp_path: Path) -> tuple[Any, Path, bytes, list[str]]:
    root = tmp_path / "root"
    h = seeded(root)
    path = index_files(h, root)
    return h, path, path.read_bytes(), answers(h)


def test_any_byte_changed_answers_as_a_fresh_index(tmp_path: Path, small_pages: None) -> None:
    """Every byte of the header and the first page's b-tree header, then every
    11th byte (each flipped in another bit): the answers are the fresh
    index's, rebuilt, never an exception nor another ranking. (Every byte of
    such an index, each flipped once, was run by hand: all 5,632 answered as
    the fresh index.)"""
    h, path, data, want = damaged(tmp_path)
    assert len(data) < 8 * 1024
    offsets = sorted(set(range(0, 120)) | set(range(0, len(data), 11)))
    for off in offsets:
        b = bytearray(data)
        b[off] ^= 1 << (off % 8)
        path.write_bytes(bytes(b))
        assert answers(h, QUERIES[:2]) == want[:2], off


def test_check_reports_a_damaged_index_and_search_rebuilds_it(
        tmp_path: Path, small_pages: None) -> None:
    h, path, data, want = damaged(tmp_path)
    db = sqlite3.connect(path)
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.close()
    assert pages >= 8
    reported = 0
    for page in range(1, pages):  # a byte in the middle of each page but the first
        b = bytearray(data)
        b[page * 512 + 300] ^= 0x10
        path.write_bytes(bytes(b))
        codes = {f.code for f in check(h).findings}
        assert codes <= {"recall_index_damaged"} and check(h).ok  # a notice: the log is fine
        reported += bool(codes)
        assert answers(h) == want, page
        assert not [f for f in check(h).findings if "recall" in f.code]  # rebuilt
    assert reported >= pages // 2  # most pages hold bytes that matter


def test_a_truncated_index_answers_as_a_fresh_one(tmp_path: Path, small_pages: None) -> None:
    h, path, data, want = damaged(tmp_path)
    for size in [0, 1, 50, 99, 100, *range(512, len(data), 256), len(data) - 1]:
        path.write_bytes(data[:size])
        assert answers(h) == want, size


def test_forged_rows_with_their_checksums_are_found_by_their_statistics(
        tmp_path: Path) -> None:
    """A row, a posting or a term removed whole (its checksum goes with it):
    the counts no longer add up, so check reports it and search rebuilds."""
    h, path, data, want = damaged(tmp_path)
    for forgery in ("DELETE FROM docs WHERE seq = (SELECT max(seq) FROM docs)",
                    "DELETE FROM post WHERE (tid, imp, neg) IN "
                    "(SELECT tid, imp, neg FROM post LIMIT 1)",
                    "DELETE FROM df WHERE term = 'heron'"):
        path.write_bytes(data)
        db = sqlite3.connect(path)
        db.execute(forgery)
        db.commit()
        db.close()
        assert {f.code for f in check(h).findings} == {"recall_index_damaged"}, forgery
        assert answers(h) == want, forgery


def test_an_error_while_answering_rebuilds_and_answers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Damage met after the index opened (a row read by the query fails its
    checksum) is answered by a rebuild too."""
    h, path, _, want = damaged(tmp_path)
    tool = h.session_history()
    args = {"action": "search", "query": "heron cache", "mode": "ranked", "current": True,
            "limit": 25}
    assert tool.call(args) == want[1]
    db = sqlite3.connect(path)
    db.execute("UPDATE post SET tf = tf + 1")
    db.commit()
    db.close()
    assert tool.call(args) == want[1]


def test_any_byte_of_the_wal_changed_answers_as_a_fresh_index(
        tmp_path: Path, small_pages: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The index in WAL mode with frames not yet checkpointed (rows appended
    after it was built, folded in by the next search -- its tail folds at one
    row here --, the connection still open): every 7th byte of the ``-wal``
    file flipped (its header and the first frame header whole), and the file
    cut at each frame's boundaries: the answers are a fresh index's (SQLite
    drops the frames from a bad one on, the index catches up from the log,
    or damage is found and rebuilt)."""
    monkeypatch.setattr(recall_tail, "FOLD_ROWS", 1)
    root = tmp_path / "root"
    h = seeded(root)
    path = index_files(h, root)
    h.append_many([msg("a heron and a bluebird deploy the cache"), msg("otter cache")])
    tool = h.session_history()
    want = [tool.call({"action": "search", "query": q, "mode": "ranked", "current": True,
                       "limit": 25})
            for q in QUERIES]
    wal = Path(str(path) + "-wal")
    main_bytes, wal_bytes = path.read_bytes(), wal.read_bytes()  # frames not checkpointed
    tool.reader._recall.close()
    assert len(wal_bytes) > 32 + 24 + 512 and len(wal_bytes) < 32 * 1024
    frame = 24 + 512
    cuts = [0, 16, 32, *range(32, len(wal_bytes), frame), len(wal_bytes) - 1]
    offsets = sorted(set(range(0, 56)) | set(range(0, len(wal_bytes), 7)))
    damage: list[bytes] = [wal_bytes[:c] for c in cuts]
    for off in offsets:
        b = bytearray(wal_bytes)
        b[off] ^= 1 << (off % 8)
        damage.append(bytes(b))
    for i, bad in enumerate(damage):
        path.write_bytes(main_bytes)
        wal.write_bytes(bad)
        Path(str(path) + "-shm").unlink(missing_ok=True)
        assert answers(h) == want, i
