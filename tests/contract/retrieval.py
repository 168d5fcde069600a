"""Contract: ``session_history`` arguments and results -- limits, bad
arguments, retrieval disabled, windows, what is searched and shown, Unicode
case folding, snippets, and ranked search (DESIGN.md 8, 12)."""

from __future__ import annotations

import json
from typing import Any

from ledger import History, Store
from ledger.core import ranking
from tests.contract.support import (
    RANKED_SEARCH,
    ContractBase,
    MakeStore,
    call,
    code,
    follow,
    found,
)
from tests.helpers import msg

BAD_ARGS: list[Any] = [
    None, [], "search", 3, {}, {"action": "find"}, {"action": None}, {"action": ["list"]},
    {"action": "list", "query": "x"}, {"action": "search", "seq": 1, "query": "x"},
    {"action": "read", "query": "x", "seq": 1}, {"action": "list", "bogus": 1},
    {"action": "search"}, {"action": "search", "query": 5}, {"action": "search", "query": []},
    {"action": "search", "query": ["x"] * 5}, {"action": "search", "query": ["x", 5]},
    {"action": "search", "query": ["x", ""]}, {"action": "search", "query": ["x", "a" * 1025]},
    {"action": "search", "query": [["x"]]}, {"action": "search", "query": ["ok", "\ud800"]},
    {"action": "search", "query": ["x"], "mode": "literal"},
    {"action": "search", "query": {"text": "x"}},
    {"action": "search", "query": "x", "window": "3"},
    {"action": "search", "query": "x", "window": 1.5},
    {"action": "search", "query": "x", "window": True}, {"action": "list", "limit": "5"},
    {"action": "list", "limit": 2.0}, {"action": "list", "limit": False},
    {"action": "list", "cursor": 17}, {"action": "list", "cursor": ["a"]},
    {"action": "read"}, {"action": "read", "seq": "1"}, {"action": "read", "seq": None},
    {"action": "read", "seq": 1, "offset": -1}, {"action": "read", "seq": 1, "offset": "2"},
    {"action": "read", "seq": 1, "offset": 10**9},
    {"action": "read", "seq": 1, "window": 0}, {"action": "search", "query": "x", "offset": 1},
    {"action": "list", "seq": 1}, {"action": "read", "seq": 1, "limit": True},
    {"action": "search", "query": "\ud800"}, {"action": "search", "query": "ok\udfff"},
    {"action": "search", "query": "x", "mode": "fuzzy"},
]

FILLER = [
    "Can you help me plan a trip to Lisbon in the spring?",
    "Sure: three days are enough for the old town, Belem and Sintra.",
    "What's a good recipe for a quick weeknight pasta?",
    "Garlic, olive oil, chili flakes and parsley: aglio e olio.",
]


AFTER_FLOOR = [
    "the bluebird deploy went out at noon",
    "a rollback of the cache layer was planned",
    "bluebird cache warmed; deploy verified",
    "Garlic, olive oil, chili flakes and parsley: aglio e olio.",
    "no rollback needed for the bluebird deploy",
]


def _limits_history(h: History) -> Any:
    """40 "tok" rows, a 20,000-character row, then 60 compactions."""
    h.append_many([msg(f"tok {i}") for i in range(40)])
    h.append(msg("L" * 20_000))
    for i in range(60):
        h.compact([msg(f"summary {i}")])
    return h.session_history()


def _seeded(h: History) -> Any:
    h.append_many([msg(t, role="user" if i % 2 == 0 else "assistant")
                   for i, t in enumerate(FILLER)])
    h.rollover([msg("I finally graduated! My degree is in Business Administration.")])
    h.append(msg("Congratulations, that is a big milestone.", role="assistant"))
    h.rollover([msg("My daily commute to work takes 45 minutes each way by train.")])
    return h.session_history()


def ranked(tool: Any, query: str | list[str], **kw: Any) -> dict[str, Any]:
    """A ranked search; over the current window too unless ``current=False``
    (or a ``window``) is given."""
    if "window" not in kw:
        kw.setdefault("current", True)
    return call(tool, {"action": "search", "query": query, "mode": "ranked", **kw})


def seqs(res: dict[str, Any]) -> list[int]:
    assert "error" not in res, res
    return [i["seq"] for i in res["items"]]


class RetrievalContract(ContractBase):
    # --- limits and arguments -----------------------------------------------------------

    def test_item_limits(self, make_store: MakeStore, ws: str) -> None:
        tool = _limits_history(make_store(segment_bytes=4096).history(ws))
        search = {"action": "search", "query": "tok"}
        assert len(call(tool, search)["items"]) == 10
        assert len(call(tool, {**search, "limit": 25})["items"]) == 25
        assert len(call(tool, {**search, "limit": 1})["items"]) == 1
        rows = {"action": "list", "window": 0}
        assert len(call(tool, rows)["items"]) == 10
        assert len(call(tool, {**rows, "limit": 25})["items"]) == 25
        windows = {"action": "list"}
        assert len(call(tool, windows)["items"]) == 10
        assert len(call(tool, {**windows, "limit": 50})["items"]) == 50
        assert len(follow(tool, {**windows, "limit": 50})) == 61
        for args, bad in ((search, 26), (rows, 26), (windows, 51)):
            for limit in (0, -1, bad, 10**6):
                assert code(call(tool, {**args, "limit": limit})) == "bad_request", (args, limit)
        # read takes its limit in code points: default 8,000, max 16,000
        seq = 41
        res = call(tool, {"action": "read", "seq": seq})
        assert res["items"][0]["text"] == "L" * 8000 and res["items"][0]["truncated"] is True
        assert call(tool, {"action": "read", "seq": seq, "limit": 1})["items"][0]["text"] == "L"
        res = call(tool, {"action": "read", "seq": seq, "limit": 16_000})
        assert 8000 < len(res["items"][0]["text"]) <= 16_000
        for limit in (0, 16_001, -5):
            assert code(call(tool, {"action": "read", "seq": seq, "limit": limit})) \
                == "bad_request"
        pieces = [i["text"] for i in follow(tool, {"action": "read", "seq": seq, "limit": 3000})]
        assert [len(p) for p in pieces] == [3000] * 6 + [2000]

    def test_bad_arguments_are_bad_request(self, make_store: MakeStore, ws: str) -> None:
        h = make_store().history(ws)
        h.append_many([msg(f"tok {i}") for i in range(3)])
        tool = h.session_history()
        for args in BAD_ARGS:
            assert code(call(tool, args)) == "bad_request", args
        for query in ("x", "😀" * 1024, "é" * 1024, "a" * 1024):  # 1 to 1,024 code points
            assert code(call(tool, {"action": "search", "query": query})) == ""
        for query in ("", "😀" * 1025, "a" * 1025):
            assert code(call(tool, {"action": "search", "query": query})) == "bad_request"

    def test_retrieval_disabled_leaves_rows_untouched(
        self, make_store: MakeStore, ws: str
    ) -> None:
        h = make_store().history(ws)
        h.append_many([msg(f"tok {i}") for i in range(5)])
        before = [r.line for r in h.rows()]
        off = make_store(retrieval=False).history(ws)
        tool = off.session_history()
        for args in ({"action": "list"}, {"action": "list", "window": 0},
                     {"action": "search", "query": "tok"},
                     {"action": "search", "query": "tok", "mode": "ranked"},
                     {"action": "read", "seq": 1}):
            assert code(call(tool, args)) == "retrieval_disabled", args
        assert tool.search("tok")["error"]["code"] == "retrieval_disabled"
        assert [r.line for r in off.rows()] == before
        off.append(msg("retention continues"))
        assert len(list(h.rows())) == 6
        assert found(h.session_history(), "o") == [1, 2, 3, 4, 5, 6]

    # --- results ---------------------------------------------------------------------------

    def test_oldest_first_and_window_names(self, make_store: MakeStore, ws: str) -> None:
        h = make_store(segment_bytes=512).history(ws)
        a = h.append_many([msg("tok a1"), msg("tok a2")]).seqs
        r = h.rollover([msg("tok b1")]).seqs
        c = h.compact([msg("tok c1")]).seqs
        tool = h.session_history()
        items = follow(tool, {"action": "search", "query": "TOK", "limit": 2})
        assert [(i["seq"], i["window"], i["role"]) for i in items] == [
            (a[0], 0, "user"), (a[1], 0, "user"), (r[2], r[0], "user"), (c[1], c[0], "user")]
        assert follow(tool, {"action": "list"}) == [
            {"window": 0, "reason": "start", "first_seq": 1, "last_seq": 2, "rows": 2},
            {"window": r[0], "reason": "rollover", "first_seq": r[0], "last_seq": r[2],
             "rows": 2},
            {"window": c[0], "reason": "compaction", "first_seq": c[0], "last_seq": c[1],
             "rows": 1},
        ]
        assert [i["seq"] for i in follow(tool, {"action": "list", "window": r[0]})] == [r[2]]
        assert code(call(tool, {"action": "list", "window": 999})) == "not_found"
        assert code(call(tool, {"action": "read", "seq": 999})) == "not_found"

    def test_what_is_searched_and_shown(self, make_store: MakeStore, ws: str) -> None:
        h = make_store().history(ws)
        rows = [
            {"kind": "message", "role": "assistant", "meta": {"note": "secret-meta"},
             "parts": [{"type": "reasoning", "text": "secret-reasoning"},
                       {"type": "text", "text": "visible answer"},
                       {"type": "custom", "text": "secret-custom"}]},
            {"kind": "message", "role": "assistant", "parts": [
                {"type": "tool_call", "id": "c1", "name": "grep",
                 "input": {"pattern": 'fo"o', "n": 1, "ü": [True, None]}}]},
            {"kind": "message", "role": "tool", "parts": [
                {"type": "tool_result", "id": "c1", "output": {"hits": [1, 2], "q": "ü"},
                 "error": False}]},
            {"kind": "message", "role": "tool", "parts": [
                {"type": "tool_result", "id": "c2", "output": 'plain "out"', "error": True}]},
            {"kind": "message", "role": "tool", "parts": [
                {"type": "tool_result", "id": "c3", "output": 42, "error": False}]},
            {"kind": "message", "role": "user", "parts": [
                {"type": "media", "mime": "image/png", "data": "c2VjcmV0LWRhdGE="},
                {"type": "text", "text": "see picture"}]},
            {"kind": "warning", "role": "system", "parts": [{"type": "text", "text": "warned"}]},
        ]
        s = h.append_many(rows).seqs
        tool = h.session_history()

        def text(seq: int) -> str:
            return "".join(i["text"] for i in follow(tool, {"action": "read", "seq": seq}))

        assert [text(x) for x in s] == [
            "visible answer", 'grep {"pattern":"fo\\"o","n":1,"ü":[true,null]}',
            '{"hits":[1,2],"q":"ü"}', 'plain "out"', "42", "[media]\nsee picture", "warned"]
        for secret in ("secret-meta", "secret-reasoning", "secret-custom", "secret-data",
                       "c2VjcmV0", "image/png", "note"):
            assert found(tool, secret) == [], secret
        assert found(tool, "GREP") == [s[1]]
        assert found(tool, '"hits":[1,2]') == [s[2]]
        assert found(tool, 'PLAIN "OUT"') == [s[3]]
        assert found(tool, "[media]") == [s[5]]
        listed = follow(tool, {"action": "list", "window": 0})
        assert [i["text"] for i in listed][:2] == ["visible answer", text(s[1])]
        assert all("secret" not in i["text"] for i in listed)

    def test_resets_lead_ins_and_rejected_rows_are_never_content(
        self, make_store: MakeStore, ws: str
    ) -> None:
        h = make_store(segment_bytes=512).history(ws)
        first = h.append(msg("tok first")).seqs
        rejected = h.append_many([
            {"kind": "message", "role": "assistant", "parts": [],
             "meta": {"quarantine": {"v": 1, "row": msg("tok rejected original")}}},
            {"kind": "message", "role": "assistant", "parts": []},
        ]).seqs
        ro = h.rollover([msg("tok trigger")]).seqs
        co = h.compact([msg("tok summary")]).seqs
        tool = h.session_history()
        assert found(tool, "tok") == [first[0], ro[2], co[1]]
        for q in ("rejected original", "context window", "session_history", "historical"):
            assert follow(tool, {"action": "search", "query": q}) == [], q
        for s in (*rejected, ro[0], ro[1], co[0]):
            assert code(call(tool, {"action": "read", "seq": s})) == "not_found", s
        shown = [i["seq"] for w in (0, ro[0], co[0])
                 for i in follow(tool, {"action": "list", "window": w})]
        assert shown == [first[0], ro[2], co[1]]

    def test_the_tool_never_finds_its_own_calls(self, make_store: MakeStore, ws: str) -> None:
        h = make_store().history(ws)
        h.append(msg("the invoice total was 4,210 euros"))
        tool = h.session_history()
        args = {"action": "search", "query": "invoice total"}
        result = tool.call(args)
        h.append_many([
            {"kind": "message", "role": "assistant", "parts": [
                {"type": "tool_call", "id": "c1", "name": "session_history", "input": args}]},
            {"kind": "message", "role": "tool", "parts": [
                {"type": "tool_result", "id": "c1", "output": result}]},
            {"kind": "message", "role": "tool", "parts": [
                {"type": "tool_result", "id": "c2", "output": {"invoice": "total"}}]},
        ])
        assert found(tool, "invoice") == [1, 4]

    def test_search_folds_case_the_unicode_way(self, make_store: MakeStore, ws: str) -> None:
        h = make_store().history(ws)
        h.append(msg("unrelated"))
        pairs = [("Straße", "STRASSE"), ("STRASSE", "straße"), ("ΣΊΣΥΦΟΣ", "σίσυφος"),
                 ("σίσυφος", "ΣΊΣΥΦΟΣ"), ("ὈΔΥΣΣΕΎΣ", "ὀδυσσεύς"), ("ﬁle", "FILE"),
                 ("Kelvin \u212a", "kelvin k"), ("ǅemal", "ǆEMAL")]
        s = h.append_many([msg(f"before {t} after") for t, _ in pairs]).seqs
        tool = h.session_history()
        for (text, query), seq in zip(pairs, s, strict=True):
            items = follow(tool, {"action": "search", "query": query})
            assert (seq, f"before {text} after") in [(i["seq"], i["text"]) for i in items], query
        assert found(tool, 'A\u2028"\\') == []
        q = h.append(msg('line\u2028 "quoted" \\ back\nslash')).seqs
        assert found(tool, '"QUOTED" \\ BACK\nSLASH') == q

    def test_search_snippet_is_about_300_code_points_around_the_match(
        self, make_store: MakeStore, ws: str
    ) -> None:
        h = make_store().history(ws)
        rows = ["ß" * 400 + "NEEDLE" + "x" * 400, "a" * 1000 + "needle", "needle" + "b" * 1000,
                "ﬁ" * 700 + "needle" + "c" * 700]
        s = h.append_many([msg(t) for t in rows]).seqs
        res = call(h.session_history(), {"action": "search", "query": "needle"})
        assert [i["seq"] for i in res["items"]] == s
        for it, text in zip(res["items"], rows, strict=True):
            assert "needle" in it["text"].casefold()
            assert 250 <= len(it["text"]) <= 320 and it["text"] in text
            assert it["truncated"] is True

    # --- ranked search (capability ``ranked_search``) ------------------------------------

    def _ranked_or_refused(self, tool: Any) -> bool:
        """True when the engine ranks; otherwise assert its refusal: a
        ``bad_request`` that says ranked search is not available here."""
        if self.can(RANKED_SEARCH):
            return True
        res = ranked(tool, "anything")
        assert code(res) == "bad_request" and "ranked" in res["error"]["message"]
        return False

    def test_ranked_finds_what_literal_cannot(self, make_store: MakeStore, ws: str) -> None:
        tool = _seeded(make_store().history(ws))
        if not self._ranked_or_refused(tool):
            return
        question = "What degree did I graduate with?"
        assert call(tool, {"action": "search", "query": question})["items"] == []
        res = ranked(tool, question)
        top = res["items"][0]
        assert "Business Administration" in top["text"]
        assert top["role"] == "user" and top["window"] > 0 and top["score"] > 0
        assert set(top) == {"seq", "window", "role", "text", "truncated", "score"}
        scores = [i["score"] for i in res["items"]]
        assert scores == sorted(scores, reverse=True)
        assert "45 minutes" in ranked(tool, "how long is the commute")["items"][0]["text"]
        assert [i["text"] for i in call(tool, {"action": "search", "query": "degree"})["items"]] \
            == ["I finally graduated! My degree is in Business Administration."]
        for api in ("openai", "anthropic"):
            text = json.dumps(tool.definition(api))
            assert "ranked" in text and "literal" in text

    def test_ranked_phrases_must_occur(self, make_store: MakeStore, ws: str) -> None:
        h = make_store().history(ws)
        h.append_many([msg("the build cache was cold"), msg("cold cache in the build farm"),
                       msg("Cache build: cold start")])
        tool = h.session_history()
        if not self._ranked_or_refused(tool):
            return
        assert len(seqs(ranked(tool, "cold cache build"))) == 3
        assert seqs(ranked(tool, '"cache was cold" build')) == [1]
        assert seqs(ranked(tool, '"CACHE   BUILD"')) == [3]

    def test_ranked_never_crosses_the_floor_or_a_rewrite(
        self, make_store: MakeStore, ws: str
    ) -> None:
        h = make_store().history(ws)
        h.append_many([msg("the secret launch codename is bluebird"), msg("bluebird notes")])
        tool = h.session_history()
        if not self._ranked_or_refused(tool):
            return
        assert seqs(ranked(tool, "bluebird codename")) == [1, 2]
        h.clear_soft()
        h.append(msg("after the clear: bluebird again"))
        assert seqs(ranked(tool, "bluebird")) == [4]
        h.append(msg("rejected bluebird draft"))
        h.append(msg("bluebird kept"))
        h.append(msg("bluebird tail to truncate"))
        assert set(seqs(ranked(tool, "bluebird"))) == {4, 5, 6, 7}
        h.reject(5)
        assert set(seqs(ranked(tool, "bluebird"))) == {4, 6, 7}
        h.truncate_after(6)
        assert set(seqs(ranked(tool, "bluebird"))) == {4, 6}
        h.purge_before_floor()
        assert set(seqs(ranked(tool, "bluebird"))) == {4, 6}
        assert ranked(tool, "codename")["items"] == []

    def test_ranked_cursor_pages_down_the_ranking(self, make_store: MakeStore, ws: str) -> None:
        h = make_store().history(ws)
        h.append_many([msg(f"deploy {'rollback ' * (i % 4)}note {i}") for i in range(30)])
        tool = h.session_history()
        if not self._ranked_or_refused(tool):
            return
        whole = seqs(ranked(tool, "deploy rollback", limit=25))
        paged: list[int] = []
        cursor = None
        for _ in range(40):
            more: dict[str, Any] = {"limit": 4} if cursor is None else \
                {"limit": 4, "cursor": cursor}
            res = ranked(tool, "deploy rollback", **more)
            paged += seqs(res)
            cursor = res["cursor"]
            if cursor is None:
                break
        assert paged[:25] == whole and len(paged) == 30
        res = ranked(tool, "deploy rollback", limit=2)
        h.reject(1)
        assert code(ranked(tool, "deploy rollback", limit=2, cursor=res["cursor"])) \
            == "stale_cursor"

    def test_ranked_arguments_bounds_and_windows(self, make_store: MakeStore, ws: str) -> None:
        h = make_store().history(ws)
        tool = _seeded(h)
        if not self._ranked_or_refused(tool):
            return
        assert code(ranked(tool, "degree", limit=0)) == "bad_request"
        windows = [w["window"] for w in call(tool, {"action": "list"})["items"]]
        assert len(windows) == 3
        for w in windows:
            got = ranked(tool, "degree commute trip pasta milestone", window=w)["items"]
            assert got and all(i["window"] == w for i in got)
        assert code(ranked(tool, "degree", window=999)) == "not_found"
        h.append_many([msg(("kubernetes ingress timeout " * 400) + str(i)) for i in range(30)])
        res = ranked(tool, "ingress timeout", limit=25)
        assert res["items"] and all(len(i["text"]) <= 300 for i in res["items"])
        args = {"action": "search", "query": "invoice total", "mode": "ranked", "current": True}
        h.append(msg("the invoice total was 4,210 euros"))
        result = tool.call(args)
        before = h.append_many([
            {"kind": "message", "role": "assistant", "parts": [
                {"type": "tool_call", "id": "c1", "name": "session_history", "input": args}]},
            {"kind": "message", "role": "tool", "parts": [
                {"type": "tool_result", "id": "c1", "output": result}]}]).seqs
        assert not set(before) & set(seqs(ranked(tool, "invoice total")))

    def test_ranked_scores_know_nothing_before_the_floor(
        self, make_store: MakeStore, ws: str
    ) -> None:
        """Two histories identical after their floors, one full of the query's
        words before it: byte-identical ranked results (the statistics, not
        only the candidates, start after the floor)."""
        store = make_store()

        def fill(h: History, before: list[str]) -> Any:
            h.append_many([msg(t, "user" if i % 2 else "assistant")
                           for i, t in enumerate(before)])
            h.rollover([msg(before[0])])
            h.clear_soft()
            h.append_many([msg(t, "user" if i % 2 else "assistant")
                           for i, t in enumerate(AFTER_FLOOR)])
            h.rollover([msg("window two: the rollback of the bluebird deploy")])
            h.append(msg("bluebird deploy notes, rollback pending", "assistant"))
            return h.session_history()

        loud = [f"bluebird deploy rollback {'bluebird ' * i}cache {i}" for i in range(8)]
        quiet = [FILLER[i % 4] for i in range(8)]
        a, b = fill(store.history(ws), loud), fill(store.history(ws + "q"), quiet)
        if not self._ranked_or_refused(a):
            return
        for query in ("bluebird deploy", "rollback cache", '"bluebird deploy" rollback',
                      "bluebird"):
            args = {"action": "search", "query": query, "mode": "ranked", "limit": 25,
                    "current": True}
            mine, theirs = a.call(args), b.call(args)
            assert mine == theirs, query
            assert json.loads(mine)["items"] and json.loads(mine)["cursor"] is None
        window = json.loads(a.call({"action": "list"}))["items"][-1]["window"]
        args = {"action": "search", "query": "bluebird rollback", "mode": "ranked",
                "window": window}
        assert a.call(args) == b.call(args)

    def test_one_ranked_call_reads_one_budget(self, make_store: MakeStore, ws: str) -> None:
        """Read-back rows share the call's SCAN_BYTES (2 MiB): rows of 720 KB
        that all match come two a page, and the pages together give them all
        once. A row over LINE_CAP (1 MiB) is never served: listed under
        skipped, and indexed by a prefix only (a word past it is not found)."""
        h = make_store().history(ws)
        big = [msg(f"bluebird {i} " + "x" * 720_000) for i in range(5)]
        h.append_many(big[:3])
        h.append_many(big[3:])
        h.append(msg("bluebird heron " + "y " * 600_000 + "zebrafinch"))  # 1.2 MB
        tool = h.session_history()
        if not self._ranked_or_refused(tool):
            return
        args: dict[str, Any] = {"action": "search", "query": "bluebird", "mode": "ranked",
                                "limit": 25, "current": True}
        served: list[int] = []
        skipped: list[int] = []
        for _ in range(10):
            res = call(tool, args)
            assert "error" not in res, res
            assert len(res["items"]) <= 2  # a third would pass 2 MiB read in the call
            served += seqs(res)
            skipped += [s["seq"] for s in res["skipped"]]
            if res["cursor"] is None:
                break
            args["cursor"] = res["cursor"]
        assert sorted(served) == [1, 2, 3, 4, 5] and skipped == [6]
        heron = ranked(tool, "heron")  # row 5 is found by its neighbour's words
        assert seqs(heron) == [5] and [s["seq"] for s in heron["skipped"]] == [6]
        assert heron["skipped"][0]["bytes"] > 1024 * 1024
        past = ranked(tool, "zebrafinch")
        assert past["items"] == [] and past["skipped"] == []

    def test_ranked_queries_are_deduplicated_and_capped(
        self, make_store: MakeStore, ws: str
    ) -> None:
        h = make_store().history(ws)
        h.append_many([msg("the cache was cold"), msg("a warm cache")])
        tool = h.session_history()
        if not self._ranked_or_refused(tool):
            return
        repeated = " ".join(['"cache was cold"'] * 60)  # 1,019 characters, one phrase
        assert seqs(ranked(tool, repeated)) == [1]
        many = " ".join(f'"w{i}"' for i in range(17))
        res = ranked(tool, many)
        assert code(res) == "bad_request" and "16" in res["error"]["message"]
        words = " ".join(f"c{i}" for i in range(100)) + " warm"  # past 64 terms
        assert ranked(tool, words)["items"] == []  # "warm" is the 101st distinct term
        assert seqs(ranked(tool, "warm " + words)) == [2, 1]  # 1: its neighbour

    def test_ranked_finds_a_turn_by_its_neighbours_never_across_a_floor_or_window(
        self, make_store: MakeStore, ws: str
    ) -> None:
        """A tool result that never names its call is found by the call's
        words (the neighbour field), ranked below the call itself; a row
        before the floor or in another window never lends its words: two
        histories that differ only before their floors rank alike."""
        store = make_store()

        def fill(h: History, before: str) -> Any:
            h.append_many([msg(FILLER[0]), msg(before)])
            h.clear_soft()
            h.append_many([
                msg("launch notes, nothing new", "assistant"),
                msg("run the thumbnailer port check", "user"),
                {"kind": "message", "role": "assistant", "parts": [
                    {"type": "tool_call", "id": "c1", "name": "shell",
                     "input": {"cmd": "kubectl get svc thumbnailer"}}]},
                {"kind": "message", "role": "tool", "parts": [
                    {"type": "tool_result", "id": "c1", "output": "8443/TCP 3d"}]},
                msg(FILLER[1], "assistant"),
                msg("the heron report is due", "user")])
            h.rollover([msg("a fresh window starts here")])
            return h.session_history()

        tool = fill(store.history(ws), "friday friday launch: codename bluebird on friday")
        if not self._ranked_or_refused(tool):
            return
        got = ranked(tool, "kubectl thumbnailer")["items"]
        texts = [i["text"] for i in got]
        result = next(i for i in got if i["text"].startswith("8443/TCP"))
        assert "kubectl" in texts[0] and result["score"] > 0
        assert len(got) <= 4  # the hits and their neighbours, nothing else
        assert ranked(tool, "bluebird codename")["items"] == []
        quiet = fill(store.history(ws + "q"), FILLER[2])
        launch = ranked(tool, "launch friday")
        assert launch["items"][0]["text"].startswith("launch notes")
        assert launch == ranked(quiet, "launch friday")
        heron = ranked(tool, "heron report")["items"]
        assert heron[0]["text"].startswith("the heron")
        assert all(i["window"] == heron[0]["window"] for i in heron)

    def test_ranked_skips_the_current_window_unless_asked(
        self, make_store: MakeStore, ws: str
    ) -> None:
        """The rows after the newest boundary are the model's provider view:
        ranked search skips them by default (the question just asked is not
        its own answer); ``current`` or naming the window includes them; a
        cursor keeps the boundary of its first page."""
        h = make_store().history(ws)
        h.append(msg("what was the invoice total?"))
        tool = h.session_history()
        if not self._ranked_or_refused(tool):
            return
        assert ranked(tool, "invoice total", current=False)["items"] == []  # all in view
        h.append_many([msg(f"the invoice total was {i},210 euros", "assistant")
                       for i in range(3)])
        window = h.rollover([msg("so what was the invoice total again?")]).seqs[0]
        asked = list(h.rows())[-1].seq
        mine = seqs(ranked(tool, "invoice total", current=False))
        assert mine and asked not in mine and all(s < window for s in mine)
        assert asked in seqs(ranked(tool, "invoice total"))  # current: True
        assert seqs(ranked(tool, "invoice total", window=window)) == [asked]
        first = ranked(tool, "invoice total", current=False, limit=1)
        h.rollover([msg("invoice total: none of this is old yet")])
        rest = ranked(tool, "invoice total", current=False, limit=25, cursor=first["cursor"])
        assert asked not in seqs(rest) and len(seqs(first) + seqs(rest)) == len(mine)
        for bad in ({"current": "yes"}, {"current": 1}, {"current": True, "mode": "literal"}):
            res = call(tool, {"action": "search", "query": "invoice", **bad})
            assert code(res) == "bad_request" and "current" in res["error"]["message"]

    def test_ranked_phrasings_are_fused_in_one_call(self, make_store: MakeStore, ws: str) -> None:
        """``query`` may be a list of up to 4 phrasings (ranked unless told
        otherwise): each is ranked and the rankings fused by score (each over
        its best, summed), so a row that several phrasings find leads; one
        call with the usual bounds; a row must hold the quoted phrases of a
        phrasing that found it; every phrasing needs words."""
        h = make_store().history(ws)
        h.append_many([msg("the invoice total was 4,210 euros"),
                       msg(FILLER[0], "assistant"),
                       msg("billing amount for march: see the sheet"),
                       msg(FILLER[1], "assistant"),
                       msg("billing amount on the invoice: 4,210 euros total"),
                       msg(FILLER[2], "assistant")])
        h.rollover([msg("what did we pay?")])
        tool = h.session_history()
        if not self._ranked_or_refused(tool):
            return
        one, two = ranked(tool, "invoice total"), ranked(tool, "billing amount")
        both = call(tool, {"action": "search", "query": ["invoice total", "billing amount"]})
        assert "error" not in both, both
        assert seqs(both)[0] == 5  # found by both phrasings
        assert set(seqs(both)) == set(seqs(one)) | set(seqs(two))
        expect = ranking.fuse([[(i["seq"], i["score"]) for i in r["items"]] for r in (one, two)])
        assert seqs(both) == [s for s, _ in expect]
        assert both["items"][0]["score"] == round(expect[0][1], 3) > 1
        assert call(tool, {"action": "search", "query": ["invoice total"], "mode": "ranked"}) \
            == ranked(tool, "invoice total")  # one phrasing: as the string
        repeated = call(tool, {"action": "search", "query": ["billing amount"] * 4})
        assert repeated == two  # the same phrasing counts once
        quoted = call(tool, {"action": "search", "query": ['"invoice total"', "march"]})
        got = seqs(quoted)  # 5 says "invoice" and "total", not the phrase
        assert 1 in got and 3 in got and 5 not in got
        paged = call(tool, {"action": "search", "query": ["invoice total", "billing amount"],
                            "limit": 1})
        rest = call(tool, {"action": "search", "query": ["invoice total", "billing amount"],
                           "limit": 25, "cursor": paged["cursor"]})
        assert seqs(paged) + seqs(rest) == seqs(both)
        other = call(tool, {"action": "search", "query": ["billing amount", "invoice total"],
                            "cursor": paged["cursor"]})
        assert code(other) == "invalid_cursor"
        res = call(tool, {"action": "search", "query": ["invoice", "?!"]})
        assert code(res) == "bad_request" and "item 1" in res["error"]["message"]
        for bad, says in ((["x"] * 5, "1 to 4"), ([], "1 to 4"), (["x", 3], "item 1"),
                          (["x"], "mode ranked")):
            args = {"action": "search", "query": bad}
            if says == "mode ranked":
                args["mode"] = "literal"
            res = call(tool, args)
            assert code(res) == "bad_request" and says in res["error"]["message"], (bad, res)

    # --- ranked search: every engine ranks as the file engine does -----------------

    def test_ranked_search_agrees_with_the_file_engine(self, make_store: MakeStore, ws: str,
                                                       tmp_path: Any) -> None:
        if not self._ranked_or_refused(make_store().history(ws).session_history()):
            return
        self._agrees_with_the_file_engine(make_store, ws, tmp_path)

    def test_ranked_search_agrees_when_few_hits_are_widened(
        self, make_store: MakeStore, ws: str, tmp_path: Any, monkeypatch: Any
    ) -> None:
        """Only the best ``WIDEN`` hits are read with their neighbours: every
        engine widens the same ones (here 2 of many, so the order differs
        from widening them all)."""
        if not self._ranked_or_refused(make_store().history(ws).session_history()):
            return
        whole = self._agrees_with_the_file_engine(make_store, ws + "a", tmp_path / "a")
        monkeypatch.setattr(ranking, "WIDEN", 2)
        few = self._agrees_with_the_file_engine(make_store, ws + "b", tmp_path / "b")
        assert few != whole

    def _agrees_with_the_file_engine(self, make_store: MakeStore, ws: str,
                                     tmp_path: Any) -> list[Any]:
        words = ("deploy rollback cache ingress timeout invoice migration schema replica "
                 "approval release flaky region password degree graduate commute heron "
                 "parseHTTPRequest max_retries Café").split()

        def fill(h: Any) -> tuple[Any, int]:
            for i in range(48):
                text = " ".join(words[(i * k) % len(words)] for k in range(1, 3 + i % 9))
                if i % 16 == 15:
                    h.rollover([msg(f"window {i}: {text}")])
                elif i % 13 == 4:
                    args = {"action": "search", "query": text, "mode": "ranked"}
                    h.append_many([
                        {"role": "assistant", "parts": [{"type": "tool_call", "id": f"h{i}",
                                                         "name": "session_history",
                                                         "input": args}]},
                        {"role": "tool", "parts": [{"type": "tool_result", "id": f"h{i}",
                                                    "output": f"echo {text}"}]}])
                else:
                    h.append(msg(text, "user" if i % 2 else "assistant"))
                if i == 30:
                    h.reject(20)
                    h.clear_soft()
            return h.session_history(), h.snapshot().floor.seq

        ours, floor = fill(make_store().history(ws))
        files, _ = fill(Store(str(tmp_path / "files-root"), durability="off").history("ws"))
        found_items = 0
        answers: list[Any] = []
        for query in ("deploy rollback", "graduate degree commute", "parse HTTP request",
                      "cafe heron", '"rollback cache" release', "echo approval",
                      ["deploy rollback", "graduate degree", '"schema replica"']):
            args = {"action": "search", "query": query, "mode": "ranked", "limit": 25}
            mine, theirs = json.loads(ours.call(args)), json.loads(files.call(args))
            assert "error" not in mine, mine
            assert mine["items"] == theirs["items"], query  # seqs, snippets, scores
            assert all(item["seq"] > floor for item in mine["items"])
            found_items += len(mine["items"])
            answers.append(mine["items"])
        assert found_items > 20
        return answers
