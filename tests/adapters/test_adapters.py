"""Provider adapters: golden request shapes, typed-definition checks, round trips."""

from __future__ import annotations

import collections.abc
import itertools
import json
import types
import typing
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.adapters import ADAPTERS, anthropic, from_request, openai_chat, to_request
from ledger.adapters.common import MISSING_RESULT, conversation

APIS = sorted(ADAPTERS)
HIDDEN = "#hidden#"


# --- a strict structural check against the SDKs' TypedDict request definitions ---


def conforms(value: Any, tp: Any, path: str = "$") -> list[str]:
    """Errors of ``value`` against a TypedDict-based type: unknown keys, missing
    required keys, wrong literals or types (stricter than the SDKs, which accept
    extra keys)."""
    import typing_extensions as te  # installed with the SDKs this check is for
    origin, args = te.get_origin(tp), te.get_args(tp)
    if tp is Any or tp is object:
        return []
    if hasattr(tp, "__value__") and not te.is_typeddict(tp):
        return conforms(value, tp.__value__, path)
    if origin in (te.Required, te.NotRequired, te.ReadOnly, te.Annotated):
        return conforms(value, args[0], path)
    if origin is typing.Union or isinstance(tp, types.UnionType):
        failures = []
        for arm in args:
            errors = conforms(value, arm, path)
            if not errors:
                return []
            failures.append(errors)
        return [f"{path}: matches no arm; closest: {min(failures, key=len)[:2]}"]
    if origin is te.Literal:
        return [] if value in args else [f"{path}: {value!r} not in {args}"]
    if tp is type(None):
        return [] if value is None else [f"{path}: expected null"]
    if te.is_typeddict(tp):
        if not isinstance(value, dict):
            return [f"{path}: expected an object ({tp.__name__})"]
        hints = te.get_type_hints(tp, include_extras=True)
        # __required_keys__ is wrong under postponed annotations: read Required[] here.
        required = {k for k, h in hints.items() if te.get_origin(h) is te.Required
                    or (tp.__total__ and te.get_origin(h) is not te.NotRequired)}
        errors = [f"{path}: unknown key {k!r} ({tp.__name__})" for k in value if k not in hints]
        errors += [f"{path}: missing {k!r} ({tp.__name__})" for k in required if k not in value]
        for key, item in value.items():
            if key in hints:
                errors += conforms(item, hints[key], f"{path}.{key}")
        return errors
    if origin in (list, collections.abc.Iterable, collections.abc.Sequence):
        if not isinstance(value, list):
            return [f"{path}: expected a list"]
        return [e for i, v in enumerate(value) for e in conforms(v, args[0], f"{path}[{i}]")]
    if origin in (dict, collections.abc.Mapping):
        if not isinstance(value, dict):
            return [f"{path}: expected an object"]
        return [e for k, v in value.items() for e in conforms(v, args[1], f"{path}.{k}")]
    if tp is bool:
        return [] if isinstance(value, bool) else [f"{path}: expected bool"]
    if tp is int:
        return [] if isinstance(value, int) and not isinstance(value, bool) else [f"{path}: int"]
    if tp is float:
        return [] if isinstance(value, (int, float)) and not isinstance(value, bool) else [path]
    if tp is str:
        return [] if isinstance(value, str) else [f"{path}: expected str"]
    if isinstance(tp, type):  # an SDK model class: plain JSON is never one
        return [] if isinstance(value, tp) else [f"{path}: not a {tp.__name__}"]
    raise TypeError(f"{path}: unsupported type {tp!r}")


def request_type(api: str) -> Any:
    if api == "anthropic":
        pytest.importorskip("anthropic", reason="anthropic SDK not installed (test extra)")
        from anthropic.types.message_create_params import MessageCreateParamsNonStreaming

        return MessageCreateParamsNonStreaming
    pytest.importorskip("openai", reason="openai SDK not installed (test extra)")
    if api == "openai-chat":
        from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming

        return CompletionCreateParamsNonStreaming
    from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming

    return ResponseCreateParamsNonStreaming


def test_the_typed_check_can_fail() -> None:
    tp = request_type("openai-chat")
    assert conforms({"model": "m", "messages": [{"role": "tool", "content": "x"}]}, tp)
    assert conforms({"model": "m", "messages": [], "bogus": 1}, tp)
    tp = request_type("anthropic")
    bad = {"model": "m", "max_tokens": 1,
           "messages": [{"role": "user", "content": [{"type": "image", "source": {
               "type": "base64", "media_type": "image/bmp", "data": "x"}}]}]}
    assert conforms(bad, tp)


# --- golden shapes ---------------------------------------------------------------

PNG = "iVBORw0KGgo="
STRAY = "[result of tool call zz; its call is in an earlier context window]\nstray"
GOLDEN_ROWS: list[dict[str, Any]] = [
    {"seq": 1, "kind": "message", "role": "user", "parts": [{"type": "text", "text": "old"}]},
    {"seq": 2, "kind": "reset", "role": "system", "parts": [], "reset": {"reason": "rollover"}},
    {"seq": 3, "kind": "lead_in", "role": "system",
     "parts": [{"type": "text", "text": "A new context window starts here."}]},
    {"seq": 4, "kind": "message", "role": "user",
     "parts": [{"type": "text", "text": "look"},
               {"type": "media", "mime": "image/png", "data": PNG, "width": 2, "height": 2}]},
    {"seq": 5, "kind": "message", "role": "assistant",
     "parts": [{"type": "reasoning", "text": "think", "signature": "sig", "id": "rs_1"},
               {"type": "text", "text": "checking"},
               {"type": "tool_call", "id": "c1", "name": "ls", "input": {"path": "."}}]},
    {"seq": 6, "kind": "message", "role": "assistant",
     "parts": [{"type": "tool_call", "id": "c2", "name": "cat", "input": {"file": "a"}}]},
    {"seq": 7, "kind": "warning", "role": "system",
     "parts": [{"type": "text", "text": "context is 90% full"}]},
    {"seq": 8, "kind": "message", "role": "tool",
     "parts": [{"type": "tool_result", "id": "c2", "output": "A", "error": False},
               {"type": "tool_result", "id": "c1", "output": "no such dir", "error": True}]},
    {"seq": 9, "kind": "message", "role": "assistant", "parts": [],
     "meta": {"quarantine": {"v": 1, "row": {"role": "user", "parts": [
         {"type": "text", "text": HIDDEN}]}}}},
    {"seq": 10, "kind": "truncation", "role": "system",
     "parts": [{"type": "text", "text": HIDDEN}]},
    {"seq": 11, "kind": "message", "role": "assistant",
     "parts": [{"type": "tool_call", "id": "c3", "name": "shot", "input": {}}]},
    {"seq": 12, "kind": "message", "role": "tool",
     "parts": [{"type": "tool_result", "id": "c3", "error": False,
                "output": [{"type": "text", "text": "here"},
                           {"type": "media", "mime": "image/png", "data": PNG}]}]},
    {"seq": 13, "kind": "message", "role": "assistant",
     "parts": [{"type": "tool_call", "id": "c4", "name": "hang", "input": {"s": 1}}]},
    {"seq": 14, "kind": "message", "role": "tool",
     "parts": [{"type": "tool_result", "id": "zz", "output": "stray", "error": False}]},
]
VIEW = [r for r in GOLDEN_ROWS if r["seq"] >= 3]  # a provider view starts after the boundary
DATA_URL = f"data:image/png;base64,{PNG}"

GOLDEN = {
    "openai-chat": {"model": "gpt-4o", "messages": [
        {"role": "system", "content": "A new context window starts here."},
        {"role": "user", "content": [{"type": "text", "text": "look"},
                                     {"type": "image_url", "image_url": {"url": DATA_URL}}]},
        {"role": "assistant", "content": "checking", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "ls",
                                                          "arguments": '{"path":"."}'}},
            {"id": "c2", "type": "function", "function": {"name": "cat",
                                                          "arguments": '{"file":"a"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "no such dir"},
        {"role": "tool", "tool_call_id": "c2", "content": "A"},
        {"role": "system", "content": "context is 90% full"},
        {"role": "assistant", "tool_calls": [
            {"id": "c3", "type": "function", "function": {"name": "shot", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c3", "content": [{"type": "text", "text": "here"}]},
        {"role": "user", "content": [{"type": "text", "text": "[media returned by tool call c3]"},
                                     {"type": "image_url", "image_url": {"url": DATA_URL}}]},
        {"role": "assistant", "tool_calls": [
            {"id": "c4", "type": "function", "function": {"name": "hang",
                                                          "arguments": '{"s":1}'}}]},
        {"role": "tool", "tool_call_id": "c4", "content": MISSING_RESULT},
        {"role": "user", "content": STRAY},
    ]},
    "openai-responses": {"model": "gpt-4o", "input": [
        {"type": "message", "role": "system",
         "content": [{"type": "input_text", "text": "A new context window starts here."}]},
        {"type": "message", "role": "user",
         "content": [{"type": "input_text", "text": "look"},
                     {"type": "input_image", "image_url": DATA_URL, "detail": "auto"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "think"}]},
        {"type": "message", "role": "assistant", "content": "checking"},
        {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": '{"path":"."}'},
        {"type": "function_call", "call_id": "c2", "name": "cat", "arguments": '{"file":"a"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "no such dir"},
        {"type": "function_call_output", "call_id": "c2", "output": "A"},
        {"type": "message", "role": "system",
         "content": [{"type": "input_text", "text": "context is 90% full"}]},
        {"type": "function_call", "call_id": "c3", "name": "shot", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c3", "output": [
            {"type": "input_text", "text": "here"},
            {"type": "input_image", "image_url": DATA_URL, "detail": "auto"}]},
        {"type": "function_call", "call_id": "c4", "name": "hang", "arguments": '{"s":1}'},
        {"type": "function_call_output", "call_id": "c4", "output": MISSING_RESULT},
        {"type": "message", "role": "user",
         "content": [{"type": "input_text", "text": STRAY}]},
    ]},
    "anthropic": {"model": "claude-sonnet-4-5", "max_tokens": 4096,
                  "system": [{"type": "text", "text": "A new context window starts here."}],
                  "messages": [
        {"role": "user", "content": [
            {"type": "text", "text": "look"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": PNG}}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "think", "signature": "sig"},
            {"type": "text", "text": "checking"},
            {"type": "tool_use", "id": "c1", "name": "ls", "input": {"path": "."}},
            {"type": "tool_use", "id": "c2", "name": "cat", "input": {"file": "a"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": "no such dir",
             "is_error": True},
            {"type": "tool_result", "tool_use_id": "c2", "content": "A"},
            {"type": "text",
             "text": "<system-reminder>\ncontext is 90% full\n</system-reminder>"}]},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "c3", "name": "shot", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "c3", "content": [
                {"type": "text", "text": "here"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                             "data": PNG}}]}]},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "c4", "name": "hang", "input": {"s": 1}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "c4", "content": MISSING_RESULT,
             "is_error": True},
            {"type": "text", "text": STRAY}]},
    ]},
}


@pytest.mark.parametrize("api", APIS)
def test_golden_request_shape(api: str) -> None:
    assert to_request(api, VIEW) == GOLDEN[api]


@pytest.mark.parametrize("api", APIS)
def test_golden_body_matches_the_sdk_types(api: str) -> None:
    assert conforms(GOLDEN[api], request_type(api)) == []


@pytest.mark.parametrize("api", APIS)
def test_hidden_rows_never_appear(api: str) -> None:
    body = json.dumps(to_request(api, GOLDEN_ROWS))
    assert HIDDEN not in body
    assert "old" in body  # rows before a boundary are the caller's choice to pass


def test_reasoning_policy() -> None:
    plain = [{"kind": "message", "role": "assistant",
              "parts": [{"type": "reasoning", "text": "plain"}, {"type": "text", "text": "t"}]}]
    for api in APIS:
        assert "plain" not in json.dumps(to_request(api, plain)), api
    signed = [{"kind": "message", "role": "assistant", "parts": [
        {"type": "reasoning", "text": "r", "signature": "s"},
        {"type": "reasoning", "text": "", "redacted": "opaque"},
        {"type": "reasoning", "text": "o", "id": "rs_9", "encrypted_content": "enc"}]}]
    blocks = to_request("anthropic", signed)["messages"][-1]["content"]
    assert blocks == [{"type": "thinking", "thinking": "r", "signature": "s"},
                      {"type": "redacted_thinking", "data": "opaque"}]
    items = to_request("openai-responses", signed)["input"]
    assert items == [{"type": "reasoning", "id": "rs_9",
                      "summary": [{"type": "summary_text", "text": "o"}],
                      "encrypted_content": "enc"}]
    assert to_request("openai-chat", signed)["messages"] == []


def test_anthropic_sanitizes_ids_on_both_sides_and_wraps_inputs() -> None:
    rows = [{"kind": "message", "role": "assistant",
             "parts": [{"type": "tool_call", "id": "call:1/x", "name": "f", "input": "raw"}]},
            {"kind": "message", "role": "tool",
             "parts": [{"type": "tool_result", "id": "call:1/x", "output": 5, "error": False}]}]
    continued, *messages = to_request("anthropic", rows)["messages"]
    # the Messages API needs a user message first (ledger.adapters.validate)
    assert continued == {"role": "user",
                         "content": [{"type": "text", "text": anthropic.CONTINUED}]}
    use, result = messages[0]["content"][0], messages[1]["content"][0]
    assert use["id"] == result["tool_use_id"] == anthropic.tool_id("call:1/x")
    assert use["id"].startswith("toolu_") and use["input"] == {"input": "raw"}
    assert result["content"] == "5"


def test_chat_from_messages_reads_tool_calls_and_bad_arguments() -> None:
    rows = openai_chat.from_messages([
        {"role": "developer", "content": "be brief"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{not json"}}]},
        {"role": "tool", "tool_call_id": "a", "content": "x"},
        {"role": "tool", "tool_call_id": "b", "content": "y"},
    ])
    assert rows[0] == {"kind": "message", "role": "system",
                       "parts": [{"type": "text", "text": "be brief"}]}
    assert rows[1]["parts"] == [{"type": "tool_call", "id": "a", "name": "f", "input": "{not json"}]
    assert [p["id"] for p in rows[2]["parts"]] == ["a", "b"]


def test_unknown_parts_of_an_api_round_trip_through_that_api_only() -> None:
    body = {"model": "m", "max_tokens": 5, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "search"}]},
        {"role": "assistant", "content": [{"type": "server_tool_use", "id": "s", "name": "web",
                                          "input": {}}, {"type": "text", "text": "t"}]}]}
    rows = from_request("anthropic", body)
    assert rows[1]["parts"][0]["type"] == "anthropic:server_tool_use"
    assert to_request("anthropic", rows, model="m", max_tokens=5) == body
    assert "server_tool_use" not in json.dumps(to_request("openai-chat", rows))


# --- properties ------------------------------------------------------------------

ALPHABET = st.characters(blacklist_categories=("Cs",), blacklist_characters="#")
texts = st.text(ALPHABET, max_size=12)
solid = st.text(ALPHABET, min_size=1, max_size=12).filter(lambda s: s.strip() != "")
call_ids = st.sampled_from(["c1", "c2", "c3", "call_9", "toolu-7"])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=6,
)
inputs = st.dictionaries(texts, json_values, max_size=3)
images = st.builds(lambda m, d: {"type": "media", "mime": m, "data": d},
                   st.sampled_from(["image/png", "image/jpeg"]),
                   st.sampled_from(["aGk=", "AAAA"]))
text_parts = st.builds(lambda t: {"type": "text", "text": t}, texts)
calls = st.builds(lambda i, n, x: {"type": "tool_call", "id": i, "name": n, "input": x},
                  call_ids, st.sampled_from(["ls", "cat"]), inputs)
outputs = texts | st.lists(text_parts | images, min_size=1, max_size=2) | json_values
results = st.builds(lambda i, o, e: {"type": "tool_result", "id": i, "output": o, "error": e},
                    call_ids, outputs, st.booleans())
reasonings = st.builds(lambda t, s: {"type": "reasoning", "text": t, **s}, texts,
                       st.sampled_from([{}, {"signature": "sig"}, {"id": "rs_1"}]))


def _row(kind: str, role: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"kind": kind, "role": role, "parts": parts}


messy_rows = st.lists(
    st.one_of(
        st.builds(_row, st.just("message"), st.just("user"),
                  st.lists(text_parts | images, min_size=1, max_size=3)),
        st.builds(_row, st.just("message"), st.just("assistant"),
                  st.lists(text_parts | calls | reasonings, min_size=1, max_size=4)),
        st.builds(_row, st.just("message"), st.just("tool"), st.lists(results, min_size=1,
                                                                      max_size=3)),
        st.builds(_row, st.sampled_from(["message", "warning", "lead_in"]), st.just("system"),
                  st.lists(text_parts, min_size=1, max_size=2)),
        st.just(_row("reset", "system", []) | {"reset": {"reason": "manual"}}),
        st.just(_row("truncation", "user", [{"type": "text", "text": HIDDEN}])),
        st.just(_row("message", "assistant", []) | {"meta": {"quarantine": {"v": 1, "row": {
            "role": "user", "parts": [{"type": "text", "text": HIDDEN}]}}}}),
    ),
    max_size=12,
)


def _calls_and_results_paired(api: str, body: dict[str, Any]) -> None:
    if api == "openai-chat":
        messages = body["messages"]
        for i, m in enumerate(messages):
            if m["role"] == "assistant" and m.get("tool_calls"):
                ids = [c["id"] for c in m["tool_calls"]]
                follow = messages[i + 1 : i + 1 + len(ids)]
                assert [f.get("tool_call_id") for f in follow] == ids
            if m["role"] == "tool":
                assert messages[i - 1]["role"] in ("assistant", "tool")
    elif api == "anthropic":
        messages = body["messages"]
        for i, m in enumerate(messages):
            ids = [b["id"] for b in m["content"] if b["type"] == "tool_use"]
            if m["role"] == "assistant" and ids:
                nxt = messages[i + 1]["content"]
                assert [b.get("tool_use_id") for b in nxt[: len(ids)]] == ids
            if m["role"] == "user":
                kinds = [b["type"] for b in m["content"]]
                first_other = next((k for k, t in enumerate(kinds) if t != "tool_result"),
                                   len(kinds))
                assert "tool_result" not in kinds[first_other:]
        for a, b in itertools.pairwise(messages):
            assert a["role"] != b["role"]
    else:
        items = body["input"]
        seen: list[str] = []
        for item in items:
            if item["type"] == "function_call":
                seen.append(item["call_id"])
            elif item["type"] == "function_call_output":
                assert seen and seen[0] == item["call_id"]
                seen.pop(0)
            else:
                assert not seen, "a call is not directly followed by its output"
        assert not seen


@pytest.mark.parametrize("api", APIS)
@given(rows=messy_rows)
def test_any_rows_make_a_valid_stable_request(api: str, rows: list[dict[str, Any]]) -> None:
    body = to_request(api, rows)
    assert HIDDEN not in json.dumps(body)
    _calls_and_results_paired(api, body)
    back = from_request(api, body)
    # Fixpoint: what the API carried converts back to the same request.
    assert to_request(api, back) == body
    visible_calls = [(p["id"], p["name"]) for t in conversation(rows) if t.role == "assistant"
                     for p in t.parts if p["type"] == "tool_call"]
    back_calls = [(p["id"], p["name"]) for r in back for p in r["parts"]
                  if p["type"] == "tool_call"]
    assert back_calls == visible_calls


@pytest.mark.parametrize("api", APIS)
@given(rows=messy_rows)
def test_any_rows_conform_to_the_sdk_types(api: str, rows: list[dict[str, Any]]) -> None:
    assert conforms(to_request(api, rows), request_type(api)) == []


@st.composite
def carried_rows(draw: st.DrawFn, api: str) -> list[dict[str, Any]]:
    """Rows already in the shape an API carries exactly: from(to(rows)) == rows."""
    rows: list[dict[str, Any]] = []
    if draw(st.booleans()):
        rows.append(_row("message", "system", [{"type": "text", "text": draw(solid)}]))
    n = 0
    for _ in range(draw(st.integers(1, 4))):
        user = [{"type": "text", "text": draw(solid)}]
        if draw(st.booleans()):
            user.append(draw(images))
        rows.append(_row("message", "user", user))
        assistant: list[dict[str, Any]] = []
        if api == "anthropic" and draw(st.booleans()):
            assistant.append({"type": "reasoning", "text": draw(solid), "signature": "sig"})
        if api == "openai-responses" and draw(st.booleans()):
            summary = draw(solid)
            assistant.append({"type": "reasoning", "text": summary, "id": "rs_1",
                              "summary": [{"type": "summary_text", "text": summary}]})
        assistant += [{"type": "text", "text": draw(solid)}
                      for _ in range(draw(st.integers(0 if api != "openai-chat" else 1, 2)))]
        ids = []
        for _ in range(draw(st.integers(0, 2))):
            n += 1
            ids.append(f"c{n}")
            assistant.append({"type": "tool_call", "id": ids[-1], "name": draw(solid),
                              "input": draw(inputs)})
        if not assistant:
            assistant.append({"type": "text", "text": draw(solid)})
        rows.append(_row("message", "assistant", assistant))
        if ids:
            out_strategy = texts if api == "openai-chat" else texts | st.lists(
                st.builds(lambda t: {"type": "text", "text": t}, solid) | images,
                min_size=1, max_size=2)
            rows.append(_row("message", "tool", [
                {"type": "tool_result", "id": i, "output": draw(out_strategy),
                 "error": draw(st.booleans()) if api == "anthropic" else False}
                for i in ids]))
    return rows


@pytest.mark.parametrize("api", APIS)
@given(data=st.data())
def test_round_trip_keeps_every_field_the_api_carries(api: str, data: st.DataObject) -> None:
    rows = data.draw(carried_rows(api))
    assert from_request(api, to_request(api, rows)) == rows
