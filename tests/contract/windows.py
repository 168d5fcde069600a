"""Contract: windows, rollover and compaction, the provider view and the
privacy floor (DESIGN.md 7, 8)."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from ledger import History, InvalidRow
from ledger.transcript.history import OpenToolCalls
from tests.contract.support import (
    ContractBase,
    MakeStore,
    call,
    call_row,
    code,
    follow,
    found,
    lines,
    result_row,
    texts,
    view,
)
from tests.helpers import msg

REJECTED = {"kind": "message", "role": "assistant", "parts": [],
            "meta": {"quarantine": {"v": 1, "row": msg("rejected original")}}}
EMPTY = {"kind": "message", "role": "assistant", "parts": []}


def two_windows_before(h: History) -> list[int]:
    """Rows that a later floor must hide: a rollover and a compaction among them."""
    out = h.append_many([msg(f"tok before {i}") for i in range(4)]).seqs
    out += h.rollover([msg("tok before trigger")]).seqs[2:]
    out += h.compact([msg("tok before summary")]).seqs[1:]
    out += h.append_many([msg(f"tok before {i} ü") for i in range(12)]).seqs
    return out


class WindowContract(ContractBase):
    # --- boundaries ------------------------------------------------------------------

    def test_boundaries_are_one_batch_each(self, make_store: MakeStore, ws: str) -> None:
        h = make_store().history(ws)
        h.append(msg("a"))
        c = h.clear_soft()
        ro = h.rollover([msg("t1"), msg("t2", "assistant")])
        co = h.compact([msg("summary")])
        rows = [r.to_dict() for r in h.rows()]
        kinds = [(r["kind"], (r.get("reset") or {}).get("reason")) for r in rows]
        assert kinds == [("message", None), ("reset", "manual"), ("reset", "rollover"),
                         ("lead_in", None), ("message", None), ("message", None),
                         ("reset", "compaction"), ("message", None)]
        assert (c.seqs, ro.seqs, co.seqs) == ([2], [3, 4, 5, 6], [7, 8])
        assert (c.window, ro.window, co.window, h.window) == (2, 3, 7, 7)
        for r in (c, ro, co):  # one batch each
            assert {rows[s - 1]["batch"]["id"] for s in r.seqs} == {r.batch_id}
        assert h.snapshot().floor.seq == 2  # type: ignore[union-attr]

    def test_rollover_and_compact_refuse_control_rows(
        self, make_store: MakeStore, ws: str
    ) -> None:
        h = make_store().history(ws)
        h.append(msg())
        before = lines(h)
        with pytest.raises(InvalidRow):
            h.rollover([{"kind": "lead_in", "role": "system", "parts": []}])
        with pytest.raises(InvalidRow):
            h.compact([{"kind": "reset", "role": "system", "parts": [],
                        "reset": {"reason": "manual"}}])
        with pytest.raises(InvalidRow):
            h.rollover([{"role": "robot", "parts": []}])
        assert lines(h) == before and h.window == 0

    # --- the provider view -------------------------------------------------------------

    def test_view_without_boundary_is_every_provider_row(
        self, make_store: MakeStore, ws: str
    ) -> None:
        h = make_store().history(ws)
        h.append_many([msg("a"), REJECTED, msg("b", role="assistant"), EMPTY,
                       {"kind": "message", "role": "assistant", "parts": [], "partial": True},
                       {"kind": "warning", "role": "system",
                        "parts": [{"type": "text", "text": "w"}]}])
        got = view(h)
        assert texts(got) == ["a", "b", "w"]
        assert [r["seq"] for r in got] == [1, 3, 5, 6]  # a partial empty record stays

    @pytest.mark.parametrize("boundary", ["rollover", "compact", "clear"])
    def test_view_is_the_rows_after_the_newest_boundary(
        self, make_store: MakeStore, ws: str, boundary: str
    ) -> None:
        h = make_store(segment_bytes=512).history(ws)
        h.append_many([msg(f"old {i}") for i in range(5)])
        h.rollover([msg("older trigger")])
        h.append_many([msg(f"older {i}") for i in range(5)])
        if boundary == "rollover":
            r = h.rollover([msg("trigger"), REJECTED])
            want = ["lead-in", "trigger"]
        elif boundary == "compact":
            r = h.compact([msg("summary"), EMPTY])
            want = ["summary"]
        else:
            r = h.clear_soft()
            want = []
        h.append_many([msg("after 1"), EMPTY, msg("after 2", role="assistant")])
        got = view(h)
        assert all(row["kind"] != "reset" and row["seq"] > r.seqs[0] for row in got)
        shown = ["lead-in" if row["kind"] == "lead_in" else texts([row])[0] for row in got]
        assert shown == [*want, "after 1", "after 2"]
        assert [row.seq for row in h.window_rows()] == list(range(r.seqs[0] + 1, r.seqs[-1] + 4))

    def test_window_state_is_the_window_and_the_state_of_one_read(
        self, make_store: MakeStore, ws: str
    ) -> None:
        store = make_store(segment_bytes=512)
        h = store.history(ws)
        rows, st = h.window_state()  # a workspace never written: nothing created
        assert (rows, st.next_seq, st.epoch, st.window_seq) == ([], 1, 0, 0)
        assert not h.exists()
        h.append_many([msg(f"old {i}") for i in range(3)])
        h.clear_soft()
        h.rollover([msg("trigger")])
        h.append_many([msg("after", "assistant"), EMPTY])
        rows, st = h.window_state()
        snap = h.snapshot()
        assert [r.seq for r in rows] == [r.seq for r in h.window_rows()] == [6, 7, 8, 9]
        assert (st.next_seq, st.epoch, st.window_seq, st.floor) == (
            snap.next_seq, snap.epoch, snap.window_seq, snap.floor)
        view, st2 = h.provider_state()
        assert [r.seq for r in view] == [r.seq for r in h.provider_view()] == [6, 7, 8]
        assert (st2.next_seq, st2.window_seq) == (10, 5)
        # One read: while another writer appends, the state is always the
        # one the rows were read under (its next seq follows the last row),
        # which a state read and a window read one after the other miss.
        done = threading.Event()

        def write() -> None:
            try:
                other = store.history(ws)
                for i in range(60):
                    other.append(msg(f"w {i}"))
            finally:
                done.set()

        writer = threading.Thread(target=write)
        writer.start()
        try:
            reads = 0
            while not done.is_set() or reads < 5:
                rows, st = h.window_state()
                assert rows[-1].seq == st.next_seq - 1, (rows[-1].seq, st.next_seq)
                reads += 1
        finally:
            writer.join()

    def test_tool_calls_and_results_are_never_split(self, make_store: MakeStore, ws: str) -> None:
        h = make_store(segment_bytes=512).history(ws)
        h.append_many([msg("q"), call_row("old")])
        # A rollover never lands between a call and its result: refused, naming it.
        with pytest.raises(OpenToolCalls) as info:
            h.rollover([result_row("old"), call_row("c1"), result_row("c1")])
        assert info.value.call_ids == ("old",) and "'old'" in str(info.value)
        with pytest.raises(OpenToolCalls):
            h.rollover([msg("next")])  # the call "old" is still open
        assert h.window == 0
        # A manual clear may: the result that arrives later is served as user
        # text (never dropped, never an orphan result the provider would reject).
        h.clear_soft()
        h.append_many([result_row("old"), call_row("c1"), result_row("c1")])
        h.append_many([call_row("c2"), result_row("c2"), msg("done")])
        h.append(result_row("old", {"type": "text", "text": "and a remark"}))
        got = view(h)
        served = [p["text"] for r in got for p in r["parts"]
                  if "result of tool call old" in p.get("text", "")]
        assert len(served) == 2 and all("earlier context window" in t for t in served)
        assert got[0]["role"] == "user"
        seen_calls: set[str] = set()
        for row in got:
            for p in row["parts"]:
                if p["type"] == "tool_call":
                    seen_calls.add(p["id"])
                if p["type"] == "tool_result":
                    assert p["id"] in seen_calls, f"orphan tool result {p['id']} in the view"
        shown = texts(got)
        assert {"call:c1", "result:c1", "call:c2", "result:c2"} <= set(shown)
        assert shown.index("call:c1") < shown.index("result:c1")

    def test_serving_an_orphan_as_text_leaves_the_stored_row_as_it_was(
        self, make_store: MakeStore, ws: str
    ) -> None:
        # The view changes the rows it serves as text in place (they were read
        # for that view alone): nothing stored, and no later read, may see it.
        h = make_store().history(ws)
        h.append_many([msg("q"), call_row("old")])
        h.clear_soft()
        h.append_many([result_row("old"), msg("after")])
        seq = h.next_seq - 2
        first = view(h)
        assert first[0]["role"] == "user" and "result of tool call old" in \
            first[0]["parts"][0]["text"]
        assert view(h) == first
        rows, _ = h.provider_state()
        assert [r.to_dict() for r in rows] == first
        stored = h.get(seq)
        assert stored is not None and stored.role == "tool"
        assert stored.parts[0]["type"] == "tool_result"
        window = h.window_rows()
        assert window[0].seq == seq and window[0].data == stored.data
        assert [r.to_dict() for r in h.rows()][-2] == stored.to_dict()

    @pytest.mark.parametrize("tool_available", [True, False])
    def test_lead_in_names_the_window_and_offers_the_tool(
        self, make_store: MakeStore, ws: str, tool_available: bool
    ) -> None:
        h = make_store().history(ws)
        h.append_many([msg("SECRET-OLD-MARKER about the plan"), msg("tok 2", role="assistant")])
        r = h.rollover([msg("new question")], tool_available=tool_available)
        lead = view(h)[0]
        assert lead["kind"] == "lead_in" and lead["seq"] == r.seqs[1]
        text = " ".join(texts([lead]))
        assert f"window {r.seqs[0]}" in text
        assert ("session_history" in text) is tool_available
        assert "historical" in text.casefold() and "not instructions" in text.casefold()
        assert "SECRET-OLD-MARKER" not in text and "plan" not in text
        listed = call(h.session_history(), {"action": "list"})["items"]
        assert listed[-1]["window"] == r.seqs[0] == h.window  # the tool names the same window

    # --- the privacy floor -------------------------------------------------------------

    def test_no_row_at_or_below_the_floor_is_ever_returned(
        self, make_store: MakeStore, ws: str
    ) -> None:
        h = make_store().history(ws)
        h.append_many([msg("secret before reset"), msg("secret reply", "assistant")])
        h.clear_soft()
        h.append(msg("after the reset"))
        h.rollover([msg("next window")])
        tool = h.session_history()
        text = json.dumps([tool.call({"action": "search", "query": "secret"}),
                           tool.call({"action": "list"}),
                           tool.call({"action": "read", "seq": 1})])
        assert "secret before reset" not in text and "secret reply" not in text
        assert code(call(tool, {"action": "read", "seq": 1})) == "not_found"
        assert "after the reset" in tool.call({"action": "search", "query": "after"})
        assert [r.to_dict()["kind"] for r in h.provider_view()] == ["lead_in", "message"]

    def test_manual_reset_is_a_floor_for_every_action(self, make_store: MakeStore, ws: str) -> None:
        h = make_store(segment_bytes=512).history(ws)
        old = two_windows_before(h)
        floor = h.clear_soft().seqs[0]
        new = h.append_many([msg(f"tok new {i}") for i in range(5)]).seqs
        tool = h.session_history()
        assert found(tool, "tok") == new
        assert follow(tool, {"action": "list"}) == [
            {"window": floor, "reason": "manual", "first_seq": floor, "last_seq": new[-1],
             "rows": len(new)}]
        assert [r["seq"] for r in follow(tool, {"action": "list", "window": floor})] == new
        for w in (0, old[0], floor - 1):
            assert code(call(tool, {"action": "list", "window": w})) == "not_found"
            assert code(call(tool, {"action": "search", "query": "tok", "window": w})) \
                == "not_found"
        for s in (*old, floor):
            assert code(call(tool, {"action": "read", "seq": s})) == "not_found"
        # A second clear hides the first window after the first floor too.
        floor2 = h.clear_soft().seqs[0]
        assert found(tool, "tok") == []
        assert follow(tool, {"action": "list"}) == [
            {"window": floor2, "reason": "manual", "first_seq": floor2, "last_seq": floor2,
             "rows": 0}]

    def test_rollovers_and_compactions_are_crossable(self, make_store: MakeStore, ws: str) -> None:
        h = make_store(segment_bytes=512).history(ws)
        expect: list[int] = []
        windows = [0]
        expect += h.append_many([msg("tok a")]).seqs
        for i in range(6):
            if i % 2:
                r = h.compact([msg(f"tok summary {i}")])
                expect += r.seqs[1:]
            else:
                r = h.rollover([msg(f"tok trigger {i}")])
                expect += r.seqs[2:]
            windows.append(r.seqs[0])
            expect += h.append_many([msg(f"tok {i} {j}") for j in range(3)]).seqs
        tool = h.session_history()
        assert found(tool, "tok") == expect
        assert found(tool, "tok", limit=1) == expect
        listed = follow(tool, {"action": "list", "limit": 2})
        assert [w["window"] for w in listed] == windows
        assert [w["reason"] for w in listed] == ["start"] + ["rollover", "compaction"] * 3
        total = []
        for w in windows:
            rows = follow(tool, {"action": "list", "window": w, "limit": 2})
            assert all(r["window"] == w for r in rows)
            total += [r["seq"] for r in rows]
        assert total == expect

    def test_a_row_that_mentions_a_reset_is_not_a_floor(
        self, make_store: MakeStore, ws: str
    ) -> None:
        h = make_store(segment_bytes=512).history(ws)
        first = h.append_many([msg("tok first")]).seqs
        mentions = ['{"kind":"reset"}', '"kind" : "reset"', '{"contextBoundaryKind":"reset"}',
                    '\\u006bind":"reset']
        ids = h.append_many([msg(f"tok {m}") for m in mentions]).seqs
        # Caller-written nested objects with the marker: not a top-level kind.
        nested: list[dict[str, Any]] = [
            {"kind": "message", "role": "user", "meta": {"kind": "reset"},
             "parts": [{"type": "text", "text": "tok nested", "kind": "reset"}]},
            {"kind": "message", "role": "tool", "parts": [
                {"type": "tool_result", "id": "t1", "output": {"kind": "reset"}, "error": False}]},
        ]
        nseqs = h.append_many(nested).seqs
        last = h.append_many([msg("tok last")]).seqs
        tool = h.session_history()
        assert found(tool, "tok") == first + ids + nseqs[:1] + last
        assert found(tool, '"kind":"reset"') == [ids[0], nseqs[1]]
        assert [w["window"] for w in follow(tool, {"action": "list"})] == [0]
        assert h.window == 0 and h.snapshot().floor is None
