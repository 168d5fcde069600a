"""``RolloverMiddleware`` for ``langchain.agents.create_agent`` (extra ``langchain``).

LangChain v1 agents keep their context small with ``SummarizationMiddleware``,
which replaces old messages with a model-written summary: detail is lost and
the summary costs a model call. ``RolloverMiddleware`` rolls the window over
instead, through the ledger's runtime object
(:class:`ledger.rollover.conversation.Conversation`): the model sees the active
window -- after a rollover, the lead-in, the tool step being settled and the
new message -- and the agent gets the ``session_history`` tool, with which the
model reads any earlier window back, bounded, on demand.

Per model call (``wrap_model_call``):

1. the agent's messages not yet stored go to the workspace as canonical rows
   (``LedgerChatMessageHistory``'s rows: the LangChain message is kept whole
   in ``meta["langchain"]``) through ``Conversation.send``, which decides --
   send in the window, warn once, roll over, or refuse (``SendRefused``, a
   ``LedgerError``, when even a fresh window cannot hold the input);
2. the model is called with the returned request's messages instead of the
   agent's whole list;
3. the model's answer is stored (``Conversation.record``).

The agent's own state still holds every message (LangGraph keeps it, e.g. in
``LedgerSaver``); only what the model is sent is bounded. The workspace is
``workspace`` when given, else the LangGraph thread's
(``ledger.integrations.langgraph.thread_workspace``), so one middleware serves
many threads.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from ledger.integrations import open_store, require
from ledger.transcript.store import Store

require("langchain.agents.middleware", "langchain")
from langchain.agents.middleware import AgentMiddleware  # noqa: E402
from langchain_core.messages import (  # noqa: E402
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    messages_from_dict,
)
from langchain_core.tools import StructuredTool  # noqa: E402

from ledger.core.errors import LedgerError  # noqa: E402
from ledger.core.ids import validate_workspace  # noqa: E402
from ledger.integrations.langchain import META_KEY, message_row  # noqa: E402
from ledger.rollover.conversation import Conversation  # noqa: E402

__all__ = ["RolloverMiddleware", "row_message"]


def row_message(row: Mapping[str, Any]) -> BaseMessage | None:
    """The LangChain message for a provider-view row: the kept message when
    the row holds one, else its text (the lead-in and warnings are written
    by the ledger) as a system, AI or human message."""
    meta = row.get("meta")
    kept = meta.get(META_KEY) if isinstance(meta, Mapping) else None
    if isinstance(kept, dict):
        return messages_from_dict([kept])[0]
    text = "\n".join(p["text"] for p in row.get("parts", [])
                     if isinstance(p, Mapping) and p.get("type") == "text"
                     and isinstance(p.get("text"), str))
    role = row.get("role")
    if role == "system":
        return SystemMessage(text)
    if role == "assistant":
        return AIMessage(text)
    return HumanMessage(text)


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


class RolloverMiddleware(AgentMiddleware):
    """Roll the model's window over instead of summarising (module doc).

    ``model`` names the tokenizer and window (the model registry of
    ``ledger.rollover.guards``); ``context_limit`` the budget in tokens. Other keyword
    arguments go to :class:`~ledger.rollover.conversation.Conversation`
    (``warn_fraction``, ``rollover_fraction``, ``hard_ceiling``, ``policy``...).
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

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        with self._lock:
            conv = self.conversation()
            stored = self._stored_ids(conv)
            new = [m for m in request.messages if m.id is None or m.id not in stored]
            for m in new:
                if m.id is None:
                    m.id = str(uuid.uuid4())
            sent = conv.send([message_row(m) for m in new]) if new else conv.request()
            stored.update(str(m.id) for m in new)
            messages = [m for m in (row_message(r) for r in sent.messages) if m is not None]
        response = handler(request.override(messages=messages))
        answer = [m for m in getattr(response, "result", [response])
                  if isinstance(m, BaseMessage)]
        with self._lock:
            for m in answer:
                if m.id is None:
                    m.id = str(uuid.uuid4())
            fresh = [m for m in answer if m.id not in stored]
            if fresh:
                conv.record([message_row(m) for m in fresh])
                stored.update(str(m.id) for m in fresh)
        return response

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
