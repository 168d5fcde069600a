"""Ranked ``session_history`` search on the PostgreSQL engine (its recall
index in ``tl_recall_*``), on a real server (tests/helpers/pg_cluster.py):

- the engines agree: the same history in a file root and a database gives
  the same ranked items (seqs, windows, snippets and scores);
- the floor and every rewrite (reject, truncate, purge, repair's quarantine,
  delete): no such row is ever a result, even when the index is stale and
  claims to be current;
- lazy maintenance: appends never touch the index; the next ranked search
  catches up, in chunks, with the answers of a whole build, and a build cut
  short goes on where it stopped;
- a version 1 database gets the (empty) tables on open, built by the first
  ranked search; check reports a stale, damaged or disagreeing index as a
  notice and repair rebuilds it;
- the per-call bounds; the CLI's ``--mode ranked`` on a postgresql:// root.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from ledger import Store
from ledger.core import ranking
from ledger.core.bounds import SCAN_ROWS
from ledger.storage.postgres import recall as pg_recall
from ledger.storage.postgres.connect import close_pools
from ledger.storage.postgres.schema import SCHEMA_VERSION
from tests.helpers import subprocess_env

psycopg = pytest.importorskip("psycopg", reason="the [postgres] extra is not installed")


def msg(text: str, role: str = "user") -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "text": text}]}


def call(tool: Any, args: dict[str, Any]) -> dict[str, Any]:
    out = tool.call(args)
    assert len(out.encode("utf-8")) <= 16 * 1024
    return json.loads(out)


def ranked(tool: Any, query: str, **kw: Any) -> dict[str, Any]:
    return call(tool, {"action": "search", "query": query, "mode": "ranked", "current": True, **kw})


def seqs(res: dict[str, Any]) -> list[int]:
    assert "error" not in res, res
    return [i["seq"] for i in res["items"]]


def sql(root: str, query: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(root, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def pretend_current(root: str, ws: str = "w") -> None:
    """Make a stale index claim to be current (the epoch and next seq of the
    head), as a crash or a bug might: what it still holds must not leak."""
    sql(root, "UPDATE tl_recall_state s SET epoch = h.epoch, seen = h.next_seq, "
        "floor = coalesce(h.floor_seq, 0) FROM tl_head h "
        "WHERE h.workspace = s.workspace AND s.workspace = %s", (ws,))


WORDS = ("deploy rollback cache kubernetes ingress timeout invoice customer migration "
         "schema postgres replica latency budget approval release pipeline flaky test "
         "region frankfurt oregon password rotation certificate renewal degree graduate "
         "business administration commute train lisbon pasta garlic heron kingfisher "
         "otter standup thursday retries parseHTTPRequest max_retries Café naïve").split()


def story(seed: int = 11, n: int = 260) -> list[list[dict[str, Any]]]:
    """Batches of a history with windows, tool calls, the tool's own echo,
    phrases and identifiers; deterministic."""
    rnd = random.Random(seed)
    out: list[list[dict[str, Any]]] = []
    for i in range(n):
        words = " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(3, 40)))
        if i % 37 == 36:
            out.append([{"rollover": True}, msg(f"window {i}: {words}")])
        elif i % 23 == 5:
            args = {"action": "search", "query": words[:40], "mode": "ranked", "current": True}
            out.append([
                {"role": "assistant", "parts": [{"type": "tool_call", "id": f"h{i}",
                                                 "name": "session_history", "input": args}]},
                {"role": "tool", "parts": [{"type": "tool_result", "id": f"h{i}",
                                            "output": f"echo {words}"}]}])
        elif i % 11 == 3:
            out.append([
                {"role": "assistant", "parts": [{"type": "tool_call", "id": f"c{i}",
                                                 "name": "shell", "input": {"cmd": words}}]},
                {"role": "tool", "parts": [{"type": "tool_result", "id": f"c{i}",
                                            "output": {"stdout": words}}]}])
        else:
            out.append([msg(words, "user" if i % 2 else "assistant")])
    return out


QUERIES = ["deploy rollback", "what degree did I graduate with?", "kubernetes ingress timeout",
           "invoice customer migration schema", "flaky test pipeline release", "Cafe naive",
           "parse HTTP request retries", '"garlic heron" pasta', "otter", "echo deploy",
           "frankfurt oregon region latency budget approval replica certificate"]


def write(h: Any, batches: list[list[dict[str, Any]]]) -> None:
    for batch in batches:
        if batch[0].get("rollover"):
            h.rollover(batch[1:])
        else:
            h.append_many(batch)


def test_the_engines_agree_on_the_same_history(pg_root: str, tmp_path: Path) -> None:
    tools = []
    for root in (str(tmp_path), pg_root):
        h = Store(root, durability="off").history("w")
        write(h, story())
        h.reject([50])  # a rejected request in both
        h.clear_soft()
        write(h, story(seed=12, n=60))
        tools.append(h.session_history())
    files, pg = tools
    compared = 0
    for q in QUERIES:
        for kw in ({"limit": 25}, {"limit": 5}):
            a, b = ranked(files, q, **kw), ranked(pg, q, **kw)
            assert "error" not in b, b
            assert b["items"] == a["items"], q  # seqs, windows, snippets and scores
            compared += len(a["items"])
    assert compared > 100
    # A window of its own, and pages down the ranking, alike too.
    window = call(files, {"action": "list"})["items"][1]["window"]
    assert ranked(pg, "deploy cache", window=window)["items"] == \
        ranked(files, "deploy cache", window=window)["items"]
    first_f, first_p = ranked(files, "deploy", limit=3), ranked(pg, "deploy", limit=3)
    assert first_p["items"] == first_f["items"]
    assert ranked(pg, "deploy", limit=3, cursor=first_p["cursor"])["items"] == \
        ranked(files, "deploy", limit=3, cursor=first_f["cursor"])["items"]


def test_ranked_finds_what_literal_cannot_and_never_its_own_calls(pg_root: str) -> None:
    h = Store(pg_root).history("w")
    h.append_many([msg("Can you help me plan a trip to Lisbon?"),
                   msg("Three days are enough.", "assistant")])
    h.rollover([msg("I finally graduated! My degree is in Business Administration.")])
    tool = h.session_history()
    question = "What degree did I graduate with?"
    assert call(tool, {"action": "search", "query": question})["items"] == []
    res = ranked(tool, question)
    top = res["items"][0]
    assert "Business Administration" in top["text"] and top["score"] > 0
    assert set(top) == {"seq", "window", "role", "text", "truncated", "score"}
    args = {"action": "search", "query": "degree", "mode": "ranked", "current": True}
    h.append_many([
        {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1",
                                         "name": "session_history", "input": args}]},
        {"role": "tool", "parts": [{"type": "tool_result", "id": "c1",
                                    "output": tool.call(args)}]},
        {"role": "tool", "parts": [{"type": "tool_result", "id": "c2",
                                    "output": {"degree": "kept"}}]}])
    assert seqs(ranked(tool, "degree")) == [8, 5]  # not the call (6) nor its result (7)


def test_the_floor_holds_even_for_a_stale_index(pg_root: str) -> None:
    h = Store(pg_root).history("w")
    h.append_many([msg("the secret launch codename is bluebird"), msg("bluebird notes")])
    tool = h.session_history()
    assert seqs(ranked(tool, "bluebird codename")) == [1, 2]  # index built
    h.clear_soft()
    assert ranked(tool, "bluebird")["items"] == []  # the index holds 1 and 2
    h.append(msg("after the clear: bluebird again"))
    assert seqs(ranked(tool, "bluebird codename")) == [4]
    assert ranked(tool, "bluebird", window=0)["error"]["code"] == "not_found"


def test_every_rewrite_keeps_its_rows_out_even_from_a_stale_index(pg_root: str) -> None:
    h = Store(pg_root).history("w")
    for text in ("bluebird one", "rejected bluebird draft", "bluebird kept",
                 "bluebird tail to truncate", "bluebird tail two"):
        h.append(msg(text))
    tool = h.session_history()
    assert sorted(seqs(ranked(tool, "bluebird"))) == [1, 2, 3, 4, 5]
    h.reject(2)
    pretend_current(pg_root)  # the index still holds row 2's text
    assert sorted(seqs(ranked(tool, "bluebird"))) == [1, 3, 4, 5]
    # Row 2 is never served; its stale words may still lift its neighbours
    # (the neighbour field), whose own text is what is shown.
    assert all(i["seq"] != 2 and "rejected" not in i["text"]
               for i in ranked(tool, "rejected draft")["items"])
    h.truncate_after(3)
    pretend_current(pg_root)
    assert sorted(seqs(ranked(tool, "bluebird"))) == [1, 3]
    assert ranked(tool, "tail truncate")["items"] == []
    h.clear_soft()
    h.append(msg("bluebird after the floor"))
    h.purge_before_floor()
    pretend_current(pg_root)
    # The stale index holds only rows that are gone now (seqs are never reused:
    # the clear is 6, the new row 7), so it finds nothing rather than them.
    assert seqs(ranked(tool, "bluebird")) == []
    # Without pretending, the next search rebuilds from the log.
    sql(pg_root, "UPDATE tl_recall_state SET epoch = 1")
    assert seqs(ranked(tool, "bluebird")) == [7]
    assert sql(pg_root, "SELECT count(*) FROM tl_recall_docs")[0][0] == 1


def test_repair_quarantine_and_delete_keep_rows_out(pg_root: str) -> None:
    store = Store(pg_root)
    h = store.history("w")
    for text in ("heron one", "heron damaged", "heron three"):
        h.append(msg(text))
    tool = h.session_history()
    assert sorted(seqs(ranked(tool, "heron"))) == [1, 2, 3]
    sql(pg_root, "UPDATE tl_rows SET raw = overlay(raw placing 'X' from 30 for 1) "
        "WHERE workspace = 'w' AND seq = 2")
    pretend_current(pg_root)
    assert sorted(seqs(ranked(tool, "heron"))) == [1, 3]  # unreadable: listed as skipped
    from recovery.repair import repair

    report = repair(h)
    assert report.quarantined_batches and report.after.ok
    pretend_current(pg_root)
    assert sorted(seqs(ranked(tool, "heron"))) == [1, 3]
    assert store.delete("w")
    assert sql(pg_root, "SELECT count(*) FROM tl_recall_state")[0][0] == 0
    assert sql(pg_root, "SELECT count(*) FROM tl_recall_post")[0][0] == 0
    h.append(msg("a kingfisher, not a heron"))
    assert seqs(ranked(h.session_history(), "heron")) == [1]
    assert ranked(h.session_history(), "damaged three")["items"] == []


def test_appends_leave_the_index_alone_and_the_next_search_catches_up(
        pg_root: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [msg(f"chunk {i} of the build: {WORDS[i % len(WORDS)]} deploy") for i in range(60)]
    whole = Store(pg_root).history("whole")
    whole.append_many(rows)
    want = ranked(whole.session_history(), "deploy cache ingress chunk", limit=25)
    monkeypatch.setattr(pg_recall, "CHUNK_ROWS", 7)
    monkeypatch.setattr(pg_recall, "CHUNK_POSTINGS", 20)
    monkeypatch.setattr(pg_recall, "CHUNK_BYTES", 10)  # one new row per chunk
    h = Store(pg_root).history("lazy")
    h.append_many(rows[:10])
    tool = h.session_history()
    ranked(tool, "deploy")
    state = sql(pg_root, "SELECT seen, docs FROM tl_recall_state WHERE workspace = 'lazy'")
    assert state == [(11, 10)]
    for r in rows[10:]:
        h.append(r)
    assert sql(pg_root, "SELECT seen, docs FROM tl_recall_state WHERE workspace = 'lazy'") \
        == state  # appends never touch it
    got = ranked(tool, "deploy cache ingress chunk", limit=25)
    assert got["items"] == want["items"] and len(got["items"]) == 25
    assert sql(pg_root, "SELECT seen, docs FROM tl_recall_state WHERE workspace = 'lazy'") \
        == [(61, 60)]


def test_a_build_cut_short_goes_on_where_it_stopped(
        pg_root: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [msg(f"row {i}: {WORDS[i % len(WORDS)]} {WORDS[(i * 7) % len(WORDS)]} otter")
            for i in range(40)]
    ref = Store(pg_root).history("ref")
    ref.append_many(rows)
    want = ranked(ref.session_history(), "otter deploy release", limit=25)
    h = Store(pg_root).history("w")
    h.append_many(rows)
    monkeypatch.setattr(pg_recall, "CHUNK_ROWS", 9)
    real = pg_recall.PgRecall._chunk
    done = {"n": 0}

    def crash_after_two(self: Any) -> Any:
        if done["n"] == 2:
            raise KeyboardInterrupt("the process dies between two chunks")
        done["n"] += 1
        return real(self)

    monkeypatch.setattr(pg_recall.PgRecall, "_chunk", crash_after_two)
    with pytest.raises(KeyboardInterrupt):
        ranked(h.session_history(), "otter")
    # Two chunks of 9 rows committed (the second re-reads row 9, where the
    # first ended, to check its bytes): rows 1..17 are indexed.
    assert sql(pg_root, "SELECT seen, docs FROM tl_recall_state WHERE workspace = 'w'") \
        == [(18, 17)]
    monkeypatch.setattr(pg_recall.PgRecall, "_chunk", real)
    assert ranked(h.session_history(), "otter deploy release", limit=25)["items"] == \
        want["items"]


def test_an_append_between_the_catch_up_and_the_snapshot_is_found(
        pg_root: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch committed after ``prepare_ranked`` but before the call's
    snapshot: the index does not cover the snapshot, so the call catches up
    again and reads the candidates from the index's own snapshot."""
    h = Store(pg_root).history("w")
    h.append(msg("the heron nests by the lake"))
    tool = h.session_history()
    assert seqs(ranked(tool, "heron")) == [1]
    real = tool.reader.prepare_ranked

    def then_append() -> None:
        real()
        Store(pg_root).history("w").append(msg("a heron again, late"))

    monkeypatch.setattr(tool.reader, "prepare_ranked", then_append)
    assert sorted(seqs(ranked(tool, "heron"))) == [1, 2]
    assert sql(pg_root, "SELECT seen FROM tl_recall_state") == [(3,)]


def test_a_last_row_changed_behind_the_store_rebuilds_the_index(pg_root: str) -> None:
    h = Store(pg_root).history("w")
    h.append_many([msg("otter one"), msg("otter two"), msg("otter three")])
    tool = h.session_history()
    assert sorted(seqs(ranked(tool, "otter"))) == [1, 2, 3]
    sql(pg_root, "UPDATE tl_rows SET raw = overlay(raw placing 'X' from 30 for 1) "
        "WHERE workspace = 'w' AND seq = 3")  # no new epoch: nothing the store did
    h.append(msg("otter four"))
    assert sorted(seqs(ranked(tool, "otter"))) == [1, 2, 4]
    assert sql(pg_root, "SELECT docs, upto FROM tl_recall_state") == [(3, 4)]  # rebuilt
    assert sorted(s for (s,) in sql(pg_root, "SELECT seq FROM tl_recall_docs")) == [1, 2, 4]


def test_concurrent_catch_ups_build_one_index(pg_root: str) -> None:
    h = Store(pg_root).history("w")
    h.append_many([msg(f"turn {i} about {WORDS[i % len(WORDS)]} and kingfisher")
                   for i in range(150)])
    errors: list[BaseException] = []

    def search() -> None:
        try:
            got = ranked(Store(pg_root).history("w").session_history(), "kingfisher deploy")
            assert got["items"]
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=search) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert sql(pg_root, "SELECT docs, seen FROM tl_recall_state") == [(150, 151)]
    assert sql(pg_root, "SELECT count(*) FROM tl_recall_docs")[0][0] == 150
    from recovery.check import check

    assert not check(h).findings


def test_a_version_1_database_gets_the_tables_and_builds_lazily(pg_root: str) -> None:
    h = Store(pg_root).history("w")
    h.append_many([msg("the otter swims"), msg("a heron waits")])
    close_pools(pg_root)
    sql(pg_root, "DROP TABLE tl_recall_state, tl_recall_terms, tl_recall_docs, "
        "tl_recall_post, tl_recall_echo")
    sql(pg_root, "UPDATE tl_schema SET version = 1")
    h = Store(pg_root).history("w")  # opens and upgrades
    assert sql(pg_root, "SELECT version FROM tl_schema") == [(SCHEMA_VERSION,)]
    assert sql(pg_root, "SELECT count(*) FROM tl_recall_state")[0][0] == 0  # nothing built
    assert seqs(ranked(h.session_history(), "otter")) == [1, 2]  # 2: its neighbour
    assert sql(pg_root, "SELECT docs FROM tl_recall_state") == [(2,)]


def test_a_version_2_database_gets_the_floor_and_rebuilds_from_it(pg_root: str) -> None:
    """Version 2 indexes counted rows before the floor in their statistics:
    the upgrade adds the floor column and the next ranked search rebuilds."""
    h = Store(pg_root).history("w")
    h.append_many([msg("otter " * 5), msg("heron")])
    h.clear_soft()
    h.append_many([msg("the otter swims"), msg("a heron waits")])
    assert seqs(ranked(h.session_history(), "otter")) == [4, 5]  # 5: its neighbour
    close_pools(pg_root)
    sql(pg_root, "ALTER TABLE tl_recall_state DROP COLUMN floor")
    sql(pg_root, "UPDATE tl_recall_state SET version = 1, docs = 4")
    sql(pg_root, "UPDATE tl_schema SET version = 2")
    h = Store(pg_root).history("w")  # opens and upgrades
    assert sql(pg_root, "SELECT version FROM tl_schema") == [(SCHEMA_VERSION,)]
    assert seqs(ranked(h.session_history(), "otter")) == [4, 5]
    assert sql(pg_root, "SELECT version, docs, floor FROM tl_recall_state") == [(2, 2, 3)]


def test_check_reports_the_index_and_repair_rebuilds_it(pg_root: str) -> None:
    from recovery.check import check
    from recovery.repair import repair

    h = Store(pg_root).history("w")
    h.append_many([msg(t) for t in ("degree in business", "commute by train",
                                    "graduated in May")])
    tool = h.session_history()
    before = ranked(tool, "degree graduate commute")
    assert check(h).ok and not check(h).findings

    def codes() -> list[tuple[str, str]]:
        return [(f.code, f.severity) for f in check(h).findings]

    sql(pg_root, "UPDATE tl_recall_docs SET len = len + 1 WHERE seq = 2")
    assert codes() == [("recall_index_damaged", "notice")]
    sql(pg_root, "UPDATE tl_recall_docs SET len = len + 1 WHERE seq = 1")
    sql(pg_root, "UPDATE tl_recall_docs SET len = len - 1 WHERE seq = 2")
    sql(pg_root, "UPDATE tl_recall_state SET total = total + 1")
    assert codes() == [("recall_index_disagrees", "notice")]
    assert check(h).ok  # a notice: the log is whole
    report = repair(h)
    assert report.after.ok and not report.after.findings
    assert ranked(h.session_history(), "degree graduate commute") == before
    sql(pg_root, "DELETE FROM tl_recall_post WHERE seq = 3")
    assert codes() == [("recall_index_damaged", "notice")]
    p = subprocess.run([sys.executable, "-m", "ledger.cli", "--root", pg_root, "repair", "w",
                        "--json"], capture_output=True, timeout=120, env=subprocess_env())
    assert p.returncode == 0, p.stderr
    assert not codes()
    h.reject(1)
    assert codes() == [("recall_index_stale", "notice")]
    assert ranked(h.session_history(), "degree")["items"] == []
    assert not codes()  # the search rebuilt it


def test_the_bounds_hold(pg_root: str) -> None:
    h = Store(pg_root, durability="off").history("w")
    h.append_many([msg(("kubernetes ingress timeout " * 400) + str(i)) for i in range(30)])
    h.append_many([msg(f"deploy note {i} " + "rollback " * (i % 5)) for i in range(900)])
    tool = h.session_history()
    res = ranked(tool, "ingress timeout", limit=25)
    assert res["items"] and all(len(i["text"]) <= 300 for i in res["items"])
    reader = tool.reader
    with reader.locked():
        st = reader.state()
        got = reader.ranked(st, ranking.parse_query("deploy rollback note"), 0,
                            st.next_seq - 1, None)
    assert 0 < len(got) <= 3 * SCAN_ROWS  # the hits and their two neighbours each
    seen: list[int] = []
    real = reader._prefetch

    def counting(seq: int, fresh: bool = False) -> None:
        real(seq, fresh)
        seen.append(len(reader._fetched))

    reader._prefetch = counting  # type: ignore[method-assign]
    out = ranked(tool, "deploy rollback note", limit=25)
    assert len(out["items"]) == 25 and max(seen) <= 25 + 16  # rows read back, not 500


def test_cursors_and_the_cli_on_a_postgres_root(pg_root: str) -> None:
    h = Store(pg_root).history("w")
    h.append_many([msg(f"deploy {'rollback ' * (i % 4)}note {i}") for i in range(30)])
    tool = h.session_history()
    whole = seqs(ranked(tool, "deploy rollback", limit=25))
    paged: list[int] = []
    cursor = None
    for _ in range(20):
        res = ranked(tool, "deploy rollback", limit=7, **({"cursor": cursor} if cursor else {}))
        paged += seqs(res)
        cursor = res["cursor"]
        if cursor is None:
            break
    assert paged[:25] == whole and len(paged) == 30
    res = ranked(tool, "deploy rollback", limit=2)
    h.reject(1)
    assert ranked(tool, "deploy rollback", cursor=res["cursor"], limit=2)["error"]["code"] \
        == "stale_cursor"
    h.append(msg("I finally graduated! My degree is in Business Administration."))
    out = subprocess.run(
        [sys.executable, "-m", "ledger", "--root", pg_root, "history", "w", "search",
         "what degree did I graduate with?", "--mode", "ranked", "--limit", "1",
         "--current"],
        capture_output=True, text=True, timeout=120, check=False, env=subprocess_env())
    assert out.returncode == 0, out.stderr
    assert "Business Administration" in json.loads(out.stdout)["items"][0]["text"]
    off = Store(pg_root, retrieval=False).history("w")
    assert ranked(off.session_history(), "degree")["error"]["code"] == "retrieval_disabled"


def test_the_neighbour_query_reads_the_rows_its_definition_names(pg_root: str) -> None:
    """``_near_sql`` (two rows each side of each hit in one scan) returns
    exactly the rows and (prev, next) links of its definition: each hit's
    nearest indexed live rows within (after, high], and theirs for the
    neighbours that are no hits; rows removed behind a stale index lend
    nothing. Random hits and ranges over a history with windows, tool calls,
    the tool's echo and rows deleted behind the index."""
    h = Store(pg_root).history("w")
    write(h, story(seed=5, n=200))
    tool = h.session_history()
    ranked(tool, "deploy")  # builds the index
    # Rows gone behind the store's back (and the index's): it still holds them.
    sql(pg_root, "DELETE FROM tl_rows WHERE workspace = 'w' AND seq = ANY(%s)",
        ([12, 13, 40, 77, 78, 79, 150],))
    docs = {int(s): (int(w), int(n), bytes(t)) for s, w, n, t in sql(
        pg_root, "SELECT seq, win, len, tids FROM tl_recall_docs WHERE workspace = 'w'")}
    live = {int(s) for (s,) in sql(pg_root, "SELECT seq FROM tl_rows WHERE workspace = 'w'")}
    order = sorted(s for s in docs if s in live)
    assert len(order) < len(docs) and len(order) > 100

    def link(s: int, after: int, high: int) -> tuple[int | None, int | None]:
        before = [d for d in order if after < d < s]
        later = [d for d in order if s < d <= high]
        return (before[-1] if before else None, later[0] if later else None)

    rnd = random.Random(3)
    top = max(docs)
    with psycopg.connect(pg_root) as conn:
        for _ in range(60):
            after = rnd.choice([0, rnd.randint(0, top // 2)])
            high = rnd.choice([top, rnd.randint(after + 1, top)])
            inside = [s for s in docs if after < s <= high]
            hits = sorted(rnd.sample(inside, min(len(inside), rnd.randint(1, 12))))
            got = [(int(s), int(w), int(n), bytes(t), p, nx) for s, w, n, t, p, nx in
                   conn.execute(pg_recall._near_sql(pg_recall.PG),
                                {"ws": "w", "hits": hits, "after": after, "high": high},
                                binary=True).fetchall()]
            links = {s: link(s, after, high) for s in hits if s in live}
            for s in list(links):
                for near in links[s]:
                    if near is not None and near not in links and near not in hits:
                        links[near] = link(near, after, high)
            named = set(links) | {x for pn in links.values() for x in pn if x is not None}
            want = [(s, *docs[s], *links.get(s, (None, None))) for s in sorted(named)]
            assert got == want, (hits, after, high)


def test_a_ranked_search_of_a_current_index_takes_two_connections(
        pg_root: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``exists`` reads the head with the index's mark, so a search of an
    index that covers the head takes no connection of its own to learn so:
    one for ``exists``, one for the call's snapshot (whose BEGIN goes with
    the head's read); a batch appended before the search is still found."""
    h = Store(pg_root).history("w")
    h.append_many([msg("the kingfisher dives"), msg("a kingfisher on the post")])
    tool = h.session_history()
    assert sorted(seqs(ranked(tool, "kingfisher"))) == [1, 2]
    pool = tool.reader.ws.db.pool
    real_connection = pool.connection
    taken: list[int] = []
    statements: list[str] = []
    real_execute = psycopg.Cursor.execute

    def connection(*a: Any, **kw: Any) -> Any:
        taken.append(1)
        return real_connection(*a, **kw)

    def execute(self: Any, query: Any, *a: Any, **kw: Any) -> Any:
        statements.append(str(query))
        return real_execute(self, query, *a, **kw)

    monkeypatch.setattr(pool, "connection", connection)
    monkeypatch.setattr(psycopg.Cursor, "execute", execute)
    assert sorted(seqs(ranked(tool, "kingfisher"))) == [1, 2]
    assert len(taken) == 2
    assert not any("FOR UPDATE" in s for s in statements)  # no catch-up chunk
    h.append(msg("the kingfisher again"))
    taken.clear()
    assert sorted(seqs(ranked(tool, "kingfisher"))) == [1, 2, 3]
    assert len(taken) == 3  # exists, the catch-up's chunk, the call's snapshot
