"""Codex CLI rollout JSONL -> import events (pure).

A rollout holds ``{timestamp, type, payload}`` lines: ``session_meta``,
``turn_context``, ``response_item`` (the Responses API items the model saw and
produced), ``event_msg`` (the client's events) and, in newer versions,
``compacted``.

Mapping (one row per ``response_item``):

- ``message``: ``user`` -> user row, ``assistant`` -> assistant row, ``developer``
  / ``system`` -> system row; ``input_text`` / ``output_text`` -> text,
  ``input_image`` -> media; other content items are kept as parts of their own
  type.
- ``reasoning`` -> an assistant row with one ``reasoning`` part: ``text`` is the
  summary text, and ``summary``, ``encrypted_content`` and ``content`` are kept on
  the part.
- ``function_call`` / ``custom_tool_call`` / ``local_shell_call`` -> an assistant
  row with a ``tool_call`` (``input`` is the parsed ``arguments``, the custom
  call's ``input`` string, or the shell ``action``); ``function_call_output`` /
  ``custom_tool_call_output`` -> a tool row with a ``tool_result`` (an output object
  ``{content, success}`` gives ``output`` and ``error = not success``).
- ``compacted`` -> a compaction whose summary row is a user row with its
  ``message`` text.
- Everything else -- ``session_meta``, ``turn_context``, every ``event_msg``
  (``user_message`` / ``agent_message`` / ``agent_reasoning`` repeat response items;
  ``token_count`` and ``turn_aborted`` are client state), other ``response_item``
  types and empty messages -- is bookkeeping, kept whole in meta.

Old rollouts without the ``{timestamp, type, payload}`` wrapper (bare response
items after a header line) are read the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ledger.adapters.common import parse_arguments
from ledger.adapters.openai_responses import from_content
from recovery.events import Event, source_row
from recovery.salvage import Record

FORMAT = "codex"
_ITEM_TYPES = frozenset({
    "message", "reasoning", "function_call", "function_call_output", "custom_tool_call",
    "custom_tool_call_output", "local_shell_call", "web_search_call",
})


def looks_like_record(value: dict[str, Any]) -> bool:
    """Whether an object found inside a damaged line is a rollout line."""
    return (
        isinstance(value.get("type"), str) and "payload" in value and "timestamp" in value
    ) or value.get("record_type") == "state"


def _output(payload: Mapping[str, Any]) -> tuple[Any, bool]:
    output = payload.get("output")
    if isinstance(output, Mapping) and "content" in output:
        return output.get("content"), output.get("success") is False
    return ("" if output is None else output), False


def _item(payload: Mapping[str, Any]) -> tuple[str, list[dict[str, Any]]] | None:
    """(role, parts) of one response item, or None when it is not conversation."""
    kind = payload.get("type")
    if kind == "message":
        role = payload.get("role")
        mapped = {"user": "user", "assistant": "assistant", "developer": "system",
                  "system": "system"}.get(str(role))
        parts = from_content(payload.get("content"))
        return (mapped, parts) if mapped and parts else None
    if kind == "reasoning":
        got = payload.get("summary")
        summary: list[Any] = got if isinstance(got, list) else []
        text = "\n\n".join(s.get("text", "") for s in summary if isinstance(s, Mapping))
        part: dict[str, Any] = {"type": "reasoning", "text": text, "summary": summary}
        for key in ("id", "encrypted_content", "content"):
            if payload.get(key) is not None:
                part[key] = payload[key]
        return "assistant", [part]
    if kind in ("function_call", "custom_tool_call", "local_shell_call"):
        if kind == "function_call":
            value: Any = parse_arguments(payload.get("arguments", ""))
        elif kind == "custom_tool_call":
            value = payload.get("input")
        else:
            value = payload.get("action")
        call_id = payload.get("call_id") or payload.get("id")
        name = payload.get("name") or ("local_shell" if kind == "local_shell_call" else None)
        if not isinstance(call_id, str) or not isinstance(name, str):
            return None
        return "assistant", [{"type": "tool_call", "id": call_id, "name": name, "input": value}]
    if kind in ("function_call_output", "custom_tool_call_output"):
        call_id = payload.get("call_id")
        if not isinstance(call_id, str):
            return None
        output, error = _output(payload)
        return "tool", [{"type": "tool_result", "id": call_id, "output": output, "error": error}]
    return None


def convert(records: list[Record]) -> list[Event]:
    """Import events for the records of one rollout, in file order."""
    events: list[Event] = []
    for record in records:
        value = record.value
        kind = value.get("type")
        payload = value.get("payload")
        if kind == "compacted" and isinstance(payload, Mapping):
            rows = []
            if isinstance(payload.get("message"), str) and payload["message"]:
                rows.append(source_row("user", [{"type": "text", "text": payload["message"]}],
                                       record, FORMAT))
            events.append(Event("compaction", [record], rows))
            continue
        if kind == "response_item" and isinstance(payload, Mapping):
            item = _item(payload)
        elif "payload" not in value and kind in _ITEM_TYPES:
            item = _item(value)
        else:
            item = None
        if item is None:
            events.append(Event("bookkeeping", [record]))
            continue
        role, parts = item
        events.append(Event("row", [record], [source_row(role, parts, record, FORMAT)]))
    return events
