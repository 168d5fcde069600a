"""Anthropic Messages: canonical rows <-> ``system`` + ``messages``.

To the API (after :func:`ledger.adapters.common.conversation`):

- ``system`` turns before the first other turn become the top-level ``system``
  (a list of text blocks). A ``system`` turn later in the conversation (a warning
  written in the system role, say) cannot be a message of its own, so it is sent in
  place as user text wrapped in ``<system-reminder>`` tags.
- ``user`` turns: text, ``image`` (jpeg, png, gif, webp; base64 or URL) and
  ``document`` blocks (PDF, base64 or URL; ``text/plain`` data). ``tool`` turns are
  ``tool_result`` blocks (``is_error`` from ``error``; content is the string, or
  text/image/document blocks for a list of parts) at the start of the next user
  message. Consecutive messages of one role are merged into one.
- ``assistant`` turns: text, ``tool_use`` (a non-object ``input`` is sent as
  ``{"input": value}``; an id outside ``[A-Za-z0-9_-]`` is replaced by a stable
  digest, on the call and its result alike), and reasoning as the API allows: a part
  with a ``signature`` is a ``thinking`` block, one with ``redacted`` data a
  ``redacted_thinking`` block; unsigned reasoning is dropped, because the API
  rejects thinking it did not sign.
- A conversation that would start with an assistant message (a clear mid-turn)
  starts with a short user message, :data:`CONTINUED`: the API requires a user
  message first.
- Empty and whitespace-only text blocks are dropped (the API rejects them); media
  the API cannot take at that place becomes a short text placeholder.
- Ids, meta, kinds, timestamps and media width/height are not carried.
- Parts kept from an earlier import of this API (``"anthropic:<type>"``) are sent
  back as the blocks they were; other unknown parts are dropped.

From the API, a user message splits into a ``tool`` row (its ``tool_result``
blocks) and a ``user`` row (the rest); ``system`` becomes a leading system row;
a first message that is exactly :data:`CONTINUED` is dropped (this module wrote it).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping
from typing import Any

import xxhash

from ledger.adapters.common import (
    Part,
    Row,
    append_row,
    b64_text,
    carried_media,
    conversation,
    is_parts_output,
    media_from_url,
    output_text,
    placeholder,
    raw_of,
    raw_part,
)

API = "anthropic"
DEFAULT_MODEL = "claude-sonnet-4-5"
DEFAULT_MAX_TOKENS = 4096
IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
_ID = re.compile(r"^[A-Za-z0-9_-]+$")
CONTINUED = "[the conversation continues; earlier messages are not shown]"
"""The first user message of a view that would start with the assistant (a
window after a manual clear mid-turn, a carried tool step without a lead-in):
the Messages API requires a user message first."""


def tool_id(value: Any) -> str:
    """The id sent for a canonical call id: itself when the API accepts it."""
    text = str(value)
    return text if _ID.match(text) else "toolu_" + xxhash.xxh3_128_hexdigest(text.encode())


def _media_block(part: Mapping[str, Any]) -> dict[str, Any] | None:
    mime = str(part.get("mime", ""))
    data = part.get("data") if isinstance(part.get("data"), str) else None
    url = part.get("url") if isinstance(part.get("url"), str) else None
    if mime in IMAGE_TYPES or (mime.startswith("image/") and url and not data):
        if data is not None and mime in IMAGE_TYPES:
            return {"type": "image",
                    "source": {"type": "base64", "media_type": mime, "data": data}}
        if url is not None:
            return {"type": "image", "source": {"type": "url", "url": url}}
    if mime == "application/pdf":
        if data is not None:
            return {"type": "document",
                    "source": {"type": "base64", "media_type": mime, "data": data}}
        if url is not None:
            return {"type": "document", "source": {"type": "url", "url": url}}
    if mime == "text/plain" and data is not None and (text := b64_text(part)) is not None:
        return {"type": "document",
                "source": {"type": "text", "media_type": "text/plain", "data": text}}
    return None


def _text_block(text: Any) -> dict[str, Any] | None:
    return {"type": "text", "text": text} if isinstance(text, str) and text.strip() else None


def _user_block(part: Mapping[str, Any]) -> dict[str, Any] | None:
    kind = part.get("type")
    if kind == "text":
        return _text_block(part.get("text"))
    if kind == "media":
        return _media_block(part) or _text_block(placeholder(part)["text"])
    return raw_of(API, part)


def _result_block(result: Mapping[str, Any]) -> dict[str, Any]:
    output = result.get("output")
    content: Any
    if is_parts_output(output):
        # Empty text blocks are refused; a list left empty is sent as "".
        content = [b for b in (_user_block(p) for p in output) if b is not None] or ""
    else:
        content = output_text(output)
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_id(result.get("id")),
                             "content": content}
    if result.get("error"):
        block["is_error"] = True
    return block


def _assistant_block(part: Mapping[str, Any]) -> dict[str, Any] | None:
    kind = part.get("type")
    if kind == "text":
        return _text_block(part.get("text"))
    if kind == "media":
        return _text_block(placeholder(part)["text"])
    if kind == "tool_call":
        value = part.get("input")
        return {"type": "tool_use", "id": tool_id(part.get("id")), "name": str(part.get("name")),
                "input": value if isinstance(value, dict) else {"input": value}}
    if kind == "reasoning":
        if isinstance(part.get("signature"), str):
            return {"type": "thinking", "thinking": str(part.get("text", "")),
                    "signature": part["signature"]}
        if isinstance(part.get("redacted"), str):
            return {"type": "redacted_thinking", "data": part["redacted"]}
        return None
    return raw_of(API, part)


def carries(part: Part) -> bool:
    """Whether a part (other than a call or result) reaches the API."""
    kind = part.get("type")
    if kind == "text":
        return isinstance(part.get("text"), str) and bool(part["text"].strip())
    if kind == "media":
        return carried_media(part)
    if kind == "reasoning":
        return isinstance(part.get("signature"), str) or isinstance(part.get("redacted"), str)
    return raw_of(API, part) is not None


def to_system_and_messages(
    rows: Iterable[Row],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(system blocks, messages)`` for ``rows`` (see the module docstring)."""
    system: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] = []
    leading = True
    for turn in conversation(rows, carries):
        role = "assistant" if turn.role == "assistant" else "user"
        blocks: list[dict[str, Any]]
        if turn.role == "system":
            texts = [p.get("text") if p.get("type") == "text" else placeholder(p)["text"]
                     for p in turn.parts if p.get("type") in ("text", "media")]
            if leading:
                system.extend(b for b in (_text_block(t) for t in texts) if b is not None)
                continue
            blocks = [b for b in (_text_block(f"<system-reminder>\n{t}\n</system-reminder>")
                                  for t in texts if isinstance(t, str) and t.strip())
                      if b is not None]
        elif turn.role == "tool":
            blocks = [_result_block(p) for p in turn.parts]
        elif turn.role == "user":
            blocks = [b for b in (_user_block(p) for p in turn.parts) if b is not None]
        else:
            blocks = [b for b in (_assistant_block(p) for p in turn.parts) if b is not None]
        leading = False
        if not blocks:
            continue
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": role, "content": blocks})
    if messages and messages[0]["role"] == "assistant":
        messages.insert(0, {"role": "user", "content": [{"type": "text", "text": CONTINUED}]})
    return system, messages


def to_request(
    rows: Iterable[Row],
    *,
    model: str = DEFAULT_MODEL,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    **extra: Any,
) -> dict[str, Any]:
    """A Messages request body: ``{"model", "max_tokens", "system"?, "messages", **extra}``."""
    system, messages = to_system_and_messages(rows)
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens}
    if system:
        body["system"] = system
    body["messages"] = messages
    body.update(extra)
    return body


def _from_block(block: Mapping[str, Any]) -> Part:
    kind = block.get("type")
    got = block.get("source")
    source: Mapping[str, Any] = got if isinstance(got, Mapping) else {}
    if kind == "text" and isinstance(block.get("text"), str):
        return {"type": "text", "text": block["text"]}
    if kind in ("image", "document") and source.get("type") == "base64":
        return {"type": "media", "mime": source.get("media_type"), "data": source.get("data")}
    if kind in ("image", "document") and source.get("type") == "url":
        default = "image/*" if kind == "image" else "application/pdf"
        media = media_from_url(str(source.get("url")), default)
        if kind == "document":
            media["mime"] = "application/pdf"
        return media
    if kind == "document" and source.get("type") == "text" and isinstance(source.get("data"), str):
        data = base64.b64encode(source["data"].encode("utf-8")).decode("ascii")
        return {"type": "media", "mime": "text/plain", "data": data}
    if kind == "thinking":
        return {"type": "reasoning", "text": block.get("thinking", ""),
                "signature": block.get("signature")}
    if kind == "redacted_thinking":
        return {"type": "reasoning", "text": "", "redacted": block.get("data")}
    if kind == "tool_use":
        return {"type": "tool_call", "id": block.get("id"), "name": block.get("name"),
                "input": block.get("input")}
    return raw_part(API, block)


def _content_blocks(content: Any) -> list[Mapping[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, Mapping)]


def from_messages(
    messages: Iterable[Mapping[str, Any]], system: Any = None
) -> list[dict[str, Any]]:
    """Canonical input rows (kind, role, parts) for ``system`` and ``messages``."""
    rows: list[dict[str, Any]] = []
    if system:
        rows.append({"kind": "message", "role": "system",
                     "parts": [_from_block(b) for b in _content_blocks(system)]})
    messages = list(messages)
    if messages and _content_blocks(messages[0].get("content")) == [
            {"type": "text", "text": CONTINUED}] and messages[0].get("role") == "user":
        messages = messages[1:]  # what to_system_and_messages put first: not the caller's
    for message in messages:
        blocks = _content_blocks(message.get("content"))
        if message.get("role") == "assistant":
            rows.append({"kind": "message", "role": "assistant",
                         "parts": [_from_block(b) for b in blocks]})
            continue
        user: list[Part] = []
        for block in blocks:
            if block.get("type") == "tool_result":
                if user:
                    rows.append({"kind": "message", "role": "user", "parts": user})
                    user = []
                content = block.get("content", "")
                output: Any = content
                if isinstance(content, list):
                    output = [_from_block(b) for b in content if isinstance(b, Mapping)]
                append_row(rows, "tool", [{"type": "tool_result", "id": block.get("tool_use_id"),
                                           "output": output,
                                           "error": bool(block.get("is_error", False))}])
            else:
                user.append(_from_block(block))
        if user:
            rows.append({"kind": "message", "role": "user", "parts": user})
    return rows


def from_request(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Canonical input rows for a Messages request body."""
    return from_messages(body.get("messages") or [], body.get("system"))
