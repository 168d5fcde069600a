"""Tool parts in rows that are not messages (a caller's warning, an older
build's or hostile lead-in) on a real store: only message rows hold calls and
results, so the provider view serves such a part as text, ``Conversation``'s
open calls agree with the view, and no request holds a result without its
call (found by turn8, issue 31 ninth round)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ledger import Store
from ledger.core.toolpairs import pair
from ledger.rollover.conversation import OpenCall
from tests.rollover.test_conversation import (
    assert_paired,
    assert_within,
    calls,
    conversation,
    result,
    says,
    user,
)

IN_WARNING = "it sat in a warning row, not a message row"


def _kinds_and_parts(messages: Any) -> list[tuple[str, str, list[Any]]]:
    return [(m.get("kind", "message"), m["role"], m["parts"]) for m in messages]


def test_a_result_in_a_warning_row_is_text_and_its_call_stays_open(tmp_path: Path) -> None:
    conv = conversation(tmp_path)
    conv.send(user("list the files"))
    conv.record(calls("c1"))
    # A caller's warning row holding a result for the open call: the row
    # rules accept it (any part in a warning), the readers must not pair it.
    conv.history.append({"kind": "warning", "role": "tool", "parts": [
        {"type": "tool_result", "id": "c1", "output": "a.txt b.txt", "error": False}]})

    view = [r.to_dict() for r in conv.history.provider_view()]
    warning_text = {"type": "text", "text": f"[result of tool call c1; {IN_WARNING}]\na.txt b.txt"}
    assert [(r["kind"], r["role"], r["parts"]) for r in view] == [
        ("message", "user", [{"type": "text", "text": "list the files"}]),
        ("message", "assistant", calls("c1")["parts"]),
        ("warning", "user", [warning_text]),  # no result left: not a tool row
    ]
    stored = conv.history.get(view[2]["seq"])
    assert stored is not None and stored.parts[0]["type"] == "tool_result"  # unchanged on disk

    # The view and Conversation agree: the call is open (no result answers it).
    assert conv.open_calls() == [OpenCall("c1", "bash", view[1]["seq"])]
    assert [c.id for c in pair(view).open_calls()] == ["c1"] and pair(view).unmatched() == []

    # The request leaves the open call out, as for any open call, and keeps
    # the warning as text: no result without its call.
    req = conv.request()
    assert _kinds_and_parts(req.messages) == [
        ("message", "user", [{"type": "text", "text": "list the files"}]),
        ("warning", "user", [warning_text]),
    ]
    assert_paired(req.messages)

    # The call's real result answers it; the request then holds both.
    conv.record(result("c1", "a.txt b.txt c.txt"))
    assert conv.open_calls() == []
    req = conv.request()
    assert_paired(req.messages)
    assert [m["parts"][0]["type"] for m in req.messages] == [
        "text", "tool_call", "text", "tool_result"]
    assert_within(req, conv)


def test_a_user_message_settles_a_call_whose_only_result_sat_in_a_warning(
        tmp_path: Path) -> None:
    conv = conversation(tmp_path)
    conv.send(user("run it"))
    conv.record(calls("c1"))
    conv.history.append({"kind": "warning", "role": "system", "parts": [
        {"type": "tool_result", "id": "c1", "output": "done", "error": False}]})
    req = conv.send(user("go on"))
    assert_paired(req.messages)  # the call, its settling result, then the user
    kinds = [(m.get("kind", "message"), m["role"], m["parts"][0]["type"]) for m in req.messages]
    assert kinds == [("message", "user", "text"), ("message", "assistant", "tool_call"),
                     ("warning", "system", "text"), ("message", "tool", "tool_result"),
                     ("message", "user", "text")]
    assert conv.open_calls() == []
    conv.record(says("ok"))
    assert_paired(conv.request().messages)


def test_a_call_in_a_warning_row_is_text_and_its_result_an_orphan(tmp_path: Path) -> None:
    conv = conversation(tmp_path)
    conv.send(user("hello"))
    conv.history.append({"kind": "warning", "role": "assistant", "parts": [
        {"type": "text", "text": "note"},
        {"type": "tool_call", "id": "w1", "name": "bash", "input": {"cmd": "ls"}}]})
    conv.record(result("w1", "out"))
    view = [r.to_dict() for r in conv.history.provider_view()]
    assert view[1]["parts"] == [
        {"type": "text", "text": "note"},
        {"type": "text", "text": f'[tool call w1 to bash; {IN_WARNING}]\n{{"cmd":"ls"}}'}]
    assert view[2]["role"] == "user" and view[2]["parts"] == [{"type": "text", "text": (
        "[result of tool call w1; its call sat in a warning row, not a message row]\nout")}]
    assert conv.open_calls() == []  # the warning's call is no call: nothing waits for it
    req = conv.request()
    assert_paired(req.messages)
    assert not any(p.get("type", "").startswith("tool_") for m in req.messages
                   for p in m["parts"])


@pytest.mark.parametrize("engine", ["files", "memory", "postgres"])
def test_check_pairs_only_message_rows_on_every_engine(
        engine: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    # The file engine's check streams the pairing rule: a warning's result
    # answers no call and a warning's call waits for none, as on the row engines.
    root = {"files": lambda: str(tmp_path), "memory": lambda: f"memory://{tmp_path.name}",
            "postgres": lambda: request.getfixturevalue("pg_root")}[engine]()
    h = Store(root, durability="off").history("other-kinds")
    h.append(user("go"))
    h.append(calls("a"))
    h.append({"kind": "warning", "role": "tool", "parts": [
        {"type": "tool_result", "id": "a", "output": "not this"},
        {"type": "tool_call", "id": "w", "name": "bash", "input": {}}]})
    report = h.engine.verify()
    assert report.ok
    assert [(f.severity, f.code) for f in report.findings] == [("notice", "open_tool_call")]
    assert "'a'" in report.findings[0].message and "'w'" not in report.findings[0].message
    h.append(result("a", "ok"))
    assert h.engine.verify().findings == []
