"""The ordering rules each provider API enforces on a request body, checked.

A provider refuses a request whose messages break its rules (a 400 the agent
cannot recover from by retrying). The adapters are built to emit only valid
bodies; these checks say so, one problem per string, and tests run them over
every view the adapters emit (``tests/adapters/test_validity.py``).

**OpenAI Chat Completions** (``messages``): at least one message; roles
``system``, ``developer``, ``user``, ``assistant``, ``tool``; an assistant
message has content (a string, possibly empty) or tool calls; the calls of an assistant message are
answered by the ``tool`` messages right after it, one per call, in call order;
a ``tool`` message answers a call of that assistant message and nothing else.

**OpenAI Responses** (``input``): message roles ``system``, ``developer``,
``user``, ``assistant``; each run of ``function_call`` items is followed by
their ``function_call_output`` items, one per call, in call order; an output
answers a call of the run before it and nothing else.

**Anthropic Messages** (``messages``, top-level ``system``): at least one
message; the first is ``user``; roles alternate ``user`` / ``assistant``
(no ``system`` role among them); no empty content and no empty or
whitespace-only text block; the ``tool_use`` blocks of an assistant message are
answered at the start of the next message, a user message, by ``tool_result``
blocks, one per call, in call order, before any other block; a
``tool_result`` answers a ``tool_use`` of the message before it; ``tool_use``
ids match ``[A-Za-z0-9_-]+``.

Pure functions; they raise nothing for a bad body, they describe it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["VALIDATORS", "anthropic_problems", "chat_problems", "problems",
           "responses_problems"]

_CHAT_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
_RESPONSES_ROLES = frozenset({"system", "developer", "user", "assistant"})
_TOOL_ID = re.compile(r"^[A-Za-z0-9_-]+$")


def _answers(
    where: str, calls: Sequence[str], results: Sequence[str], out: list[str]
) -> None:
    if list(results) != list(calls):
        out.append(f"{where}: calls {list(calls)} answered by {list(results)} "
                   "(each call needs one result, in call order)")


def _run(items: list[Any], j: int, key: str, value: str,
         field: str) -> tuple[list[str], int]:
    """The ``field`` of each item from index ``j`` on while ``item[key] ==
    value`` (a run of tool messages, of calls, of outputs), and the index
    where the run ends."""
    found = []
    while j < len(items) and isinstance(items[j], Mapping) and items[j].get(key) == value:
        found.append(str(items[j].get(field)))
        j += 1
    return found, j


def chat_problems(body: Mapping[str, Any]) -> list[str]:
    """Problems of a Chat Completions body under the rules above."""
    out: list[str] = []
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return ["messages: at least one message is required"]
    i = 0
    while i < len(messages):
        message = messages[i]
        role = message.get("role") if isinstance(message, Mapping) else None
        where = f"messages[{i}]"
        if role not in _CHAT_ROLES:
            out.append(f"{where}: unknown role {role!r}")
            i += 1
            continue
        if role == "tool":
            out.append(f"{where}: tool message {message.get('tool_call_id')!r} does not "
                       "follow the assistant message that called it")
            i += 1
            continue
        if role == "assistant":
            calls = message.get("tool_calls") or []
            if not calls and message.get("content") in (None, []):
                out.append(f"{where}: assistant message with neither content nor tool calls")
            if calls:
                ids = [str(c.get("id")) for c in calls]
                answered, j = _run(messages, i + 1, "role", "tool", "tool_call_id")
                _answers(where, ids, answered, out)
                i = j
                continue
        i += 1
    return out


def responses_problems(body: Mapping[str, Any]) -> list[str]:
    """Problems of a Responses body under the rules above."""
    out: list[str] = []
    items = body.get("input")
    if isinstance(items, str):
        return []
    if not isinstance(items, list) or not items:
        return ["input: at least one item is required"]
    i = 0
    while i < len(items):
        item = items[i]
        kind = item.get("type", "message") if isinstance(item, Mapping) else None
        where = f"input[{i}]"
        if kind == "message" and item.get("role") not in _RESPONSES_ROLES:
            out.append(f"{where}: unknown role {item.get('role')!r}")
        if kind == "function_call_output":
            out.append(f"{where}: output {item.get('call_id')!r} does not follow its call")
        if kind == "function_call":
            calls, j = _run(items, i, "type", "function_call", "call_id")
            answered, j = _run(items, j, "type", "function_call_output", "call_id")
            _answers(where, calls, answered, out)
            i = j
            continue
        i += 1
    return out


def _blocks(message: Mapping[str, Any]) -> list[Any]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content) if isinstance(content, list) else []


def anthropic_problems(body: Mapping[str, Any]) -> list[str]:
    """Problems of a Messages body under the rules above."""
    out: list[str] = []
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return ["messages: at least one message is required"]
    previous_calls: list[str] = []
    previous_role = None
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        role = message.get("role") if isinstance(message, Mapping) else None
        if role not in ("user", "assistant"):
            out.append(f"{where}: role must be user or assistant, not {role!r}")
            continue
        if i == 0 and role != "user":
            out.append(f"{where}: the first message must be a user message, not {role!r}")
        if role == previous_role:
            out.append(f"{where}: two {role} messages in a row (roles must alternate)")
        blocks = _blocks(message)
        if not blocks:
            out.append(f"{where}: empty content")
        for k, block in enumerate(blocks):
            if isinstance(block, Mapping) and block.get("type") == "text" and not str(
                    block.get("text", "")).strip():
                out.append(f"{where}.content[{k}]: empty text block")
        results = []
        for block in blocks:
            if not (isinstance(block, Mapping) and block.get("type") == "tool_result"):
                break
            results.append(str(block.get("tool_use_id")))
        late = [k for k, b in enumerate(blocks) if isinstance(b, Mapping)
                and b.get("type") == "tool_result"][len(results):]
        if late:
            out.append(f"{where}: tool_result blocks {late} after other content")
        if role == "assistant" and results:
            out.append(f"{where}: tool_result blocks in an assistant message")
        if role == "user" or previous_calls:
            _answers(where, previous_calls, results if role == "user" else [], out)
        calls = []
        if role == "assistant":
            for block in blocks:
                if isinstance(block, Mapping) and block.get("type") == "tool_use":
                    calls.append(str(block.get("id")))
                    if not _TOOL_ID.match(str(block.get("id"))):
                        out.append(f"{where}: tool_use id {block.get('id')!r} is not "
                                   "[A-Za-z0-9_-]+")
        previous_calls, previous_role = calls, role
    if previous_calls:
        out.append(f"messages[{len(messages) - 1}]: tool_use blocks {previous_calls} "
                   "are never answered")
    return out


VALIDATORS: dict[str, Callable[[Mapping[str, Any]], list[str]]] = {
    "openai-chat": chat_problems,
    "openai-responses": responses_problems,
    "anthropic": anthropic_problems,
}


def problems(api: str, body: Mapping[str, Any]) -> list[str]:
    """Every problem of ``body`` under ``api``'s ordering rules ([] when valid)."""
    return VALIDATORS[api](body)
