"""The recall index's values of the wrong SQLite type (``recall._TYPES``).

SQLite stores any type in any column, and a row's checksum (``_h`` hashes the
repr of its values; a posting's check is arithmetic that SQLite computes over
text as over numbers) can be forged over values of the wrong type. Each
column of each table gets each storage form it may not hold -- text, a blob
or a real where an integer belongs, a blob where text belongs, a number or
text where the term pairs' blob belongs -- with its checksum forged where
the checksum can be computed: ``check`` reports the damage and a ranked
search answers as a fresh index, whether the file was changed while closed
(found when it is opened) or while a search holds it open (found where the
row is read). None of it is a ``TypeError``: ``recall.DAMAGE_ERRORS`` no
longer holds it, so a TypeError is a bug of ours, never a silent rebuild.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from ledger.storage.files import recall
from recovery.check import check
from tests.storage.files.test_recall_hardening import QUERIES, answers, index_files, seeded

# (table, column, the SQL literal it is set to); INTEGER PRIMARY KEY columns
# (docs.seq, wins.win, segs.number) hold integers only.
_INT_FORMS = ("'x'", "X'00ff'", "1.5")
WRONG = [
    *[("meta", c, "X'00ff'") for c in ("k", "v")],
    *[("meta", "h", f) for f in _INT_FORMS],
    *[("docs", c, f) for c in ("win", "len", "size", "seg", "off", "h") for f in _INT_FORMS],
    *[("docs", "tids", f) for f in ("7", "1.5", "'x'")],
    *[("post", c, f) for c in ("tid", "imp", "neg", "tf", "h") for f in _INT_FORMS],
    *[("df", "term", "X'00ff'")],
    *[("df", c, f) for c in ("tid", "n", "h") for f in _INT_FORMS],
    ("echo", "call", "X'00ff'"),
    *[("echo", "h", f) for f in _INT_FORMS],
    *[("wins", "h", f) for f in _INT_FORMS],
    *[("segs", c, "X'00ff'") for c in ("last_hash", "stamp")],
    *[("segs", c, f) for c in ("last_at", "h") for f in _INT_FORMS],
]
# The row changed: one the searches read (the term heron, its postings, the
# newest entry).
WHERE = {"meta": "k = 'upto'", "docs": "seq = (SELECT max(seq) FROM docs)",
         "post": "tid = (SELECT tid FROM df WHERE term = 'heron')",
         "df": "term = 'heron'", "echo": "1", "wins": "1", "segs": "1"}
# The columns each row's checksum covers, in order.
CHECKSUMMED = {"meta": ("k", "v"), "docs": ("seq", "win", "len", "size", "tids", "seg", "off"),
               "df": ("term", "tid", "n"), "echo": ("call",), "wins": ("win",),
               "segs": ("number", "last_at", "last_hash", "stamp")}
# A posting's check as an attacker computes it: plain arithmetic, which
# SQLite evaluates over text and blobs too.
_POST_FORGED = recall._POST_H.format(t="tid", i="imp", n="neg", f="tf")


def forge(db: sqlite3.Connection, table: str, column: str, literal: str) -> None:
    """Set ``column`` of the rows ``WHERE[table]`` to ``literal`` and forge
    their checksum where it can be computed over the new values."""
    db.execute(f"UPDATE {table} SET {column} = {literal} WHERE {WHERE[table]}")
    if column == "h":
        return
    if table == "post":
        db.execute(f"UPDATE post SET h = {_POST_FORGED} WHERE {WHERE[table]}")
        return
    names = list(CHECKSUMMED[table])
    for values in db.execute(f"SELECT {', '.join(names)} FROM {table} WHERE {WHERE[table]}"
                             ).fetchall():
        try:
            h = recall._doc_h(*values) if table == "docs" else recall._h(*values)
        except TypeError:
            continue  # no checksum over these types can be made: the old one stays
        match = " AND ".join(f"{c} IS ?" for c in names)
        db.execute(f"UPDATE {table} SET h = ? WHERE {match}", (h, *values))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes, list[str]]:
    """A history with a session_history call (an echo entry), its index
    built and closed: the root, the database's bytes and the answers."""
    root = tmp_path_factory.mktemp("types") / "root"
    h = seeded(root)
    h.append_many([
        {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1",
                                         "name": "session_history",
                                         "input": {"action": "search", "query": "otter"}}]},
        {"role": "tool", "parts": [{"type": "tool_result", "id": "c1", "output": "otter"}]}])
    path = index_files(h, root)
    db = sqlite3.connect(path)
    held = {t: db.execute(f"SELECT count(*) FROM {t} WHERE {WHERE[t]}").fetchone()[0]
            for t in WHERE}
    db.close()
    assert all(held.values()), held  # every table has a row to change
    return root, path.read_bytes(), answers(h)


def fresh_copy(built: tuple[Path, bytes, list[str]], tmp_path: Path) -> tuple[Any, Path]:
    """The module's history with its index as built (the log is never
    changed here, so it is shared: a copy would change the segments'
    stamps)."""
    from tests.storage.files.test_recall_hardening import history

    root, data, _ = built
    path = root / "w" / recall.ffmt.RECALL_NAME
    for suffix in ("-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    path.write_bytes(data)
    return history(root), path


@pytest.mark.parametrize(("table", "column", "literal"), WRONG)
def test_a_value_of_the_wrong_type_in_a_closed_index_is_damage(
        built: tuple[Path, bytes, list[str]], tmp_path: Path, table: str, column: str,
        literal: str) -> None:
    h, path = fresh_copy(built, tmp_path)
    db = sqlite3.connect(path)
    forge(db, table, column, literal)
    db.commit()
    db.close()
    assert {f.code for f in check(h).findings} == {"recall_index_damaged"}
    assert answers(h) == built[2]
    assert not [f for f in check(h).findings if "recall" in f.code]  # rebuilt


# A key changed while the index is open (a posting's term id, a term) moves
# the row out of every lookup, as if it were deleted: the statistics find
# it when the file is next opened (the closed test), not the read.
WHILE_OPEN = [w for w in WRONG if w[:2] not in {("post", "tid"), ("df", "term")}]


@pytest.mark.parametrize(("table", "column", "literal"), WHILE_OPEN)
def test_a_value_of_the_wrong_type_written_while_a_search_holds_the_index_is_damage(
        built: tuple[Path, bytes, list[str]], tmp_path: Path, table: str, column: str,
        literal: str) -> None:
    """Changed by another connection after the search's connection opened
    (and verified) the file: found where the row is read."""
    h, path = fresh_copy(built, tmp_path)
    tool = h.session_history()
    args = [{"action": "search", "query": q, "mode": "ranked", "current": True, "limit": 25}
            for q in QUERIES]
    try:
        assert [tool.call(a) for a in args] == built[2]
        db = sqlite3.connect(path)
        forge(db, table, column, literal)
        db.commit()
        db.close()
        assert [tool.call(a) for a in args] == built[2]
    finally:
        if tool.reader._recall is not None:
            tool.reader._recall.close()


@pytest.mark.parametrize("literal", _INT_FORMS)
@pytest.mark.parametrize("column", ["win", "len", "size", "seg", "off"])
def test_docs_after_finds_a_mistyped_entry_as_damage(
        built: tuple[Path, bytes, list[str]], tmp_path: Path, column: str,
        literal: str) -> None:
    """What the semantic channel reads (``docs_after``) after the index was
    opened: an entry of the wrong type is ``Damaged``, which the reader
    turns into ``history_unavailable`` (was a TypeError from its checksum)."""
    h, path = fresh_copy(built, tmp_path)
    tool = h.session_history()
    try:
        tool.call({"action": "search", "query": "heron", "mode": "ranked", "current": True})
        index = tool.reader._recall
        assert index is not None and len(index.docs_after(0)) == 6
        db = sqlite3.connect(path)
        forge(db, "docs", column, literal)
        db.commit()
        db.close()
        with pytest.raises(recall.Damaged):
            index.docs_after(0)
    finally:
        if tool.reader._recall is not None:
            tool.reader._recall.close()


def test_a_type_error_of_ours_is_not_taken_for_damage(
        built: tuple[Path, bytes, list[str]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A TypeError raised by the code that answers (a bug, here planted) is
    not caught as index damage: the index is not discarded and rebuilt, and
    the error the caller gets names the TypeError (was: a rebuild, then
    "the recall index cannot be read")."""
    h, _ = fresh_copy(built, tmp_path)
    discarded: list[str] = []
    discard = recall.RecallIndex.discard

    def counted(self: recall.RecallIndex) -> None:
        discarded.append(self.wsdir)
        discard(self)

    def planted(*_args: Any, **_kw: Any) -> Any:
        raise TypeError("a bug in the ranking")

    monkeypatch.setattr(recall.RecallIndex, "discard", counted)
    monkeypatch.setattr(recall.ranking, "rank", planted)
    tool = h.session_history()
    try:
        got = json.loads(tool.call({"action": "search", "query": "heron cache",
                                    "mode": "ranked", "current": True}))
    finally:
        if tool.reader._recall is not None:
            tool.reader._recall.close()
    assert got["error"] == {"code": "history_unavailable",
                            "message": "TypeError: a bug in the ranking"}
    assert discarded == []
