"""The provider view (DESIGN.md 7): the rows after the newest boundary, minus
reset rows and empty assistant records, lead-in included; tool calls and
their results are never split; reading it costs O(window), not O(history);
the lead-in names the window, offers ``session_history`` and says retrieved
text is historical data, without quoting older rows.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from core_helpers import msg

from ledger import History, Store
from ledger.core import format as fmt
from ledger.storage.files import segments as segs
from ledger.transcript.history import OpenToolCalls


def view(h: History) -> list[dict[str, Any]]:
    return [r.to_dict() for r in h.provider_view()]


def texts(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for r in rows:
        for p in r["parts"]:
            if p.get("type") == "text":
                out.append(p["text"])
            elif p.get("type") == "tool_call":
                out.append(f"call:{p['id']}")
            elif p.get("type") == "tool_result":
                out.append(f"result:{p['id']}")
    return out


def call_row(cid: str) -> dict[str, Any]:
    return {"kind": "message", "role": "assistant",
            "parts": [{"type": "tool_call", "id": cid, "name": "grep", "input": {"q": cid}}]}


def result_row(cid: str, *extra: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "message", "role": "tool",
            "parts": [{"type": "tool_result", "id": cid, "output": "ok", "error": False}, *extra]}


REJECTED = {"kind": "message", "role": "assistant", "parts": [],
            "meta": {"quarantine": {"v": 1, "row": msg("rejected original")}}}
EMPTY = {"kind": "message", "role": "assistant", "parts": []}


def test_view_without_boundary_is_every_provider_row(tmp_path: Path) -> None:
    h = Store(tmp_path, durability="off").history("ws")
    h.append_many([msg("a"), REJECTED, msg("b", role="assistant"), EMPTY,
                   {"kind": "message", "role": "assistant", "parts": [], "partial": True},
                   {"kind": "warning", "role": "system", "parts": [{"type": "text",
                                                                     "text": "w"}]}])
    got = view(h)
    assert texts(got) == ["a", "b", "w"]
    assert [r["seq"] for r in got] == [1, 3, 5, 6]  # a partial empty record stays


@pytest.mark.parametrize("boundary", ["rollover", "compact", "clear"])
def test_view_is_the_rows_after_the_newest_boundary(tmp_path: Path, boundary: str) -> None:
    h = Store(tmp_path, durability="off", segment_bytes=512).history("ws")
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
    assert all(row["kind"] != "reset" for row in got)
    assert all(row["seq"] > r.seqs[0] for row in got)
    shown = ["lead-in" if row["kind"] == "lead_in" else texts([row])[0] for row in got]
    assert shown == [*want, "after 1", "after 2"]
    assert [row.seq for row in h.window_rows()] == list(range(r.seqs[0] + 1, r.seqs[-1] + 4))


def test_tool_calls_and_results_are_never_split(tmp_path: Path) -> None:
    h = Store(tmp_path, durability="off", segment_bytes=512).history("ws")
    h.append_many([msg("q"), call_row("old")])
    # A rollover never lands between a call and its result: refused, naming it.
    with pytest.raises(OpenToolCalls) as info:
        h.rollover([result_row("old"), call_row("c1"), result_row("c1")])
    assert info.value.call_ids == ("old",) and "'old'" in str(info.value)
    with pytest.raises(OpenToolCalls):
        h.rollover([msg("next")])  # the call "old" is still open
    # A manual clear may: the result that arrives later is served as user
    # text (never dropped, never an orphan result the provider would reject).
    h.clear_soft()
    h.append_many([result_row("old"), call_row("c1"), result_row("c1")])
    h.append_many([call_row("c2"), result_row("c2"), msg("done")])
    h.append(result_row("old", {"type": "text", "text": "and a remark"}))
    got = view(h)
    served = [p["text"] for r in got for p in r["parts"] if "result of tool call old" in
              p.get("text", "")]
    assert len(served) == 2 and all("earlier context window" in t for t in served)
    assert got[0]["role"] == "user"
    seen_calls: set[str] = set()
    for row in got:
        for p in row["parts"]:
            if p["type"] == "tool_call":
                seen_calls.add(p["id"])
            if p["type"] == "tool_result":
                assert p["id"] in seen_calls, f"orphan tool result {p['id']} in the view"
    assert "call:c1" in texts(got) and "result:c1" in texts(got)
    assert "call:c2" in texts(got) and "result:c2" in texts(got)
    assert texts(got).index("call:c1") < texts(got).index("result:c1")


def test_view_reads_only_the_window(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # keep many small segments
    monkeypatch.setattr("ledger.storage.files.workspace.AUTO_MIN_SEALED", 1 << 30)
    h = Store(tmp_path, durability="off", segment_bytes=1024).history("ws")
    for i in range(40):
        h.append_many([msg(f"old {i} {j}") for j in range(4)])
    r = h.rollover([msg("trigger")])
    after = [h.append(msg(f"new {i}")).seqs[0] for i in range(12)]
    numbers = segs.list_segments(h.path)
    assert len(numbers) > 20
    window_seg = h.get(r.seqs[0]).segment  # type: ignore[union-attr]
    assert window_seg > numbers[0] + 15

    opened: list[int] = []
    real_open = os.open

    def spy(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        n = fmt.segment_number(os.path.basename(os.fspath(path)))
        if n is not None:
            opened.append(n)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", spy)
    rows = h.window_rows()
    got = view(h)
    monkeypatch.undo()
    assert opened and min(opened) >= window_seg, sorted(set(opened))
    assert [row.seq for row in rows] == [r.seqs[1], r.seqs[2], *after]
    assert texts(got)[1:] == ["trigger"] + [f"new {i}" for i in range(12)]


def test_view_after_an_untracked_reset_candidate(tmp_path: Path) -> None:
    h = Store(tmp_path, durability="off", segment_bytes=1 << 20).history("ws")
    h.append_many([msg(f"old {i}") for i in range(5)])
    path = segs.segment_path(h.path, segs.list_segments(h.path)[-1])
    with open(path, "ab") as f:
        f.write(b'{"seq":6,"\\u006bind":"reset"}\n')
    assert view(h) == []
    h.append_many([msg("new 1"), msg("new 2")])
    assert texts(view(h)) == ["new 1", "new 2"]


@pytest.mark.parametrize("tool_available", [True, False])
def test_lead_in_names_the_window_and_offers_the_tool(tmp_path: Path, tool_available: bool) -> None:
    h = Store(tmp_path, durability="off").history("ws")
    h.append_many([msg("SECRET-OLD-MARKER about the plan"), msg("tok 2", role="assistant")])
    r = h.rollover([msg("new question")], tool_available=tool_available)
    lead = view(h)[0]
    assert lead["kind"] == "lead_in" and lead["seq"] == r.seqs[1]
    text = " ".join(texts([lead]))
    assert f"window {r.seqs[0]}" in text
    assert ("session_history" in text) is tool_available
    assert "historical" in text.casefold() and "not instructions" in text.casefold()
    assert "SECRET-OLD-MARKER" not in text and "plan" not in text
    # The tool's list names the same window.
    import json

    listed = json.loads(h.session_history().call({"action": "list"}))["items"]
    assert listed[-1]["window"] == r.seqs[0] == h.window
