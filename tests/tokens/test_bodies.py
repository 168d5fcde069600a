"""OpenAI request bodies counted by the published rules (``ledger.tokens.bodies``):
the guards' count of a request is the reference count (OpenAI's cookbook, with
the real tiktoken encoding, ``tests/helpers/cookbook.py``) of the exact body the
runtime object sends, Chat Completions and Responses, tool calls and schemas
included; ``exact`` is true for gpt-4o; the ``session_history`` schema's cost."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger import Store
from ledger.adapters import anthropic, openai_responses, to_request
from ledger.rollover.conversation import Conversation, tool_schema
from ledger.rollover.guards import check_request
from ledger.tokens.counting import TokenCounter
from ledger.transcript.retrieval.args import DESCRIPTION, PARAMETERS
from tests.helpers.cookbook import chat_body_tokens, num_tokens_for_tools, responses_body_tokens

BASH = tool_schema("bash", "Run a shell command and return its output.",
                   {"type": "object", "properties": {
                       "cmd": {"type": "string", "description": "the command line"},
                       "shell": {"type": "string", "enum": ["bash", "sh", "zsh"],
                                 "description": "which shell."}},
                    "required": ["cmd"]})
HISTORY = tool_schema("session_history", DESCRIPTION, PARAMETERS)


def _rows() -> list[dict[str, Any]]:
    return [
        {"kind": "message", "role": "user", "parts": [{"type": "text", "text": "list /tmp"}]},
        {"kind": "message", "role": "assistant", "parts": [
            {"type": "text", "text": "Running two commands."},
            {"type": "tool_call", "id": "call_a1", "name": "bash", "input": {"cmd": "ls -la /tmp"}},
            {"type": "tool_call", "id": "call_b2", "name": "bash",
             "input": {"cmd": "du -sh /tmp", "shell": "sh"}}]},
        {"kind": "message", "role": "tool", "parts": [
            {"type": "tool_result", "id": "call_a1", "output": "a.txt\nb.txt\n" * 30},
            {"type": "tool_result", "id": "call_b2", "output": {"size": "4.0K", "ok": True}}]},
        {"kind": "message", "role": "assistant", "parts": [{"type": "text", "text": "Done."}]},
        {"kind": "message", "role": "user", "parts": [{"type": "text", "text": "thanks ✓"}]},
    ]


def test_a_request_with_tool_calls_counts_what_the_body_costs(tmp_path: Path) -> None:
    """Issue 29, case 8: the runtime object's count at a tool step is the
    reference count of the Chat Completions body it returns (it was ~1.6x),
    and exact for gpt-4o."""
    conv = Conversation.open(Store(tmp_path, durability="off"), "ws", model="gpt-4o",
                             system="You are careful.", tools={"bash": BASH})
    rows = _rows()
    conv.send(rows[0])
    conv.record(rows[1])
    request = conv.send(rows[2])
    reference = chat_body_tokens(request.openai_chat())
    assert request.exact
    assert request.tokens == reference
    conv.record(rows[3])
    request = conv.send(rows[4])
    assert request.exact and request.tokens == chat_body_tokens(request.openai_chat())


def test_guard_counts_equal_the_reference_for_both_openai_apis() -> None:
    rows = _rows()
    tools = [BASH, HISTORY]
    verdict = check_request("gpt-4o", rows=rows, system="sys", memory="mem", tools=tools)
    body = to_request("openai-chat", [{"role": "system", "parts": [
        {"type": "text", "text": "sys\n\nmem"}]}, *rows],
        tools=[{"type": "function", "function": t} for t in tools])
    assert verdict.exact and verdict.tokens == chat_body_tokens(body)
    # Responses: the same rules over its items (calls and outputs are items)
    counter = TokenCounter("gpt-4o", cache=None).body_counter()
    responses = openai_responses.to_request(rows, tools=[{"type": "function", **t}
                                                         for t in tools])
    counted = counter.responses(responses)
    assert counted.exact and counted.tokens == responses_body_tokens(responses)
    # gpt-4 (cl100k) uses its own function constants
    old = check_request("gpt-4", rows=rows, tools=tools)
    body = to_request("openai-chat", rows,
                      tools=[{"type": "function", "function": t} for t in tools])
    assert old.tokens == chat_body_tokens(body, "cl100k_base")


def test_schema_keywords_outside_the_rules_are_charged_and_inexact() -> None:
    ranged = tool_schema("f", "d", {"type": "object", "properties": {
        "n": {"type": "integer", "minimum": 0, "description": "a count"}}})
    plain = tool_schema("f", "d", {"type": "object", "properties": {
        "n": {"type": "integer", "description": "a count"}}})
    a = check_request("gpt-4o", tools=[ranged])
    b = check_request("gpt-4o", tools=[plain])
    assert b.exact and not a.exact and a.tokens > b.tokens


def test_media_is_an_allowance_and_anthropic_stays_an_estimate() -> None:
    picture = {"kind": "message", "role": "user", "parts": [
        {"type": "media", "mime": "image/png", "data": "A" * 40_000}]}
    verdict = check_request("gpt-4o", rows=[picture])
    assert not verdict.exact and verdict.tokens < 2_000
    claude = check_request("claude-sonnet-4", rows=_rows(), tools=[BASH])
    assert not claude.exact and claude.safety_factor > 1


def test_the_session_history_schema_costs_what_the_docs_say() -> None:
    """The schema is advertised in every request: 327 tokens by the rules
    (413 before it was shrunk, 276 before ranked search's ``current``, 301
    before the list of phrasings); ``query`` stays typed a string so the
    count stays exact (a type list has no published rule); the
    runtime facts page states the number, as the site's build counts it
    (docsgen.tool.cost)."""
    from docsgen import tool

    tokens = num_tokens_for_tools([{"type": "function", "function": HISTORY}])
    assert tokens == 327
    counter = TokenCounter("gpt-4o", cache=None).body_counter()
    counted = counter.tools([{"type": "function", "function": HISTORY}])
    assert counted.exact and counted.tokens == tokens
    page = (Path(__file__).resolve().parents[2] / "docs" / "reference" / "runtime.md")
    assert "<!-- generated: tool-cost -->" in page.read_text(encoding="utf-8")
    assert tool.cost() == f"{tokens} tokens"


# --- real transcripts ------------------------------------------------------------


def _transcript_rows(path: Path) -> Iterator[dict[str, Any]]:
    """Canonical rows of one real transcript, through the adapters' readers."""
    for line in path.read_bytes().splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if not isinstance(obj, dict):
            continue
        message, payload = obj.get("message"), obj.get("payload")
        if isinstance(message, dict) and message.get("role") in ("user", "assistant"):
            yield from anthropic.from_messages([message])
        elif obj.get("type") == "response_item" and isinstance(payload, dict):
            yield from openai_responses.from_input([payload])
        elif obj.get("role") in ("user", "assistant") and isinstance(obj.get("parts"), list):
            text = "\n".join(p["text"] for p in obj["parts"] if isinstance(p, dict)
                             and p.get("type") == "text" and isinstance(p.get("text"), str))
            if text:
                yield {"kind": "message", "role": obj["role"],
                       "parts": [{"type": "text", "text": text}]}


def test_counts_match_tiktoken_over_exact_bodies_of_real_transcripts(
        real_transcripts: Path) -> None:
    """Windows of 40 rows of every real transcript, each sent with a system
    prompt and two tools: within 2% of the reference count of the exact Chat
    Completions body (in fact equal where the count says exact)."""
    tools = [BASH, HISTORY]
    chat_tools = [{"type": "function", "function": t} for t in tools]
    errors: list[float] = []
    with_media: list[int] = []
    for path in sorted(real_transcripts.rglob("*.jsonl")):
        rows = list(_transcript_rows(path))
        for start in range(0, len(rows), 40):
            window = rows[start:start + 40]
            if not window:
                continue
            verdict = check_request("gpt-4o", rows=window, system="You are a coding agent.",
                                    tools=tools, context_limit=10**9)
            body = to_request("openai-chat", [{"role": "system", "parts": [
                {"type": "text", "text": "You are a coding agent."}]}, *window],
                tools=chat_tools)
            reference = chat_body_tokens(body)
            if verdict.exact:
                assert verdict.tokens == reference, path.name
                errors.append(verdict.tokens / reference - 1)
            else:  # media: the reference leaves it out, the count adds its allowance
                with_media.append(verdict.tokens - reference)
    assert len(errors) >= 20
    assert max(abs(e) for e in errors) <= 0.02, max(errors)
    assert all(extra > 0 for extra in with_media)


@pytest.mark.parametrize("api", ["openai-chat", "openai-responses"])
def test_a_body_counter_is_cached_per_message(api: str) -> None:
    counter = TokenCounter("gpt-4o")
    bodies = counter.body_counter()
    body = to_request(api, _rows())
    first = bodies.body(api, body)
    again = bodies.body(api, body)
    assert first == again and first.tokens > 0


# --- the block cache never changes a count ----------------------------------------


def test_counting_in_blocks_equals_counting_the_whole_body() -> None:
    """The guards count a request in independent blocks (cached); over random
    histories (reused ids, orphans, lead-ins, quarantined rows) the sum is the
    count of the whole rendered body, for both OpenAI APIs."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from ledger.tokens.shapes import BodyShape
    from tests.adapters.test_validity import _row

    user_text = st.sampled_from(["hi", "", "next"]).map(
        lambda t: {"kind": "message", "role": "user", "parts": [{"type": "text", "text": t}]})
    said = st.sampled_from(["ok", " ", "done"]).map(
        lambda t: {"kind": "message", "role": "assistant", "parts": [{"type": "text", "text": t}]})
    ids = st.sampled_from(["c1", "c2", "c3"])
    call = ids.map(lambda i: {"kind": "message", "role": "assistant", "parts": [
        {"type": "tool_call", "id": i, "name": "bash", "input": {"cmd": "ls"}}]})
    result = st.tuples(ids, st.sampled_from(["out", [{"type": "media", "mime": "image/png",
                                                       "url": "https://e.com/a.png"}]])).map(
        lambda t: {"kind": "message", "role": "tool",
                   "parts": [{"type": "tool_result", "id": t[0], "output": t[1]}]})

    @settings(max_examples=600, deadline=None)
    @given(st.lists(st.one_of(_row, user_text, said, call, result), max_size=16), st.booleans(),
           st.sampled_from(["openai-chat", "openai-responses"]))
    def check(rows: list[dict[str, Any]], system: bool, api: str) -> None:
        counter = TokenCounter("gpt-4o")
        parts = BodyShape(api).request_parts(counter, rows, system="sys" if system else "")
        head = [{"role": "system", "parts": [{"type": "text", "text": "sys"}]}] if system else []
        whole = counter.body_counter().messages(
            to_request(api, [*head, *rows])["input" if api == "openai-responses" else "messages"])
        assert parts["system"].tokens + parts["rows"].tokens == whole.tokens, rows

    check()


# --- a bound found without the tokenizer is never below the count ------------------


def test_the_request_bound_is_never_below_the_count() -> None:
    """``request_bound`` (what ``Conversation.record`` checks against the
    hard ceiling before it counts) is at least the guards' count of the same
    request, over random rows (any text, tool calls with nested inputs,
    structured results, orphans, media), system and memory text, for both
    OpenAI encodings; None only where it says it cannot bound (media, a
    string longer than a chunk)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from ledger.rollover.guards import request_bound, request_counter
    from ledger.rollover.rules import ProviderRequest
    from tests.adapters.test_validity import _row

    text = st.text(max_size=80)
    ids = st.sampled_from(["c1", "c2", "call_3"])
    json_value = st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | text,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
        max_leaves=8)
    said = st.tuples(st.sampled_from(["user", "assistant", "system"]), text).map(
        lambda t: {"kind": "message", "role": t[0], "parts": [{"type": "text", "text": t[1]}]})
    call = st.tuples(ids, text, st.dictionaries(text, json_value, max_size=3)).map(
        lambda t: {"kind": "message", "role": "assistant", "parts": [
            {"type": "tool_call", "id": t[0], "name": t[1] or "bash", "input": t[2]}]})
    result = st.tuples(ids, text | json_value, st.booleans()).map(
        lambda t: {"kind": "message", "role": "tool",
                   "parts": [{"type": "tool_result", "id": t[0], "output": t[1],
                              "error": t[2]}]})
    bound, count = request_bound(), request_counter()

    @settings(max_examples=400, deadline=None)
    @given(st.lists(st.one_of(_row, said, call, result), max_size=8), text, text,
           st.sampled_from(["gpt-4o", "gpt-4"]))
    def check(rows: list[dict[str, Any]], system: str, memory: str, model: str) -> None:
        request = ProviderRequest(model, system, (BASH, HISTORY), tuple(rows), memory)
        found = bound(request)
        assert found is None or found >= count(request)[0], rows

    check()
    plain = ProviderRequest("gpt-4o", "You are careful.", (BASH, HISTORY),
                            tuple(_rows()[:2] + _rows()[3:]), "")
    found = bound(plain)
    assert found is not None and found >= count(plain)[0]
    image = {"kind": "message", "role": "user", "parts": [
        {"type": "media", "mime": "image/png", "url": "https://e.com/a.png"}]}
    assert bound(ProviderRequest("gpt-4o", "", (), (image,), "")) is None
    assert bound(ProviderRequest("claude-sonnet-4", "", (), tuple(_rows()), "")) is None


def test_the_bound_walks_a_message_as_the_count_does() -> None:
    """``ByteBound`` (``request_bound``'s measure of each message) walks a
    message by ``BodyCounter``'s own rules (framing, ``name`` beside a role,
    ``type`` values skipped, numbers, booleans and null free) with each string
    at its UTF-8 length: over random messages it equals a body counter whose
    text count is that length. A media node, a string longer than the limit
    or a lone surrogate anywhere but under a ``type`` key leaves no bound."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from ledger.tokens.bodies import BodyCounter, ByteBound
    from ledger.tokens.units import Count

    limit = 16
    text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=limit)
    keys = st.sampled_from(["name", "role", "content", "text", "id"]) | text.filter(
        lambda k: k != "type")  # a nested ``type`` is a string (``kinds``), as rendered
    kinds = st.sampled_from(["text", "function", "input_text", "message"])
    value = st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | text,
        lambda inner: (st.lists(inner, max_size=3) | st.lists(inner, max_size=3).map(tuple)
                       | st.dictionaries(keys, inner, max_size=3)
                       | st.tuples(kinds, st.dictionaries(keys, inner, max_size=3)).map(
                           lambda t: {**t[1], "type": t[0]})),
        max_leaves=10)
    messages = st.tuples(st.dictionaries(keys | st.just("type"), value, max_size=4),
                         st.sampled_from([None, "user", "tool"])).map(
        lambda t: t[0] if t[1] is None else {**t[0], "role": t[1]})
    poison = st.sampled_from([{"type": "image_url", "image_url": {"url": "https://e.com/a"}},
                              {"type": "input_file", "file_id": "f"}, "x" * (limit + 1),
                              "ok \ud800"])
    utf8 = BodyCounter(lambda s: Count(len(s.encode("utf-8")), True), encoding="")

    @settings(max_examples=500, deadline=None)
    @given(messages, poison, st.sampled_from(["content", "type"]))
    def check(message: dict[str, Any], bad: Any, where: str) -> None:
        bound = ByteBound(limit)
        walked = utf8.message(message)
        assert walked.exact
        assert bound.messages([message]) == walked.tokens, message
        assert bound.messages([message, message]) == 2 * walked.tokens
        hidden = {**message, where: [message.get(where), bad]}
        found = bound.messages([message, hidden])
        if where == "type":  # structure, not text: never measured
            assert found == walked.tokens + utf8.message(hidden).tokens
        else:
            assert found is None, hidden

    check()


def test_a_counter_without_a_cache_leaves_nothing_in_the_shapes_memos() -> None:
    """``cache=None`` means no caching at all: neither the request's parts,
    its blocks nor the tools' count (``request_bound``) are kept by the
    shape, with a cache all three are."""
    from ledger.rollover.guards import request_bound
    from ledger.rollover.rules import ProviderRequest
    from ledger.tokens.rows import RowTokenCache
    from ledger.tokens.shapes import BodyShape

    rows = tuple(_rows()[:2])
    for cache, kept in ((None, False), (RowTokenCache(), True)):
        shape = BodyShape("openai-responses")
        counter = TokenCounter("gpt-4o", cache=cache)
        shape.request_parts(counter, rows, system="s", tools=(BASH, HISTORY))
        shape.request_bound(counter, rows, system="s", tools=(BASH, HISTORY))
        assert (bool(shape._recent), bool(shape._done), bool(shape._tool_counts)) == (
            kept, kept, kept)
    assert request_bound(cache=None)(
        ProviderRequest("gpt-4o", "s", (BASH, HISTORY), rows, "")) is not None
