"""Ranked ``session_history`` search (``mode: "ranked"``) on the file engine.

What a ranked search answers (best first, phrases, the floor and every
rewrite never crossed, cursors down the ranking, the tool's own calls never
found, windows, bounds) is in the contract, tests/contract/retrieval.py, for
every engine with the ``ranked_search`` capability. Here the file engine's
index:

- a log that lost its tail: no such row is ever a result, whatever the index
  held;
- the index is a projection: deleted or damaged, it is rebuilt with the same
  answers; check reports and repair rebuilds it; merges and deletes;
- the pure ranking: folding, stems, identifiers, phrases, recency tie-break.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ledger import Store
from ledger.core import ranking
from ledger.core.format import files as ffmt
from ledger.storage.files import recall as files_recall
from tests.helpers import msg


def call(tool: Any, args: dict[str, Any]) -> dict[str, Any]:
    out = tool.call(args)
    assert len(out.encode("utf-8")) <= 16 * 1024
    return json.loads(out)


def ranked(tool: Any, query: str, **kw: Any) -> dict[str, Any]:
    return call(tool, {"action": "search", "query": query, "mode": "ranked", "current": True, **kw})


def seqs(res: dict[str, Any]) -> list[int]:
    assert "error" not in res, res
    return [i["seq"] for i in res["items"]]


def history(tmp_path: Path, **kw: Any) -> Any:
    return Store(str(tmp_path), durability="off", **kw).history("w")


FILLER = [
    "Can you help me plan a trip to Lisbon in the spring?",
    "Sure: three days are enough for the old town, Belem and Sintra.",
    "What's a good recipe for a quick weeknight pasta?",
    "Garlic, olive oil, chili flakes and parsley: aglio e olio.",
]


def seeded(tmp_path: Path) -> Any:
    h = history(tmp_path)
    h.append_many([msg(t, role="user" if i % 2 == 0 else "assistant")
                   for i, t in enumerate(FILLER)])
    h.rollover([msg("I finally graduated! My degree is in Business Administration.")])
    h.append(msg("Congratulations, that is a big milestone.", role="assistant"))
    h.rollover([msg("My daily commute to work takes 45 minutes each way by train.")])
    return h


def test_index_deleted_or_damaged_is_rebuilt(tmp_path: Path) -> None:
    h = seeded(tmp_path)
    tool = h.session_history()
    before = ranked(tool, "degree graduate commute")
    wsdir = tmp_path / "w"
    index = wsdir / ffmt.RECALL_NAME
    assert index.exists()
    for suffix in ("", "-wal", "-shm"):
        Path(str(index) + suffix).unlink(missing_ok=True)
    assert ranked(h.session_history(), "degree graduate commute") == before
    fresh = h.session_history()
    ranked(fresh, "degree")
    fresh.reader._recall.close()
    for suffix in ("-wal", "-shm"):
        Path(str(index) + suffix).unlink(missing_ok=True)
    index.write_bytes(b"this is not a database" * 100)
    assert ranked(h.session_history(), "degree graduate commute") == before


def test_a_log_that_lost_its_tail_is_not_served_from_the_index(tmp_path: Path) -> None:
    """A crash at durability off can lose the log's last batch while the
    index (synced on its own) kept it: that row is never a result."""
    h = history(tmp_path)
    h.append_many([msg("alpha one"), msg("alpha two")])
    wsdir = tmp_path / "w"
    saved = tmp_path / "saved"
    shutil.copytree(wsdir, saved)
    h.append(msg("zebra lost in the crash"))
    tool = h.session_history()
    assert seqs(ranked(tool, "zebra")) == [3, 2]
    tool.reader._recall.close()
    for name in os.listdir(saved):  # the log goes back; the index stays
        if not name.startswith(ffmt.RECALL_NAME):
            shutil.copy2(saved / name, wsdir / name)
    h2 = history(tmp_path)
    assert ranked(h2.session_history(), "zebra")["items"] == []
    h2.append(msg("a yak at seq three"))
    assert seqs(ranked(h2.session_history(), "yak")) == [3, 2]  # 2: the yak's neighbour
    assert ranked(h2.session_history(), "zebra")["items"] == []


def test_ranking_terms() -> None:
    assert ranking.terms("Café CAFÉ cafe") == ["cafe"] * 3
    assert ranking.terms("graduated") == ranking.terms("graduating")
    assert {"pars", "http", "request"} <= set(ranking.terms("parseHTTPRequest"))
    assert {"max", "retri"} <= set(ranking.terms("max_retries"))
    q = ranking.parse_query('what "Straße 5" did I say?')
    assert q.phrases == ("strasse 5",)
    assert ranking.has_phrases("an der STRASSE 5 links", q)
    docs = [ranking.Doc(1, 0, 3, {"x": 1}), ranking.Doc(9, 0, 3, {"x": 1})]
    corpus = ranking.Corpus(10, 30, {"x": 2})
    order = ranking.rank(docs, ranking.Query(("x",)), corpus, None, ranking.Weights(0, 0))
    assert [s for s, _ in order] == [9, 1]  # a tie goes to the newer row


def test_check_reports_and_repair_rebuilds_the_index(tmp_path: Path) -> None:
    from recovery.check import check
    from recovery.repair import repair

    h = seeded(tmp_path)
    tool = h.session_history()
    before = ranked(tool, "degree graduate commute")
    tool.reader._recall.close()
    assert check(h).ok and not [f for f in check(h).findings if "recall" in f.code]
    index = tmp_path / "w" / ffmt.RECALL_NAME
    import sqlite3

    from ledger.storage.files import recall

    db = sqlite3.connect(index)
    db.execute("UPDATE docs SET len = len + 1")  # a value changed: its checksum fails
    db.commit()
    assert {f.code for f in check(h).findings} == {"recall_index_damaged"}
    # A forged entry, checksum and counts made to match: it disagrees with the log.
    db.execute("UPDATE meta SET v = v + (SELECT count(*) FROM docs) WHERE k = 'total'")
    db.execute("UPDATE meta SET h = ? WHERE k = 'total'",
               (recall._h("total", db.execute("SELECT v FROM meta WHERE k = 'total'")
                          .fetchone()[0]),))
    for row in db.execute("SELECT * FROM docs").fetchall():
        db.execute("UPDATE docs SET h = ? WHERE seq = ?", (recall._doc_h(*row[:7]), row[0]))
    db.commit()
    db.close()
    codes = {f.code for f in check(h).findings}
    assert codes == {"recall_index_disagrees"}
    repair(h)
    assert not [f for f in check(h).findings if "recall" in f.code]
    assert ranked(h.session_history(), "degree graduate commute") == before


def test_an_index_of_an_older_version_is_reported_stale_and_rebuilt(tmp_path: Path) -> None:
    """An index an older build wrote (version 5: its segs entries without the
    line count) is reported stale by check, not damaged, and the next ranked
    search rebuilds it: it answers as a fresh index."""
    import sqlite3

    from recovery.check import check

    h = seeded(tmp_path)
    tool = h.session_history()
    before = ranked(tool, "degree graduate commute")
    tool.reader._recall.close()
    db = sqlite3.connect(tmp_path / "w" / ffmt.RECALL_NAME)
    db.execute("ALTER TABLE segs DROP COLUMN lines")
    db.execute("UPDATE meta SET v = '5', h = ? WHERE k = 'version'",
               (files_recall._h("version", "5"),))
    db.commit()
    db.close()
    found = [f for f in check(h).findings if "recall" in f.code]
    assert [(f.code, f.message) for f in found] == [
        ("recall_index_stale", "the recall index has format 5, this build writes "
         f"{files_recall.VERSION}")]
    assert ranked(h.session_history(), "degree graduate commute") == before
    assert not [f for f in check(h).findings if "recall" in f.code]


def test_a_current_index_over_long_lines_is_reported_clean_and_kept(tmp_path: Path) -> None:
    # check compares 64 random indexed rows with the log. A row bisection could not
    # reach within one call's scan (after a line longer than its probe) was taken for
    # a row the log does not show: a false recall_index_disagrees, and every repair
    # rebuilt the index (seconds at 16 MiB).
    from recovery.check import check
    from recovery.repair import repair

    h = history(tmp_path, segment_bytes=8 << 20)
    for b in range(10):
        h.append_many([msg(f"before {b} {i} needle") for i in range(50)])
    h.append(msg("x" * 300_000 + " needle"))
    for b in range(14):
        h.append_many([msg(f"after {b} {i} needle") for i in range(50)])
    tool = h.session_history()
    assert seqs(ranked(tool, "needle"))
    tool.reader._recall.close()
    for _ in range(3):
        assert [f.code for f in check(h).findings] == []
    fixed = repair(h)
    assert not fixed.changed and fixed.after is not None and fixed.after.findings == []


def test_rows_are_found_again_after_a_merge(tmp_path: Path) -> None:
    """Merges (at append) move rows to other segments and offsets: the
    positions the index kept are hints only."""
    from ledger.storage.files.ports import unwrap

    store = Store(str(tmp_path), durability="off", segment_bytes=150)
    h = store.history("w")

    def add(i: int) -> None:
        h.append(msg(f"turn {i}: the otter number {i} swims " + "~" * 120))

    add(0)
    tool = h.session_history()
    assert seqs(ranked(tool, "otter swims")) == [1]
    layout = unwrap(h).state().receipt.layout
    for i in range(1, 40):
        add(i)
        if i % 6 == 0:
            assert len(seqs(ranked(tool, "otter swims", limit=25))) == min(i + 1, 25)
    assert unwrap(h).state().receipt.layout > layout  # merges ran meanwhile
    got = ranked(tool, "otter swims", limit=25)
    tool.reader._recall.close()
    for name in os.listdir(tmp_path / "w"):
        if name.startswith(ffmt.RECALL_NAME):
            os.unlink(tmp_path / "w" / name)
    assert ranked(h.session_history(), "otter swims", limit=25) == got


def test_a_deleted_workspace_made_again_has_a_new_index(tmp_path: Path) -> None:
    store = Store(str(tmp_path), durability="off")
    h = store.history("w")
    h.append(msg("the heron nests by the lake"))
    tool = h.session_history()
    assert seqs(ranked(tool, "heron")) == [1]
    assert store.delete("w")
    h.append(msg("a kingfisher, not a heron"))
    h.append(msg("another kingfisher"))
    assert seqs(ranked(tool, "heron")) == [1, 2]  # 2: the new heron's neighbour
    assert ranked(tool, "lake nests")["items"] == []
    assert seqs(ranked(tool, "kingfisher"))[0] in (1, 2)
    assert (tmp_path / "w" / ffmt.RECALL_NAME).exists()


def test_framework_tools_search_ranked(tmp_path: Path) -> None:
    """The LangChain and Agents SDK tools take ``mode`` from the one schema."""
    import asyncio

    import pytest

    pytest.importorskip("langchain_core", reason="the langchain extra is not installed")
    pytest.importorskip("agents", reason="the agents extra is not installed")
    lc = pytest.importorskip("ledger.integrations.langchain")
    oa = pytest.importorskip("ledger.integrations.openai_agents")
    store = Store(str(tmp_path), durability="off")
    store.history("lc").append(msg("The standup moved to 9:45 on Thursdays."))
    store.history("oa").append(msg("The standup moved to 9:45 on Thursdays."))
    question = {"action": "search", "query": "when is the standup now?", "mode": "ranked",
                "current": True}
    tool = lc.session_history_tool(lc.LedgerChatMessageHistory("lc", store=store))
    assert "ranked" in json.dumps(tool.args)
    got = json.loads(tool.invoke(question))
    assert got["items"][0]["text"].startswith("The standup moved")
    sdk_tool = oa.session_history_tool(oa.LedgerSession("oa", store=store))
    assert "ranked" in json.dumps(sdk_tool.params_json_schema)
    out = asyncio.run(sdk_tool.on_invoke_tool(None, json.dumps(question)))
    assert json.loads(out)["items"][0]["text"].startswith("The standup moved")


def test_cli_ranked_search(tmp_path: Path) -> None:
    import subprocess
    import sys

    h = seeded(tmp_path)
    del h
    out = subprocess.run(
        [sys.executable, "-m", "ledger", "--root", str(tmp_path), "history", "w", "search",
         "what degree did I graduate with?", "--mode", "ranked", "--limit", "1",
         "--current"],
        capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert "Business Administration" in json.loads(out.stdout)["items"][0]["text"]
    bad = subprocess.run(
        [sys.executable, "-m", "ledger", "--root", str(tmp_path), "history", "w", "search",
         "x", "--mode", "fuzzy"], capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2


def test_a_long_build_commits_in_chunks_with_the_same_answers(
        tmp_path: Path, monkeypatch: Any) -> None:
    from ledger.storage.files import recall

    rows = [msg(f"chunk {i} of the build: {FILLER[i % 4]}") for i in range(60)]
    one = Store(str(tmp_path / "one"), durability="off").history("w")
    one.append_many(rows)
    whole = ranked(one.session_history(), "trip pasta recipe chunk", limit=25)
    monkeypatch.setattr(recall, "CHUNK_POSTINGS", 20)
    many = Store(str(tmp_path / "many"), durability="off").history("w")
    many.append_many(rows)
    got = ranked(many.session_history(), "trip pasta recipe chunk", limit=25)
    assert got["items"] == whole["items"] and len(got["items"]) == 25


@given(st.text(), st.integers(min_value=0, max_value=2**62),
       st.integers(min_value=0, max_value=2**62))
def test_a_term_row_is_written_with_the_checksum_it_is_verified_by(
        term: str, tid: int, n: int) -> None:
    """The fold hashes a df row's text without building the tuple; what it
    writes is what ``verify`` and every lookup check (``_h``), for any term
    (quotes, backslashes, lone surrogates)."""
    assert files_recall._term_h(term, tid, n) == files_recall._h(term, tid, n)
