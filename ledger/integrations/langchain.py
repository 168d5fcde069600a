"""LangChain's ``BaseChatMessageHistory``, stored in a ledger workspace.

``LedgerChatMessageHistory(session_id, store=None, root=None)`` keeps one chat
history in the workspace ``session_id``. Every message is one canonical row:
its parts are the message as the ledger sees a conversation (text, tool calls,
tool results), and ``meta["langchain"]`` holds ``message_to_dict(message)``,
from which ``messages`` rebuilds it unchanged: type, id, name,
``additional_kwargs``, ``response_metadata``, ``tool_calls``,
``tool_call_id``, content blocks.

- ``messages``: the current window, oldest first (a rolled-over window starts
  with its lead-in as a ``SystemMessage``). It reads the window, never the
  whole history. Each read returns new message objects; those of rows read
  before are shallow copies of the ones kept per stored line
  (``MessageCache``), so a turn rebuilds only its new rows.
- ``add_messages``: one all-or-nothing batch.
- ``clear``: a manual reset (``History.clear_soft``), the privacy floor; the
  rows stay retained. ``delete`` removes the workspace (``Store.delete``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import msgspec

from ledger.adapters.common import raw_part
from ledger.core.errors import WorkspaceNotFound
from ledger.core.ids import validate_session
from ledger.core.redact import redact
from ledger.core.rows import Row, check_depth, is_empty_assistant
from ledger.integrations import open_store, require
from ledger.transcript.history import History
from ledger.transcript.store import Store

require("langchain_core", "langchain")
from langchain_core.chat_history import BaseChatMessageHistory  # noqa: E402
from langchain_core.messages import (  # noqa: E402
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    message_to_dict,
    messages_from_dict,
)
from langchain_core.tools import StructuredTool  # noqa: E402

__all__ = ["META_KEY", "LedgerChatMessageHistory", "message_copy", "message_row",
           "session_history_tool"]

META_KEY = "langchain"
API = "langchain"
_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool",
          "function": "tool", "developer": "system"}


def _content_parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    parts: list[dict[str, Any]] = []
    for block in content or []:
        if isinstance(block, str):
            parts.append({"type": "text", "text": block})
        elif isinstance(block, dict) and block.get("type") == "text" and isinstance(
            block.get("text"), str
        ):
            parts.append({"type": "text", "text": block["text"]})
        elif isinstance(block, dict):
            parts.append(raw_part(API, block))
    return parts


def _role(message: BaseMessage) -> str:
    role = _ROLES.get(message.type)
    if role is None:  # ChatMessage and other custom types
        given = getattr(message, "role", "user")
        role = {"assistant": "assistant", "ai": "assistant", "system": "system"}.get(given, "user")
    return role


def message_row(message: BaseMessage) -> dict[str, Any]:
    """The canonical row of one message (the message itself kept in meta).
    A message nested deeper than a row may is refused (``InvalidRow``) before
    anything recurses into it."""
    check_depth([message.content, getattr(message, "tool_calls", None),
                 message.additional_kwargs, message.response_metadata], what="message")
    role = _role(message)
    if role == "tool":
        output = message.content if isinstance(message.content, str) else msgspec.to_builtins(
            message.content)
        parts = [{"type": "tool_result", "id": getattr(message, "tool_call_id", None)
                  or getattr(message, "name", None) or "", "output": output,
                  "error": getattr(message, "status", "success") == "error"}]
    else:
        parts = _content_parts(message.content)
        for call in getattr(message, "tool_calls", None) or []:
            parts.append({"type": "tool_call", "id": call.get("id") or "",
                          "name": call.get("name", ""), "input": call.get("args", {})})
    if not parts:
        parts = [{"type": "text", "text": ""}]
    kept = msgspec.to_builtins(message_to_dict(message))
    return {"kind": "message", "role": role, "parts": parts, "meta": {META_KEY: kept}}


_set = object.__setattr__


def message_copy(message: BaseMessage) -> BaseMessage:
    """A shallow copy of ``message``: what pydantic's ``__copy__`` (i.e.
    ``model_copy()``) gives, a new object whose fields dict, set of fields
    set and extra fields are its own (a field reassigned or added on it
    leaves ``message`` as it was). Built here in one call where pydantic's
    goes through ``copy.copy`` three times: 14.5 K instructions a message
    there, ~5 K here (callgrind), paid for every message of every read. A
    message with private attributes (none of LangChain's own has any) is
    copied by pydantic itself."""
    if getattr(message, "__pydantic_private__", None) is not None:
        return message.__copy__()
    cls = type(message)
    new = cls.__new__(cls)
    _set(new, "__dict__", message.__dict__.copy())
    extra = message.__pydantic_extra__
    _set(new, "__pydantic_extra__", None if extra is None else extra.copy())
    _set(new, "__pydantic_fields_set__", message.__pydantic_fields_set__.copy())
    _set(new, "__pydantic_private__", None)
    return new


class MessageCache:
    """The LangChain message of each stored row, rebuilt once per stored
    line. A message is kept under the row's place (segment and offset; the
    seq where an engine keeps no offsets) with the line it was built from,
    checksum included, and served again only while the line read there is
    the same bytes: a rewritten row is rebuilt. (Comparing the line costs
    less than hashing it, which a key of the line itself made every read
    pay for every row.) A message kept is handed out as a shallow copy
    (``message_copy``, what ``model_copy`` gives: fields reassigned on it
    stay its own). Bounded: the oldest entries go first."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._kept: dict[tuple[int, int], tuple[bytes, BaseMessage]] = {}

    def message(self, row: Row) -> BaseMessage:
        kept = row.meta[META_KEY]
        line = row.line
        if not line:  # an engine that keeps no line: nothing to compare
            return messages_from_dict([kept])[0]
        place = (row.segment, row.offset)
        found = self._kept.get(place)
        if found is not None and found[0] == line:
            return message_copy(found[1])
        return message_copy(self._built(place, line, kept))

    def _built(self, place: tuple[int, int], line: bytes, kept: dict[str, Any]) -> BaseMessage:
        message = messages_from_dict([kept])[0]
        self._kept[place] = (bytes(line), message)
        while len(self._kept) > self.size:
            del self._kept[next(iter(self._kept))]
        return message

    def messages(self, rows: Sequence[Row]) -> list[BaseMessage]:
        """The messages of window rows, in order (``_row_message`` of each,
        the rows that give none left out), in one loop: a window read
        hands out every row's message, and the calls per row cost about
        as much as the copy itself."""
        out: list[BaseMessage] = []
        found_in = self._kept.get
        for row in rows:
            line = row.line
            place = (row.segment, row.offset)
            found = found_in(place)
            if found is not None and found[0] == line:
                # The very line the kept message was built from (so its
                # meta holds that message): no lookup in the row's dict. A
                # shallow copy (what model_copy() gives): fields reassigned
                # on the copy stay its own.
                out.append(message_copy(found[1]))
                continue
            meta = row.data.get("meta")
            kept = meta.get(META_KEY) if isinstance(meta, dict) else None
            if not isinstance(kept, dict) or not line:
                message = _row_message(row, self)
                if message is not None:
                    out.append(message)
                continue
            out.append(message_copy(self._built(place, line, kept)))
        return out


def _row_message(row: Row, cache: MessageCache | None = None) -> BaseMessage | None:
    kept = row.meta.get(META_KEY)
    if isinstance(kept, dict):
        return cache.message(row) if cache is not None else messages_from_dict([kept])[0]
    if row.kind not in ("message", "lead_in") or is_empty_assistant(row.data):
        return None
    text = "\n".join(p["text"] for p in row.parts
                     if isinstance(p, dict) and p.get("type") == "text"
                     and isinstance(p.get("text"), str))
    if row.role == "assistant":
        return AIMessage(content=text, id=row.id)
    if row.role == "system":
        return SystemMessage(content=text, id=row.id)
    return HumanMessage(content=text, id=row.id)


class LedgerChatMessageHistory(BaseChatMessageHistory):
    """A LangChain chat history kept in the ledger workspace ``session_id``.

    ``store`` or ``root`` pick the store (default ``$TLEDGER_ROOT``, else
    ``./.tledger``); the id must be a valid workspace id, not of the form of
    an encoded LangGraph or Claude name (``ledger.core.ids.validate_session``).
    Nothing is created on disk until the first write.
    """

    def __init__(
        self,
        session_id: str,
        store: Store | None = None,
        root: str | os.PathLike[str] | None = None,
    ) -> None:
        self.store = open_store(store, root)
        self.history: History = self.store.history(validate_session(session_id))
        self.session_id = self.history.workspace
        self._cache = MessageCache()

    def __repr__(self) -> str:
        return f"LedgerChatMessageHistory({self.session_id!r}, root={redact(self.store.root)!r})"

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        try:
            rows = self.history.window_rows()
        except WorkspaceNotFound:
            return []
        return self._cache.messages(rows)

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        if messages:
            self.history.append_many([message_row(m) for m in messages])

    def clear(self) -> None:
        self.history.clear_soft()

    def delete(self) -> bool:
        """Delete the whole workspace (retention ends). False if there was none."""
        return self.store.delete(self.session_id)


def session_history_tool(history: LedgerChatMessageHistory) -> StructuredTool:
    """``session_history`` of the history's workspace as a LangChain tool.

    The result is the JSON text the model gets; bad arguments come back as
    error results, never exceptions."""
    tool = history.history.session_history()
    spec = tool.definition("openai")["function"]

    def call(**kwargs: Any) -> str:
        return tool.call({k: v for k, v in kwargs.items() if v is not None})

    return StructuredTool.from_function(
        func=call, name=spec["name"], description=spec["description"],
        args_schema=spec["parameters"],
    )
