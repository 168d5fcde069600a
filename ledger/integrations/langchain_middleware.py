"""``RolloverMiddleware`` for ``langchain.agents.create_agent`` (extra ``langchain``).

LangChain v1 agents keep their context small with ``SummarizationMiddleware``,
which replaces old messages with a model-written summary: detail is lost and
the summary costs a model call. ``RolloverMiddleware`` rolls the window over
instead, through the ledger's runtime object
(:class:`ledger.rollover.conversation.Conversation`): the model sees the active
window -- after a rollover, the lead-in, the tool step being settled and the
new message -- and the agent gets the ``session_history`` tool, with which the
model reads any earlier window back, bounded, on demand.

Per model call (``wrap_model_call``, and ``awrap_model_call`` for
``ainvoke``/``astream``: one implementation, the store work run in a worker
thread so the event loop is never blocked):

1. the budget is set to the request the model really gets: the call's system
   prompt and tools (the agent's, ``session_history`` among them, as
   ``convert_to_openai_tool`` renders them) become the conversation's system
   text and tool schemas, so they are counted on every send;
2. the agent's messages not yet stored go to the workspace as canonical rows
   (``LedgerChatMessageHistory``'s rows: the LangChain message is kept whole
   in ``meta["langchain"]``) through ``Conversation.send``, which decides --
   send in the window, warn once, roll over, or refuse (``SendRefused``, a
   ``LedgerError``, when even a fresh window cannot hold the input);
3. the model is called with the returned request's messages instead of the
   agent's whole list. The ledger's own notes never become a system message
   in the middle of the list (Anthropic's formatter refuses those): a budget
   warning and a lead-in are appended to the system prompt of that call, except
   a lead-in before a carried tool step (a window that would start with an
   assistant message), which is sent as the first, user-side message;
4. the model's answer is kept in the agent's state, not stored on its own:
   it rides with the next durable step of the run -- the next model call's
   send, which stores it together with the tool results that answer it (one
   batch where there were two) -- and ``after_agent`` stores what is left
   (the final answer) when the agent ends (``Conversation.record``). The
   user's message and tool results are stored before the model sees them;
   an answer is stored by the next step or the run's end (a run that dies
   before either loses that answer on the ledger's side only: the graph's
   state, e.g. ``LedgerSaver``, has it, and the next run's first call
   stores it).

The agent's own state still holds every message (LangGraph keeps it, e.g. in
``LedgerSaver``); only what the model is sent is bounded. The workspace is
``workspace`` when given, else the LangGraph thread's
(``ledger.integrations.langgraph.thread_workspace``), so one middleware serves
many threads.
"""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import msgspec

from ledger.integrations import open_store, require
from ledger.transcript.store import Store

require("langchain.agents.middleware", "langchain")
from langchain.agents.middleware import AgentMiddleware  # noqa: E402
from langchain_core.messages import (  # noqa: E402
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    messages_from_dict,
)
from langchain_core.tools import BaseTool, StructuredTool  # noqa: E402
from langchain_core.utils.function_calling import convert_to_openai_tool  # noqa: E402

from ledger.core.errors import LedgerError  # noqa: E402
from ledger.core.ids import validate_workspace  # noqa: E402
from ledger.integrations.langchain import META_KEY, message_copy, message_row  # noqa: E402
from ledger.rollover.conversation import Conversation  # noqa: E402
from ledger.tokens.shapes import neutral_tool  # noqa: E402

__all__ = ["RolloverMiddleware", "model_messages", "row_message"]


class KeptMessages:
    """The LangChain message of each kept message dict, rebuilt once (keyed
    by its JSON): each model call of a run sends the whole window again, and
    rebuilding every message each time was most of a call's cost. Handed out
    as shallow copies (``message_copy``, what ``model_copy`` gives).
    Bounded: the oldest go first."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._kept: dict[bytes, BaseMessage] = {}

    def message(self, kept: dict[str, Any]) -> BaseMessage:
        try:
            key = _encode(kept)
        except (TypeError, ValueError, OverflowError):
            return messages_from_dict([kept])[0]
        found = self._kept.get(key)
        if found is None:
            found = self._kept[key] = messages_from_dict([kept])[0]
            while len(self._kept) > self.size:
                del self._kept[next(iter(self._kept))]
        return message_copy(found)


_encode = msgspec.json.Encoder().encode


def row_message(row: Mapping[str, Any],
                kept_messages: KeptMessages | None = None) -> BaseMessage | None:
    """The LangChain message for a provider-view row: the kept message when
    the row holds one, else its text (the lead-in and warnings are written
    by the ledger) as a system, AI or human message."""
    # (Each request holds the whole window: dicts are tested before the
    # ABC, and a kept message's parts only where its type needs them.)
    meta = row.get("meta")
    kept = meta.get(META_KEY) if type(meta) is dict or isinstance(meta, Mapping) else None
    parts = [p for p in row.get("parts", []) if type(p) is dict or isinstance(p, Mapping)]
    if isinstance(kept, dict):
        message = (kept_messages.message(kept) if kept_messages is not None
                   else messages_from_dict([kept])[0])
        if isinstance(message, ToolMessage):
            if any(p.get("type") == "tool_result" for p in parts):
                return message
            # else served as text: its call is settled already, or sealed
        elif isinstance(message, AIMessage) and message.tool_calls:
            # The request leaves out calls that have no result yet.
            sent = {str(p.get("id")) for p in parts if p.get("type") == "tool_call"}
            calls = [c for c in message.tool_calls if str(c.get("id")) in sent]
            return message if len(calls) == len(message.tool_calls) else \
                message.model_copy(update={"tool_calls": calls})
        else:
            return message
    results = [p for p in parts if p.get("type") == "tool_result"]
    text = "\n".join(p["text"] for p in parts
                     if p.get("type") == "text" and isinstance(p.get("text"), str))
    role = row.get("role")
    if role == "tool" and len(results) == 1:  # a call the ledger settled (no result came)
        out = results[0].get("output")
        return ToolMessage(out if isinstance(out, str) else str(out),
                           tool_call_id=str(results[0].get("id")),
                           status="error" if results[0].get("error") else "success")
    if role == "system":
        return SystemMessage(text)
    if role == "assistant":
        return AIMessage(text)
    return HumanMessage(text)


def _row_text(row: Mapping[str, Any]) -> str:
    return "\n".join(p["text"] for p in row.get("parts", [])
                     if isinstance(p, Mapping) and p.get("type") == "text"
                     and isinstance(p.get("text"), str))


def model_messages(rows: Sequence[Mapping[str, Any]], kept_messages: KeptMessages | None = None,
                   ) -> tuple[list[str], list[BaseMessage]]:
    """``(notes, messages)`` for a request's rows: the messages the model is
    sent, with no system message among them, and the texts of the ledger's
    system-role rows (lead-in, budget warning) as notes for the system prompt.
    A lead-in before a window that would start with an assistant message (a
    carried tool step) is the first message instead, as a human message, since
    the Messages API requires a user message first."""
    notes: list[str] = []
    leads: list[str] = []
    messages: list[BaseMessage] = []
    for row in rows:
        if row.get("role") == "system":
            text = _row_text(row)
            if text.strip():
                (leads if row.get("kind") == "lead_in" and not messages else notes).append(text)
            continue
        message = row_message(row, kept_messages)
        if message is not None:
            messages.append(message)
    if leads and messages and isinstance(messages[0], AIMessage):
        messages.insert(0, HumanMessage("\n\n".join(leads)))
    else:
        notes = [*leads, *notes]
    return notes, messages


def _tool_schema(tool: Any) -> dict[str, Any]:
    if isinstance(tool, BaseTool) or not isinstance(tool, Mapping):
        return neutral_tool(convert_to_openai_tool(tool))
    return neutral_tool(tool)


class _Schemas:
    """Each tool object's schema, rendered once (``convert_to_openai_tool``
    costs more than the rest of a call's bookkeeping); a dict tool is
    rendered each time (the caller may change it)."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[Any, dict[str, Any]]] = {}

    def __call__(self, tool: Any) -> dict[str, Any]:
        if isinstance(tool, Mapping):
            return _tool_schema(tool)
        found = self._by_id.get(id(tool))
        if found is None or found[0] is not tool:
            if len(self._by_id) > 256:
                self._by_id.clear()
            found = self._by_id[id(tool)] = (tool, _tool_schema(tool))
        return dict(found[1])


def _budget_for(conv: Conversation, system: str, tools: Sequence[Any],
                render: Callable[[Any], dict[str, Any]] = _tool_schema) -> None:
    """Count what this model call sends: the call's system prompt and tools."""
    schemas: dict[str, dict[str, Any]] = {}
    for tool in tools:
        schema = render(tool)
        schemas[str(schema.get("name", schema.get("type", len(schemas))))] = schema
    conv.parts.system = system
    conv.tools = conv.parts.tools = schemas


def _thread_workspace() -> str:
    from langgraph.config import get_config

    from ledger.integrations.langgraph import thread_workspace

    try:
        thread = get_config().get("configurable", {}).get("thread_id")
    except RuntimeError as exc:
        raise LedgerError("RolloverMiddleware: no workspace= given and no LangGraph "
                          "thread_id in the run's config") from exc
    if thread is None:
        raise LedgerError("RolloverMiddleware: no workspace= given and the run has no "
                          "thread_id (pass config={'configurable': {'thread_id': ...}})")
    return thread_workspace(str(thread))


def _name_answer(response: Any) -> None:
    """Give the model's answer messages ids (kept in the agent's state), so
    the next call's send knows them as not stored yet, and stores them once."""
    for m in getattr(response, "result", [response]):
        if isinstance(m, BaseMessage) and m.id is None:
            m.id = str(uuid.uuid4())


class RolloverMiddleware(AgentMiddleware):
    """Roll the model's window over instead of summarising (module doc).

    ``model`` names the tokenizer and window (the model registry of
    ``ledger.rollover.guards``); ``context_limit`` the budget in tokens. Other keyword
    arguments go to :class:`~ledger.rollover.conversation.Conversation`
    (``budget=BudgetConfig(...)`` for the thresholds, ``policy``...).
    """

    def __init__(
        self,
        store: Store | None = None,
        root: str | os.PathLike[str] | None = None,
        *,
        workspace: str | None = None,
        model: str = "gpt-4o",
        context_limit: int | None = None,
        **conversation: Any,
    ) -> None:
        super().__init__()
        self.store = open_store(store, root)
        self.workspace = validate_workspace(workspace) if workspace is not None else None
        self._options: dict[str, Any] = {"model": model, "context_limit": context_limit,
                                         **conversation}
        self._conversations: dict[str, Conversation] = {}
        self._stored: dict[str, set[str]] = {}
        self._lock = threading.RLock()
        self._kept_messages = KeptMessages()
        self._schemas = _Schemas()
        self.tools = [self._history_tool()]

    def _ws(self) -> str:
        return self.workspace if self.workspace is not None else _thread_workspace()

    def conversation(self, workspace: str | None = None) -> Conversation:
        """The runtime object of ``workspace`` (default: this run's)."""
        ws = workspace or self._ws()
        with self._lock:
            conv = self._conversations.get(ws)
            if conv is None:
                conv = self._conversations[ws] = Conversation.open(self.store, ws, **self._options)
            return conv

    def _stored_ids(self, conv: Conversation) -> set[str]:
        ws = conv.history.workspace
        ids = self._stored.get(ws)
        if ids is None:
            ids = set()
            if conv.history.exists():
                for row in conv.history.rows():
                    kept = row.meta.get(META_KEY)
                    data = kept.get("data") if isinstance(kept, dict) else None
                    if isinstance(data, dict) and isinstance(data.get("id"), str):
                        ids.add(data["id"])
            self._stored[ws] = ids
        return ids

    # --- one implementation, sync and async ---------------------------------------

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        _, prepared = self._prepare(request)
        response = handler(prepared)
        _name_answer(response)
        return response

    async def awrap_model_call(
        self, request: Any, handler: Callable[[Any], Awaitable[Any]]
    ) -> Any:
        # The store work blocks on files and locks: a worker thread (which
        # sees the run's config, since to_thread copies the context).
        _, prepared = await asyncio.to_thread(self._prepare, request)
        response = await handler(prepared)
        _name_answer(response)
        return response

    def after_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """The run ends: store the messages no model call stored (the final
        answer), as one batch."""
        self._flush(state)
        return None

    async def aafter_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        await asyncio.to_thread(self._flush, state)
        return None

    def _flush(self, state: Any) -> None:
        messages = state.get("messages") if isinstance(state, Mapping) else None
        if not messages:
            return
        with self._lock:
            conv = self.conversation()
            stored = self._stored_ids(conv)
            fresh = [m for m in messages if isinstance(m, BaseMessage)
                     and (m.id is None or m.id not in stored)]
            for m in fresh:
                if m.id is None:
                    m.id = str(uuid.uuid4())
            if fresh:
                conv.record([message_row(m) for m in fresh])
                stored.update(str(m.id) for m in fresh)

    def _prepare(self, request: Any) -> tuple[Conversation, Any]:
        """Store the new messages and return the request the model gets."""
        with self._lock:
            conv = self.conversation()
            system = request.system_prompt or ""
            _budget_for(conv, system, request.tools, self._schemas)
            stored = self._stored_ids(conv)
            new = [m for m in request.messages if m.id is None or m.id not in stored]
            for m in new:
                if m.id is None:
                    m.id = str(uuid.uuid4())
            sent = conv.send([message_row(m) for m in new]) if new else conv.request()
            stored.update(str(m.id) for m in new)
            notes, messages = model_messages(sent.messages, self._kept_messages)
        if not notes:
            return conv, request.override(messages=messages)
        text = "\n\n".join([system, *notes]) if system else "\n\n".join(notes)
        return conv, request.override(messages=messages, system_message=SystemMessage(text))

    def _history_tool(self) -> StructuredTool:
        from ledger.transcript.retrieval.tool import DESCRIPTION, PARAMETERS

        def session_history(**kwargs: Any) -> str:
            conv = self.conversation()
            return conv.session_history().call({k: v for k, v in kwargs.items()
                                                if v is not None})

        return StructuredTool.from_function(
            func=session_history, name="session_history", description=DESCRIPTION,
            args_schema=PARAMETERS,
        )
