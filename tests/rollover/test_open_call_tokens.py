"""A request's ``tokens`` is the count of what it sends, also while a tool
call is open: the request leaves the open call out (no provider accepts a
call without its result), and its count leaves it out too. Checked with the
tests' independent recount (``assert_within``) on every way a request is
made: a send, ``request()``, ``send_stored``, a live middleware hook, a
warning, a rollover; on each engine the conversation tests use. (Before,
the count held the call the request left out: 511 counted, 488 sent.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ledger import Store
from ledger.admission import MiddlewareRegistry, Registration
from ledger.rollover.conversation import Conversation, Request
from tests.rollover.test_conversation import (
    BASH,
    assert_paired,
    assert_within,
    calls,
    result,
    says,
    user,
    words,
)


def _root(engine: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    return {"files": lambda: str(tmp_path), "memory": lambda: f"memory://{tmp_path.name}",
            "postgres": lambda: request.getfixturevalue("pg_root")}[engine]()


def _open(root: str, limit: int = 3000, **kw: Any) -> Conversation:
    return Conversation.open(Store(root, durability="off"), "open-calls", model="gpt-4o",
                             context_limit=limit, system="You are a careful agent.",
                             tools={"bash": BASH}, **kw)


def _call_ids(req: Request) -> list[str]:
    return [p["id"] for m in req.messages for p in m["parts"] if p.get("type") == "tool_call"]


@pytest.mark.parametrize("engine", ["files", "memory", "postgres"])
def test_a_request_with_an_open_call_counts_what_it_sends(
        engine: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    conv = _open(_root(engine, tmp_path, request))
    conv.send(user("look at both " + words(30, "q")))
    conv.record(calls("a", "b"))
    # a send that answers one of two parallel calls: "b" stays open
    sent = conv.send(result("a", words(60, "out")))
    assert [c.id for c in conv.open_calls()] == ["b"]
    assert _call_ids(sent) == ["a"]  # the open call is left out ...
    assert_within(sent, conv)  # ... and not counted
    assert sent.decision.tokens == sent.tokens  # the decision counted the same request
    assert_paired(sent.messages)

    # the window as it is, rebuilt: the same rows, the same count
    again = conv.request()
    assert [m["parts"] for m in again.messages] == [m["parts"] for m in sent.messages]
    assert again.tokens == sent.tokens
    assert_within(again, conv)

    # a trigger stored before the send (the Agents SDK session's way)
    stored = conv.history.append(calls("c")).seqs[0]
    late = conv.send_stored(stored)
    assert [c.id for c in conv.open_calls()] == ["b", "c"] and _call_ids(late) == ["a"]
    assert_within(late, conv)

    # the open calls answered: the request holds them, counted
    conv.record(result("c", words(20, "c")))
    done = conv.send(result("b", words(20, "b")))
    assert sorted(_call_ids(done)) == ["a", "b", "c"]
    assert_within(done, conv)
    assert done.tokens > sent.tokens


@pytest.mark.parametrize("hooked", [False, True])
def test_open_calls_with_a_live_hook_a_warning_and_a_rollover_count_what_is_sent(
        tmp_path: Path, hooked: bool) -> None:
    """Parallel calls answered one at a time, turn after turn: a warning and
    rollovers on the way; with a live hook adding a row to each request
    (which blocks rollovers: it is not certified), in a budget it fits."""
    note = {"kind": "message", "role": "user", "parts": [{"type": "text", "text": "hook note"}]}

    def hook(request: dict[str, Any], mount: Any) -> dict[str, Any]:
        return {**request, "messages": [*request["messages"], note]}

    registry = MiddlewareRegistry()
    conv = _open(str(tmp_path), limit=16000 if hooked else 2000, registry=registry)
    if hooked:
        registry.register(Registration.unrestricted("r1", "plugin", hook))
    seen = {"warned": 0, "rolled": 0}
    for turn in range(14):
        req = conv.send(user(f"turn {turn}: " + words(40, "q")))
        assert_within(req, conv)
        seen["warned"] += req.warned
        seen["rolled"] += req.rolled_over
        conv.record(calls(f"t{turn}a", f"t{turn}b"))
        req = conv.send(result(f"t{turn}a", words(40, "a")))
        assert [c.id for c in conv.open_calls()] == [f"t{turn}b"]
        assert f"t{turn}b" not in _call_ids(req)
        if hooked:
            assert req.messages[-1]["parts"] == note["parts"]  # the hook's row, counted
        assert_within(req, conv)
        assert_within(conv.request(), conv)
        req = conv.send(result(f"t{turn}b", words(40, "b")))
        assert_within(req, conv)
        assert_paired(req.messages)
        seen["warned"] += req.warned
        seen["rolled"] += req.rolled_over
        conv.record(says(words(10, "ok")))
    if not hooked:
        assert seen["warned"] >= 1 and seen["rolled"] >= 1
