"""Contract: cursors -- paging, a query's rows fixed by its first page,
expiry by epoch and floor, binding to one query and workspace, forgeries
(DESIGN.md 8)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from ledger import CursorExpired, History, InvalidCursor
from tests.contract.support import ContractBase, MakeStore, call, code, follow, found
from tests.helpers import msg


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _paged(h: History) -> tuple[Any, dict[str, Any], str]:
    h.append_many([msg(f"tok {i}") for i in range(30)])
    h.rollover([msg("tok after rollover")])
    tool = h.session_history()
    args = {"action": "search", "query": "tok", "limit": 3}
    res = call(tool, args)
    assert res["cursor"]
    return tool, args, res["cursor"]


class CursorContract(ContractBase):
    # --- a query's rows are fixed by its first page -----------------------------------

    def test_tracked_appends_never_expire_a_cursor(self, make_store: MakeStore, ws: str) -> None:
        h = make_store(segment_bytes=512).history(ws)
        h.append_many([msg(f"tok {i}") for i in range(12)])
        tool = h.session_history()
        args = {"action": "search", "query": "tok", "limit": 5}
        res = call(tool, args)
        epoch = h.epoch
        for _ in range(4):  # several segments' worth on files
            assert h.append(msg("tok later " + "x" * 200)).epoch == epoch
        got = [i["seq"] for i in res["items"]]
        while res["cursor"]:
            res = call(tool, {**args, "cursor": res["cursor"]})
            assert code(res) == ""
            got += [i["seq"] for i in res["items"]]
        assert got == list(range(1, 13))  # the snapshot: later rows not exposed
        assert found(tool, "tok") == list(range(1, 17))  # a new query sees them

    def test_later_boundaries_are_not_exposed_through_a_cursor(
        self, make_store: MakeStore, ws: str
    ) -> None:
        h = make_store(segment_bytes=512).history(ws)
        base = h.append_many([msg(f"tok {i}") for i in range(12)]).seqs
        tool = h.session_history()
        opened = []
        for args in ({"action": "search", "query": "tok", "limit": 5},
                     {"action": "list", "window": 0, "limit": 5}):
            opened.append((args, call(tool, args)))
        h.append_many([msg("tok later") for _ in range(5)])
        h.rollover([msg("tok later trigger")])
        listed = call(tool, {"action": "list", "limit": 1})
        h.compact([msg("tok later summary")])
        for args, res in opened:
            got = [i["seq"] for i in res["items"]]
            cursor = res["cursor"]
            while cursor:
                res = call(tool, {**args, "cursor": cursor})
                assert "error" not in res
                got += [i["seq"] for i in res["items"]]
                cursor = res["cursor"]
            assert got == base, args
        rest = call(tool, {"action": "list", "limit": 50, "cursor": listed["cursor"]})
        assert [w["window"] for w in listed["items"] + rest["items"]] == [0, 18]
        assert len(found(tool, "tok")) == 12 + 5 + 2  # a new query sees everything

    # --- expiry --------------------------------------------------------------------------

    def test_a_rewrite_expires_cursors_and_a_new_query_works(
        self, make_store: MakeStore, ws: str
    ) -> None:
        h = make_store(segment_bytes=512).history(ws)
        h.append_many([msg(f"tok {i}") for i in range(30)])
        tool = h.session_history()
        args = {"action": "search", "query": "tok", "limit": 5}
        first = call(tool, args)
        before = h.epoch
        after = h.rebaseline()
        assert after != before and h.epoch == after
        assert code(call(tool, {**args, "cursor": first["cursor"]})) == "stale_cursor"
        fresh = call(tool, args)
        assert [i["seq"] for i in fresh["items"]] == [1, 2, 3, 4, 5]
        nxt = call(tool, {**args, "cursor": fresh["cursor"]})
        assert [i["seq"] for i in nxt["items"]] == [6, 7, 8, 9, 10]

    def test_a_new_floor_makes_every_open_cursor_stale(
        self, make_store: MakeStore, ws: str
    ) -> None:
        h = make_store(segment_bytes=512).history(ws)
        h.append_many([msg(f"tok {i}") for i in range(30)])
        tool = h.session_history()
        queries = [{"action": "search", "query": "tok", "limit": 2},
                   {"action": "list", "window": 0, "limit": 2},
                   {"action": "read", "seq": 1, "limit": 2}]
        h.rollover([msg("tok trigger")])
        queries.append({"action": "list", "limit": 1})
        open_ = []
        for args in queries:
            res = call(tool, args)
            assert res["cursor"], args
            open_.append((args, res["cursor"]))
        epoch = h.epoch
        h.clear_soft()
        assert h.epoch == epoch  # not a rewrite: the floor alone expires them
        for args, cursor in open_:
            assert code(call(tool, {**args, "cursor": cursor})) == "stale_cursor", args
        assert found(tool, "tok") == []

    # --- bound to one query and one workspace --------------------------------------

    def test_a_cursor_of_another_query_or_workspace_is_invalid(
        self, make_store: MakeStore, ws: str
    ) -> None:
        store = make_store(segment_bytes=512)
        a, b = store.history(ws), store.history(ws + "-b")
        for h in (a, b):
            h.append_many([msg(f"tok {i} other") for i in range(40)])
            h.rollover([msg("tok x other")])
            h.append_many([msg(f"tok {i} other") for i in range(40)])
        ta, tb = a.session_history(), b.session_history()
        w = a.window
        first = {
            "search": {"action": "search", "query": "tok", "limit": 2},
            "search_w": {"action": "search", "query": "tok", "window": w, "limit": 2},
            "list": {"action": "list", "limit": 1},
            "list_w": {"action": "list", "window": w, "limit": 2},
            "read": {"action": "read", "seq": 3, "limit": 2},
        }
        tokens = {}
        for name, args in first.items():
            res = call(ta, args)
            assert res["cursor"], name
            tokens[name] = res["cursor"]
            assert code(call(ta, {**args, "cursor": res["cursor"]})) == ""  # its own query
            assert code(call(tb, {**args, "cursor": res["cursor"]})) == "invalid_cursor"
        others = [
            ("search", {"action": "search", "query": "TOK", "limit": 2}),
            ("search", {"action": "search", "query": "other", "limit": 2}),
            ("search", {"action": "search", "query": "tok", "window": 0, "limit": 2}),
            ("search", {"action": "list", "limit": 2}),
            ("search_w", {"action": "search", "query": "tok", "limit": 2}),
            ("list", {"action": "list", "window": w, "limit": 2}),
            ("list", {"action": "search", "query": "tok", "limit": 2}),
            ("list_w", {"action": "list", "limit": 2}),
            ("list_w", {"action": "list", "window": 0, "limit": 2}),
            ("read", {"action": "read", "seq": 4, "limit": 2}),
            ("read", {"action": "list", "limit": 2}),
        ]
        for name, args in others:
            assert code(call(ta, {**args, "cursor": tokens[name]})) == "invalid_cursor", args
        # limit is not part of the query: a cursor continues with another limit.
        assert code(call(ta, {**first["search"], "limit": 5, "cursor": tokens["search"]})) == ""

    # --- forgeries ------------------------------------------------------------------------

    def test_a_malformed_cursor_is_invalid(self, make_store: MakeStore, ws: str) -> None:
        tool, args, token = _paged(make_store().history(ws))
        head, _, tail = token.partition(".")
        for bad in ["", ".", "a.b", "!!!.???", "x" * 5000, "bm90IGpzb24.AAAA", "W10.AAAA",
                    "\ud800.x", "é.é", "A" * 4097, f" {token}", f"{head}.{tail}=",
                    f"{head[:10]}*{head[10:]}.{tail}", token[:-1], token + "A"]:
            assert code(call(tool, {**args, "cursor": bad})) == "invalid_cursor", bad
            with pytest.raises(InvalidCursor):
                tool.search(args["query"], cursor=bad, limit=args["limit"])
        assert code(call(tool, {**args, "cursor": token})) == ""  # the real one still works

    def test_a_forged_payload_fails_the_mac(self, make_store: MakeStore, ws: str) -> None:
        """Any changed field of the payload, MAC kept, is ``invalid_cursor``;
        another key id (what another or a restarted process issued) is
        ``stale_cursor``."""
        tool, args, token = _paged(make_store().history(ws))
        head, _, tail = token.partition(".")
        payload = json.loads(_unb64(head))
        assert isinstance(payload, list)
        changed = 0
        for i, value in enumerate(payload):
            if isinstance(value, bool) or i == 0:
                continue
            if isinstance(value, str):
                new: Any = value + "x"
            elif isinstance(value, int):
                new = value + 1
            else:
                continue
            forged = [*payload[:i], new, *payload[i + 1:]]
            bad = f"{_b64(json.dumps(forged, separators=(',', ':')).encode())}.{tail}"
            want = "stale_cursor" if i == 1 else "invalid_cursor"  # 1: the key id
            assert code(call(tool, {**args, "cursor": bad})) == want, (i, value)
            changed += 1
        assert changed >= 6
        with pytest.raises(CursorExpired):
            kid = [payload[0], "0" * len(payload[1]), *payload[2:]]
            tool.search("tok", limit=3, cursor=_b64(json.dumps(kid).encode()) + "." + tail)

    def test_a_cursor_is_at_most_4_kib(self, make_store: MakeStore) -> None:
        store = make_store(segment_bytes=512)
        store.delete("w" * 128)  # a root may be shared with an earlier run of this case
        h = store.history("w" * 128)  # the longest workspace id
        for _ in range(3):
            h.append_many([msg("tok " + "ü" * 50) for _ in range(30)])
            h.compact([msg("tok summary")])
        h.append_many([msg("tok " + "x" * 10) for _ in range(60)])
        tool = h.session_history()
        seen = 0
        for args in (
            {"action": "list", "limit": 1},
            {"action": "list", "window": h.window, "limit": 1},
            {"action": "search", "query": "t" + "o" * 1022 + "k", "limit": 1},
            {"action": "search", "query": "tok", "window": h.window, "limit": 1},
            {"action": "read", "seq": 2, "limit": 1},
        ):
            cursor: str | None = None
            for _ in range(3):
                res = call(tool, dict(args) if cursor is None else {**args, "cursor": cursor})
                cursor = res["cursor"]
                if cursor is None:
                    break
                seen += 1
                assert len(cursor.encode("utf-8")) <= 4096 and cursor.isascii()
        assert seen >= 10

    def test_python_methods_return_dicts_and_raise_for_cursors(
        self, make_store: MakeStore, ws: str
    ) -> None:
        h = make_store().history(ws)
        h.append_many([msg(f"tok {i}") for i in range(12)])
        tool = h.session_history()
        res = tool.search("tok", limit=5)
        assert [i["seq"] for i in res["items"]] == [1, 2, 3, 4, 5]
        assert json.loads(tool.call({"action": "search", "query": "tok", "limit": 5}))["items"] \
            == res["items"]
        assert tool.read(1)["items"][0]["text"] == "tok 0"
        assert tool.list()["items"][0]["window"] == 0
        assert tool.search("")["error"]["code"] == "bad_request"
        with pytest.raises(InvalidCursor):
            tool.search("tok", cursor="x.y", limit=5)
        h.clear_soft()
        with pytest.raises(CursorExpired):
            tool.search("tok", cursor=res["cursor"], limit=5)
        for api, key in (("openai", "function"), ("anthropic", "input_schema")):
            d = tool.definition(api)
            assert key in d and json.dumps(d)
        assert follow(tool, {"action": "search", "query": "tok"}) == []
