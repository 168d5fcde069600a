"""OpenAI Chat Completions: canonical rows <-> ``messages``.

To the API (after :func:`ledger.adapters.common.conversation`):

- ``system`` turns are ``system`` messages (``system_role="developer"`` for models
  that want it); ``user`` turns are ``user`` messages; ``assistant`` turns carry their
  text as ``content`` and their calls as ``tool_calls`` (``arguments`` is compact
  JSON of the canonical ``input``); each result is one ``tool`` message.
- Reasoning is dropped: Chat Completions takes no reasoning input.
- Media: only user messages carry it. Images become ``image_url`` parts (``data:``
  URL or the stored URL, ``detail`` kept), ``audio/wav`` and ``audio/mpeg`` data
  become ``input_audio``, other data becomes a ``file`` part. Tool messages carry
  text only, so media in a tool result is sent in a user message right after the
  tool messages, labelled with the call id. Media anywhere else is replaced by a
  short text placeholder.
- The API has no field for a result's ``error`` flag, a row's ids, meta, kind or
  timestamps, or media width and height: they do not survive a round trip.
- Parts kept from an earlier import of this API (``"openai-chat:<type>"``) are sent
  back as they were; other unknown parts are dropped.

From the API, every message becomes a canonical row; consecutive ``tool`` messages
share one row. Content this module does not map is kept as ``openai-chat:`` parts.
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
    message_row,
    output_text,
    parse_arguments,
    placeholder,
    raw_of,
    raw_part,
)

API = "openai-chat"
_AUDIO_FORMATS = {"audio/wav": "wav", "audio/x-wav": "wav", "audio/mpeg": "mp3", "audio/mp3": "mp3"}


def _user_content_part(part: Mapping[str, Any]) -> dict[str, Any] | None:
    return input_part(API, part, lambda text: {"type": "text", "text": text}, _media_content)


def _media_content(part: Mapping[str, Any], mime: str, url: str) -> dict[str, Any]:
    if mime.startswith("image/"):
        image: dict[str, Any] = {"url": url}
        if part.get("detail") in ("auto", "low", "high"):
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    if mime in _AUDIO_FORMATS and isinstance(part.get("data"), str):
        return {
            "type": "input_audio",
            "input_audio": {"data": part["data"], "format": _AUDIO_FORMATS[mime]},
        }
    if isinstance(part.get("data"), str):
        file: dict[str, Any] = {"file_data": url}
        file["filename"] = str(part.get("name") or "file")
        return {"type": "file", "file": file}
    return {"type": "text", "text": placeholder(part)["text"]}


def _content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    if len(parts) == 1 and parts[0].get("type") == "text":
        return str(parts[0]["text"])
    return parts


def _text_only(parts: Iterable[Part]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for part in parts:
        if part.get("type") == "text":
            out.append({"type": "text", "text": part.get("text", "")})
        elif part.get("type") == "media":
            out.append({"type": "text", "text": placeholder(part)["text"]})
    return out


def carries(part: Part) -> bool:
    """Whether a part (other than a call or result) reaches the API."""
    kind = part.get("type")
    if kind == "media":
        return carried_media(part)
    return kind == "text" or raw_of(API, part) is not None


def to_messages(rows: Iterable[Row], *, system_role: str = "system") -> list[dict[str, Any]]:
    """The ``messages`` array for ``rows`` (see the module docstring)."""
    messages: list[dict[str, Any]] = []
    for turn in conversation(rows, carries):
        if turn.role == "system":
            content = _text_only(turn.parts)
            if content:
                messages.append({"role": system_role, "content": _content(content)})
        elif turn.role == "user":
            content = [c for c in (_user_content_part(p) for p in turn.parts) if c is not None]
            if content:
                messages.append({"role": "user", "content": _content(content)})
        elif turn.role == "assistant":
            message: dict[str, Any] = {"role": "assistant"}
            text: list[dict[str, Any]] = []
            calls: list[dict[str, Any]] = []
            for part in turn.parts:
                kind = part.get("type")
                if kind == "tool_call":
                    calls.append({
                        "id": str(part.get("id")),
                        "type": "function",
                        "function": {"name": str(part.get("name")),
                                     "arguments": json_text(part.get("input"))},
                    })
                elif kind in ("text", "media"):
                    text.extend(_text_only([part]))
                elif (raw := raw_of(API, part)) is not None:
                    text.append(raw)
            if not text and not calls:
                continue
            if text:
                message["content"] = _content(text)
            if calls:
                message["tool_calls"] = calls
            messages.append(message)
        else:
            media: list[dict[str, Any]] = []
            for result in turn.parts:
                output = result.get("output")
                sent: str | list[dict[str, Any]]
                if is_parts_output(output):
                    sent = [{"type": "text", "text": p["text"]}
                            for p in output if p["type"] == "text"] or ""
                    found = [c for c in (_user_content_part(p) for p in output
                                         if p["type"] == "media") if c is not None]
                    if found:
                        label = f"[media returned by tool call {result.get('id')}]"
                        media.extend([{"type": "text", "text": label}, *found])
                else:
                    sent = output_text(output)
                messages.append(
                    {"role": "tool", "tool_call_id": str(result.get("id")), "content": sent}
                )
            if media:
                messages.append({"role": "user", "content": media})
    return _merge_users(messages)


def _merge_users(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One user message where the media of tool results met a user turn (the
    canonical side would merge them too)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if out and message["role"] == "user" and out[-1]["role"] == "user":
            parts = [c if not isinstance(c, str) else [{"type": "text", "text": c}]
                     for c in (out[-1]["content"], message["content"])]
            out[-1] = {"role": "user", "content": _content([*parts[0], *parts[1]])}
        else:
            out.append(message)
    return out


def to_request(
    rows: Iterable[Row], *, model: str = "gpt-4o", system_role: str = "system", **extra: Any
) -> dict[str, Any]:
    """A Chat Completions request body: ``{"model", "messages", **extra}``."""
    return {"model": model, "messages": to_messages(rows, system_role=system_role), **extra}


def _from_content_part(part: Mapping[str, Any]) -> Part:
    kind = part.get("type")
    if kind == "text":
        return {"type": "text", "text": part.get("text", "")}
    if kind == "image_url" and isinstance(part.get("image_url"), Mapping):
        image = part["image_url"]
        media = media_from_url(str(image.get("url", "")), "image/*")
        if "detail" in image:
            media["detail"] = image["detail"]
        return media
    if kind == "input_audio" and isinstance(part.get("input_audio"), Mapping):
        audio = part["input_audio"]
        mime = "audio/mpeg" if audio.get("format") == "mp3" else "audio/wav"
        return {"type": "media", "mime": mime, "data": audio.get("data", "")}
    if kind == "file" and isinstance(part.get("file"), Mapping):
        file = part["file"]
        if isinstance(file.get("file_data"), str):
            media = media_from_url(file["file_data"], "application/octet-stream")
            if file.get("filename") not in (None, "file"):
                media["name"] = file["filename"]
            return media
    return raw_part(API, part)


def _parts(content: Any) -> list[Part]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [_from_content_part(p) for p in content if isinstance(p, Mapping)]


def from_messages(messages: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Canonical input rows (kind, role, parts) for a ``messages`` array."""
    rows: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role in ("system", "developer", "user"):
            rows.append(message_row("user" if role == "user" else "system",
                                    _parts(message.get("content"))))
        elif role == "assistant":
            parts = _parts(message.get("content"))
            if isinstance(message.get("refusal"), str):
                parts.append(raw_part(API, {"type": "refusal", "refusal": message["refusal"]}))
            for call in message.get("tool_calls") or []:
                function = call.get("function")
                if call.get("type", "function") == "function" and isinstance(function, Mapping):
                    parts.append({
                        "type": "tool_call", "id": call.get("id"), "name": function.get("name"),
                        "input": parse_arguments(function.get("arguments", "")),
                    })
                else:
                    parts.append(raw_part(API, call))
            rows.append({"kind": "message", "role": "assistant", "parts": parts})
        elif role == "tool":
            content = message.get("content")
            output: Any = content
            if isinstance(content, list):
                output = [{"type": "text", "text": p.get("text", "")}
                          for p in content if isinstance(p, Mapping)]
            append_row(rows, "tool", [{"type": "tool_result", "id": message.get("tool_call_id"),
                                       "output": output, "error": False}])
        else:
            append_row(rows, "user", [raw_part(API, {**message, "type": f"message:{role}"})])
    return rows


def from_request(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Canonical input rows for a Chat Completions request body."""
    return from_messages(body.get("messages") or [])
