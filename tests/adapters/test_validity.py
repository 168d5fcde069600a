"""Every view the adapters emit passes its API's ordering rules
(``ledger.adapters.validate``): random canonical histories (clears, lead-ins,
warnings, quarantined and rejected rows, orphan results, open and reused call
ids) straight through the adapters, and random runs of the runtime object
(``Conversation``: rollovers, manual clears mid-turn, quarantines) through the
request bodies it returns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger import Store
from ledger.adapters import to_request
from ledger.adapters.validate import (
    anthropic_problems,
    chat_problems,
    problems,
    responses_problems,
)
from ledger.core.errors import LedgerError
from ledger.rollover.conversation import Conversation, SendRefused, tool_schema

APIS = ("openai-chat", "openai-responses", "anthropic")
IDS = ("call_0", "call_1", "toolu_2", "id with space")


# --- the validators catch what the APIs refuse --------------------------------------


def test_the_validators_name_each_broken_rule() -> None:
    assert chat_problems({"messages": []}) == ["messages: at least one message is required"]
    unanswered = {"messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": [{"id": "a", "type": "function",
                                              "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "user", "content": "next"},
    ]}
    assert "answered by []" in chat_problems(unanswered)[0]
    stray = {"messages": [{"role": "user", "content": "hi"},
                          {"role": "tool", "tool_call_id": "a", "content": "x"}]}
    assert "does not follow" in chat_problems(stray)[0]
    swapped = {"input": [
        {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "b", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "b", "output": "x"},
        {"type": "function_call_output", "call_id": "a", "output": "x"},
    ]}
    assert "in call order" in responses_problems(swapped)[0]
    # case 9 of issue 29: an Anthropic view starting with an assistant message
    first = {"messages": [{"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
                          {"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    assert "first message must be a user message" in anthropic_problems(first)[0]
    twice = {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}
    assert "must alternate" in anthropic_problems(twice)[0]
    late = {"messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f",
                                           "input": {}}]},
        {"role": "user", "content": [{"type": "text", "text": "first"},
                                     {"type": "tool_result", "tool_use_id": "t",
                                      "content": "x"}]},
    ]}
    found = anthropic_problems(late)
    assert any("after other content" in p for p in found)
    assert any("answered by []" in p for p in found)
    blank = {"messages": [{"role": "user", "content": [{"type": "text", "text": "  "}]}]}
    assert "empty text block" in anthropic_problems(blank)[0]


# --- random canonical histories through the adapters ---------------------------------

_text = st.sampled_from(["", " ", "hi", "look at this", "\n"])
_ids = st.sampled_from(IDS)


def _call(call_id: str, name: str) -> dict[str, Any]:
    return {"type": "tool_call", "id": call_id, "name": name, "input": {"q": 1}}


_part = st.one_of(
    _text.map(lambda t: {"type": "text", "text": t}),
    st.builds(_call, _ids, st.sampled_from(["bash", "session_history"])),
    st.builds(lambda i, o, e: {"type": "tool_result", "id": i, "output": o, "error": e},
              _ids, st.sampled_from(["", "ok", {"k": 1}, [{"type": "text", "text": "t"}]]),
              st.booleans()),
    st.just({"type": "reasoning", "text": "thinking"}),
    st.just({"type": "reasoning", "text": "signed", "signature": "sig", "id": "rs_1"}),
    st.just({"type": "media", "mime": "image/png", "url": "https://example.com/a.png"}),
)

_row = st.one_of(
    st.builds(lambda role, parts: {"kind": "message", "role": role, "parts": parts},
              st.sampled_from(["user", "assistant", "tool", "system"]),
              st.lists(_part, max_size=4)),
    st.builds(lambda kind, t: {"kind": kind, "role": "system",
                               "parts": [{"type": "text", "text": t}]},
              st.sampled_from(["lead_in", "warning"]), _text),
    st.just({"kind": "reset", "role": "system", "parts": []}),
    st.just({"kind": "truncation", "role": "system", "parts": []}),
    st.just({"kind": "message", "role": "assistant", "parts": []}),  # a rejected husk
    st.just({"kind": "message", "role": "user", "parts": [{"type": "text", "text": "secret"}],
             "meta": {"quarantine": {"reason": "too big"}}}),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_row, max_size=14))
def test_every_adapter_view_of_any_history_is_valid(rows: list[dict[str, Any]]) -> None:
    for api in APIS:
        body = to_request(api, rows)
        items = body["input" if api == "openai-responses" else "messages"]
        if not items:  # nothing visible: the API needs at least one message
            continue
        assert problems(api, body) == [], (api, rows, body)


# --- random runs of the runtime object ------------------------------------------------

BASH = tool_schema("bash", "Run a command.", {"type": "object"})


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"type": "text", "text": text}]}


def _words(n: int) -> str:
    return " ".join(f"w{i % 89}" for i in range(n))


_op = st.one_of(
    st.tuples(st.just("user"), st.integers(1, 150)),
    st.tuples(st.just("huge"), st.just(0)),  # quarantined (rule B5)
    st.tuples(st.just("calls"), st.integers(1, 3)),
    st.tuples(st.just("results"), st.integers(0, 3)),
    st.tuples(st.just("say"), st.integers(0, 30)),
    st.tuples(st.just("clear"), st.just(0)),
)


class _Run:
    def __init__(self, root: Path) -> None:
        self.conv = Conversation.open(Store(root, durability="off"), "ws", model="gpt-4o",
                                      context_limit=1500, system="Be brief.",
                                      tools={"bash": BASH})
        self.open: list[str] = []
        self.n = 0
        self.quarantined = 0

    def step(self, op: tuple[str, int]) -> None:
        kind, k = op
        conv = self.conv
        try:
            if kind == "user":
                self.check(conv.send(_user(_words(k))))
            elif kind == "huge":
                self.check(conv.send(_user(_words(5000))))
            elif kind == "calls":
                ids = [f"c{self.n + i}" for i in range(k)]
                self.n += k
                conv.record({"role": "assistant", "parts": [
                    {"type": "tool_call", "id": i, "name": "bash", "input": {"cmd": "ls"}}
                    for i in ids]})
                self.open += ids
            elif kind == "results" and self.open:
                done, self.open = self.open[:max(k, 1)], self.open[max(k, 1):]
                self.check(conv.send({"role": "tool", "parts": [
                    {"type": "tool_result", "id": i, "output": _words(40)} for i in done]}))
            elif kind == "say":
                conv.record({"role": "assistant", "parts": [{"type": "text",
                                                             "text": _words(k) or "ok"}]})
            elif kind == "clear":
                conv.clear()  # mid-turn when calls are open (case 9)
        except SendRefused as exc:
            self.quarantined += len(exc.quarantined)
        try:
            request = conv.request()
        except LedgerError:  # over the ceiling with a call open: no request (rule P2)
            return
        self.check(request)

    def check(self, request: Any) -> None:
        bodies = {"openai-chat": request.openai_chat(),
                  "openai-responses": request.openai_responses(),
                  "anthropic": request.anthropic()}
        for api, body in bodies.items():
            items = body["input" if api == "openai-responses" else "messages"]
            if api == "anthropic" and not items:
                continue  # a cleared window with nothing sent yet: no request to make
            assert problems(api, body) == [], (api, body)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(_op, min_size=3, max_size=25))
def test_every_request_of_a_random_run_is_valid(tmp_path_factory: Any,
                                                ops: list[tuple[str, int]]) -> None:
    run = _Run(tmp_path_factory.mktemp("run"))
    for op in ops:
        run.step(op)


def test_a_long_run_with_rollovers_clears_and_quarantines_stays_valid(tmp_path: Path) -> None:
    """The deterministic companion: it does roll over, clear mid-turn and
    quarantine, and every request of it is valid."""
    import random

    rng = random.Random(29)
    run = _Run(tmp_path)
    for _ in range(120):
        run.step(rng.choice([("user", rng.randint(20, 150)), ("calls", rng.randint(1, 3)),
                             ("results", 3), ("say", rng.randint(0, 30)), ("user", 60)]))
        if rng.random() < 0.02:
            run.step(("clear", 0))
        if rng.random() < 0.02:
            run.step(("huge", 0))
    resets = [r.data.get("reset", {}).get("reason") for r in run.conv.history.rows()
              if r.kind == "reset"]
    assert resets.count("rollover") >= 2 and "rollover" in resets
    assert len(resets) > resets.count("rollover")  # manual clears too
    assert run.quarantined >= 1


def test_a_manual_clear_mid_turn_never_starts_an_anthropic_view_with_the_assistant(
        tmp_path: Path) -> None:
    """Case 9 of issue 29: user, the model's reply, a clear, then the model's
    next output is recorded before the user speaks again."""
    conv = Conversation.open(Store(tmp_path, durability="off"), "ws", model="gpt-4o")
    conv.send(_user("deploy"))
    conv.record({"role": "assistant", "parts": [_call("call_9", "bash")]})
    conv.clear()
    conv.record({"role": "assistant", "parts": [{"type": "text", "text": "done"}]})
    request = conv.send(_user("thanks"))
    body = request.anthropic()
    assert body["messages"][0]["role"] == "user"
    assert anthropic_problems(body) == []
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
