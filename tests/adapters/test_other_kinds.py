"""The adapters on raw rows (not a provider view) pair tool parts only in
message rows, as ``ledger.core.toolpairs`` and the view do: a warning's or
lead-in's result answers no call and its call awaits no result; both are
sent as text. The rows are those of ``tests/rollover/test_other_kinds.py``."""

from __future__ import annotations

from typing import Any

import pytest

from ledger.adapters import to_request
from ledger.adapters.common import MISSING_RESULT
from ledger.adapters.validate import problems
from ledger.core.windows import provider_rows
from tests.rollover.test_conversation import calls, result, user
from tests.rollover.test_other_kinds import IN_WARNING

APIS = ("openai-chat", "openai-responses", "anthropic")

A_WARNINGS_RESULT = [
    user("list the files"),
    calls("c1"),
    {"kind": "warning", "role": "tool", "parts": [
        {"type": "tool_result", "id": "c1", "output": "a.txt b.txt", "error": False}]},
]
A_WARNINGS_CALL = [
    user("hello"),
    {"kind": "warning", "role": "assistant", "parts": [
        {"type": "text", "text": "note"},
        {"type": "tool_call", "id": "w1", "name": "bash", "input": {"cmd": "ls"}}]},
    result("w1", "out"),
]
BOTH_IN_A_WARNING = [
    user("go"),
    calls("a"),
    {"kind": "warning", "role": "tool", "parts": [
        {"type": "tool_result", "id": "a", "output": "not this"},
        {"type": "tool_call", "id": "w", "name": "bash", "input": {}}]},
    result("a", "ok"),
]
A_LEAD_INS_CALL = [
    {"kind": "lead_in", "role": "system", "parts": [
        {"type": "text", "text": "window 2"},
        {"type": "tool_call", "id": "l1", "name": "bash", "input": {}}]},
    user("go on"),
    result("l1", "late"),
]


def _chat(rows: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """(role, tool call ids or the answered id or the text) of each message."""
    out: list[tuple[str, Any]] = []
    for m in to_request("openai-chat", rows, model="m")["messages"]:
        if m.get("tool_calls"):
            out.append((m["role"], [c["id"] for c in m["tool_calls"]]))
        elif m["role"] == "tool":
            out.append(("tool", (m["tool_call_id"], m["content"])))
        else:
            content = m["content"]
            out.append((m["role"], content if isinstance(content, str)
                         else [p.get("text") for p in content]))
    return out


def _pairs(api: str, body: dict[str, Any]) -> list[tuple[str, ...]]:
    """The calls and the results answering them, in order, in ``api``'s body."""
    found: list[tuple[str, ...]] = []
    if api == "openai-chat":
        for m in body["messages"]:
            found += [("call", c["id"]) for c in m.get("tool_calls") or []]
            if m["role"] == "tool":
                found.append(("result", m["tool_call_id"], m["content"]))
    elif api == "openai-responses":
        for item in body["input"]:
            if item["type"] == "function_call":
                found.append(("call", item["call_id"]))
            elif item["type"] == "function_call_output":
                found.append(("result", item["call_id"], item["output"]))
    else:
        for m in body["messages"]:
            for block in m["content"] if isinstance(m["content"], list) else []:
                if block["type"] == "tool_use":
                    found.append(("call", block["id"]))
                elif block["type"] == "tool_result":
                    found.append(("result", block["tool_use_id"], block["content"]))
    return found


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("rows", [A_WARNINGS_RESULT, A_WARNINGS_CALL, BOTH_IN_A_WARNING,
                                  A_LEAD_INS_CALL])
def test_raw_rows_and_the_view_make_valid_bodies_with_the_same_pairs(
        api: str, rows: list[dict[str, Any]]) -> None:
    raw = to_request(api, rows, model="m")
    viewed = to_request(api, provider_rows(rows), model="m")
    assert problems(api, raw) == [] and problems(api, viewed) == []
    assert _pairs(api, raw) == _pairs(api, viewed)


def test_a_warnings_result_answers_no_call() -> None:
    assert _chat(A_WARNINGS_RESULT) == [
        ("user", "list the files"),
        ("assistant", ["c1"]),
        ("tool", ("c1", MISSING_RESULT)),  # the call is open: no result was recorded
        ("user", f"[result of tool call c1; {IN_WARNING}]\na.txt b.txt"),  # the warning's
    ]


def test_a_warnings_call_awaits_no_result() -> None:
    assert _chat(A_WARNINGS_CALL) == [
        ("user", "hello"),
        ("assistant", ["note", f'[tool call w1 to bash; {IN_WARNING}]\n{{"cmd":"ls"}}']),
        # no call to answer: text, in the provider view's words
        ("user", "[result of tool call w1; its call sat in a warning row, not a message row]"
                 "\nout"),
    ]


def test_a_result_in_a_message_answers_the_call_a_warnings_result_named() -> None:
    assert _chat(BOTH_IN_A_WARNING) == [
        ("user", "go"),
        ("assistant", ["a"]),
        ("tool", ("a", "ok")),  # the message's result, not the warning's
        ("user", [f"[result of tool call a; {IN_WARNING}]\nnot this",
                  f"[tool call w to bash; {IN_WARNING}]\n{{}}"]),
    ]


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("rows", [A_WARNINGS_RESULT, A_WARNINGS_CALL, BOTH_IN_A_WARNING,
                                  A_LEAD_INS_CALL])
def test_a_warnings_and_a_lead_ins_tool_parts_read_the_same_raw_and_viewed(
        api: str, rows: list[dict[str, Any]]) -> None:
    """One wording (``ledger.core.windows.other_kind_parts``): the adapters
    given the raw rows send a lead-in's or warning's tool parts in the
    provider view's words, and so render those rows exactly as the view's."""
    others = [r for r in rows if r.get("kind") in ("warning", "lead_in")]
    viewed = [r for r in provider_rows(rows) if r.get("kind") in ("warning", "lead_in")]
    assert to_request(api, others, model="m") == to_request(api, viewed, model="m")
    texts = [p["text"] for r in viewed for p in r["parts"]]
    assert any(f"sat in a {others[0]['kind']} row, not a message row" in t for t in texts)
