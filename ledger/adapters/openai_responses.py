"""OpenAI Responses: canonical rows <-> ``input`` items.

To the API (after :func:`ledger.adapters.common.conversation`), in order:

- ``system`` / ``user`` turns: one ``message`` item each (``system_role`` may be
  ``developer``), content ``input_text`` / ``input_image`` / ``input_file``.
- ``assistant`` turns: each text part is one assistant ``message`` item, in order
  with the turn's reasoning; then each call is a ``function_call`` item
  (``arguments`` is compact JSON of ``input``), so that the outputs follow the calls
  directly; media in an assistant turn becomes a text placeholder.
- Reasoning is kept when the API can take it back: a reasoning part that carries
  the reasoning item's ``id`` becomes a ``reasoning`` item with its ``summary``
  (or the part's text as one ``summary_text``), ``encrypted_content`` and
  ``content`` when present. Reasoning without an id (written by hand, by another
  API, or by Codex, whose rollouts do not record ids) is dropped.
- Results are ``function_call_output`` items; their output is the string, or
  ``input_text`` / ``input_image`` / ``input_file`` items for a list of parts. The
  ``error`` flag has no field here and is lost.
- Parts kept from an earlier import of this API (``"openai-responses:<type>"``) are
  sent back as the items they were; other unknown parts are dropped.

From the API, consecutive items of one role share a row: assistant messages,
reasoning and function calls make assistant rows, outputs make tool rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ledger.adapters.common import (
    Part,
    Row,
    append_row,
    carried_media,
    conversation,
    input_part,
    is_parts_output,
    json_text,
    media_from_url,
    output_text,
    parse_arguments,
    placeholder,
    raw_of,
    raw_part,
)

API = "openai-responses"


def _input_part(part: Mapping[str, Any]) -> dict[str, Any] | None:
    return input_part(API, part, lambda text: {"type": "input_text", "text": text}, _media_input)


def _media_input(part: Mapping[str, Any], mime: str, url: str) -> dict[str, Any]:
    if mime.startswith("image/"):
        detail = part.get("detail") if part.get("detail") in ("low", "high", "auto") else "auto"
        return {"type": "input_image", "image_url": url, "detail": detail}
    if isinstance(part.get("data"), str):
        name = str(part.get("name") or "file")
        return {"type": "input_file", "file_data": url, "filename": name}
    return {"type": "input_file", "file_url": url}


def _reasoning_item(part: Mapping[str, Any]) -> dict[str, Any] | None:
    if not isinstance(part.get("id"), str):
        return None
    summary = part.get("summary")
    if not isinstance(summary, list):
        text = part.get("text")
        summary = [{"type": "summary_text", "text": text}] if isinstance(text, str) and text else []
    item: dict[str, Any] = {"type": "reasoning", "id": part["id"], "summary": summary}
    if isinstance(part.get("encrypted_content"), str):
        item["encrypted_content"] = part["encrypted_content"]
    if isinstance(part.get("content"), list):
        item["content"] = part["content"]
    return item


def carries(part: Part) -> bool:
    """Whether a part (other than a call or result) reaches the API."""
    kind = part.get("type")
    if kind == "media":
        return carried_media(part)
    if kind == "reasoning":
        return isinstance(part.get("id"), str)
    return kind == "text" or raw_of(API, part) is not None


def to_input(rows: Iterable[Row], *, system_role: str = "system") -> list[dict[str, Any]]:
    """The ``input`` item list for ``rows`` (see the module docstring)."""
    items: list[dict[str, Any]] = []
    for turn in conversation(rows, carries):
        if turn.role in ("system", "user"):
            content = [c for c in (_input_part(p) for p in turn.parts) if c is not None]
            if content:
                role = system_role if turn.role == "system" else "user"
                items.append({"type": "message", "role": role, "content": content})
        elif turn.role == "assistant":
            calls: list[dict[str, Any]] = []
            for part in turn.parts:
                kind = part.get("type")
                if kind == "text":
                    items.append({"type": "message", "role": "assistant",
                                  "content": str(part.get("text", ""))})
                elif kind == "media":
                    items.append({"type": "message", "role": "assistant",
                                  "content": placeholder(part)["text"]})
                elif kind == "tool_call":
                    calls.append({"type": "function_call", "call_id": str(part.get("id")),
                                  "name": str(part.get("name")),
                                  "arguments": json_text(part.get("input"))})
                elif kind == "reasoning":
                    if (item := _reasoning_item(part)) is not None:
                        items.append(item)
                elif (raw := raw_of(API, part)) is not None:
                    items.append(raw)
            items.extend(calls)
        else:
            for result in turn.parts:
                output = result.get("output")
                sent: str | list[dict[str, Any]]
                if is_parts_output(output):
                    sent = [c for c in (_input_part(p) for p in output) if c is not None]
                else:
                    sent = output_text(output)
                items.append({"type": "function_call_output", "call_id": str(result.get("id")),
                              "output": sent})
    return items


def to_request(
    rows: Iterable[Row], *, model: str = "gpt-4o", system_role: str = "system", **extra: Any
) -> dict[str, Any]:
    """A Responses request body: ``{"model", "input", **extra}``."""
    return {"model": model, "input": to_input(rows, system_role=system_role), **extra}


def from_content(content: Any) -> list[Part]:
    """Canonical parts of a Responses ``content`` (a string, or a list of input
    and output items); an item this adapter does not map is kept raw."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    parts: list[Part] = []
    for item in content or []:
        if not isinstance(item, Mapping):
            continue
        kind = item.get("type")
        if kind in ("input_text", "output_text") and isinstance(item.get("text"), str):
            parts.append({"type": "text", "text": item["text"]})
        elif kind == "input_image" and isinstance(item.get("image_url"), str):
            media = media_from_url(item["image_url"], "image/*")
            if item.get("detail") not in (None, "auto"):
                media["detail"] = item["detail"]
            parts.append(media)
        elif kind == "input_file" and isinstance(item.get("file_data"), str):
            media = media_from_url(item["file_data"], "application/octet-stream")
            if item.get("filename") not in (None, "file"):
                media["name"] = item["filename"]
            parts.append(media)
        elif kind == "input_file" and isinstance(item.get("file_url"), str):
            parts.append(media_from_url(item["file_url"], "application/octet-stream"))
        else:
            parts.append(raw_part(API, item))
    return parts


def from_input(items: Iterable[Mapping[str, Any]] | str) -> list[dict[str, Any]]:
    """Canonical input rows (kind, role, parts) for an ``input`` (list or string)."""
    if isinstance(items, str):
        return [{"kind": "message", "role": "user", "parts": [{"type": "text", "text": items}]}]
    rows: list[dict[str, Any]] = []
    for item in items:
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            parts = from_content(item.get("content"))
            if role == "assistant":
                append_row(rows, "assistant", parts)
            else:
                rows.append({"kind": "message",
                             "role": "system" if role in ("system", "developer") else "user",
                             "parts": parts})
        elif kind == "function_call":
            append_row(rows, "assistant", [{
                "type": "tool_call", "id": item.get("call_id"), "name": item.get("name"),
                "input": parse_arguments(item.get("arguments", "")),
            }])
        elif kind == "reasoning":
            summary = item.get("summary") or []
            text = "\n\n".join(
                s.get("text", "") for s in summary if isinstance(s, Mapping)
            )
            part: Part = {"type": "reasoning", "text": text, "id": item.get("id"),
                          "summary": list(summary)}
            for key in ("encrypted_content", "content"):
                if item.get(key) is not None:
                    part[key] = item[key]
            append_row(rows, "assistant", [part])
        elif kind == "function_call_output":
            output = item.get("output")
            if isinstance(output, list):
                output = from_content(output)
            append_row(rows, "tool", [{"type": "tool_result", "id": item.get("call_id"),
                                       "output": output, "error": False}])
        else:
            append_row(rows, "assistant", [raw_part(API, item)])
    return rows


def from_request(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Canonical input rows for a Responses request body (``instructions`` too)."""
    rows: list[dict[str, Any]] = []
    if isinstance(body.get("instructions"), str):
        rows.append({"kind": "message", "role": "system",
                     "parts": [{"type": "text", "text": body["instructions"]}]})
    rows.extend(from_input(body.get("input") or []))
    return rows
