"""The OpenAI Agents SDK's ``Session``, stored in a ledger workspace.

``LedgerSession(session_id, store=None, root=None)`` keeps one SDK session in
the workspace named ``session_id``. Every SDK item is one canonical row: its
parts are what :mod:`ledger.adapters.openai_responses` makes of the item (so
``session_history``, ``tledger show`` and every export see a normal
conversation), and ``meta["openai_agents"]`` holds the item exactly as the SDK
gave it, which ``get_items`` returns unchanged (ids, reasoning, call ids and
unknown item types included).

Meanings (README "OpenAI Agents SDK"):

- ``get_items(limit)``: the current window's provider view as Responses input
  items, oldest first; with ``limit`` (or ``session_settings.limit``) the
  newest ``limit``. It reads the window, never the whole session.
- ``add_items(items)``: one all-or-nothing batch.
- ``pop_item()``: a marked rewrite (``History.reject``) of the newest visible
  row of the window: the row leaves the view, its original is kept in
  quarantine, the epoch changes and open ``session_history`` cursors expire.
  Returns the popped item; None on an empty window. The lead-in of a rolled
  over window cannot be popped (``LedgerError``).
- ``rollover_tokens``: optional. When the window's provider view counts more
  tokens than this (``ledger.budget`` with ``model``'s tokenizer), the next
  ``get_items`` first rolls over: a fresh window that starts with the lead-in,
  which offers ``session_history`` (give the agent
  ``session_history_tool(session)``). The SDK calls ``get_items`` when a run
  starts, so a rollover never splits a run's tool calls from their results.
- ``clear_session()``: a manual reset (``History.clear_soft``): the window
  empties, and the rows before it become the privacy floor, unreachable by
  ``session_history`` but retained. ``delete_session()`` removes the whole
  workspace (``Store.delete``).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from typing import Any

from ledger.adapters import openai_responses
from ledger.adapters.common import raw_part
from ledger.budget.tokens import TokenCounter
from ledger.core.errors import LedgerError, WindowChanged, WorkspaceNotFound
from ledger.core.rows import Row
from ledger.integrations import open_store, require
from ledger.interop.aio import AsyncStore
from ledger.transcript.history import History
from ledger.transcript.store import Store

_agents = require("agents", "agents")
from agents.memory import SessionABC, SessionSettings  # noqa: E402

__all__ = ["META_KEY", "LedgerSession", "item_row", "rows_to_items", "session_history_tool"]

META_KEY = "openai_agents"


def _plain(item: Any) -> dict[str, Any]:
    if isinstance(item, Mapping):
        return dict(item)
    dump = getattr(item, "model_dump", None)
    if dump is not None:
        return dict(dump(exclude_unset=True, mode="json"))
    raise LedgerError(f"not a Responses input item: {type(item).__name__}")


def item_row(item: Any) -> dict[str, Any]:
    """The canonical row of one SDK item (the item itself kept in meta)."""
    plain = _plain(item)
    rows = openai_responses.from_input([plain])
    if len(rows) == 1 and rows[0].get("parts"):
        row = rows[0]
    else:
        role = rows[0]["role"] if len(rows) == 1 else "assistant"
        row = {"kind": "message", "role": role, "parts": [raw_part(openai_responses.API, plain)]}
    row["meta"] = {META_KEY: plain}
    return row


def rows_to_items(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """Responses input items for provider-view rows: the kept item of each
    row written by a session, the adapter's items for runs of other rows
    (the lead-in, rows appended by other tools)."""
    items: list[dict[str, Any]] = []
    foreign: list[dict[str, Any]] = []
    for row in rows:
        kept = row.meta.get(META_KEY)
        if isinstance(kept, dict):
            if foreign:
                items.extend(openai_responses.to_input(foreign))
                foreign = []
            items.append(kept)
        else:
            foreign.append(row.data)
    if foreign:
        items.extend(openai_responses.to_input(foreign))
    return items


class LedgerSession(SessionABC):
    """An Agents SDK session kept in the ledger workspace ``session_id``.

    ``store`` or ``root`` pick the store (default ``$TLEDGER_ROOT``, else
    ``./.tledger``). The id must be a valid workspace id (``InvalidWorkspace``
    otherwise). Nothing is created on disk until the first write.
    """

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        store: Store | None = None,
        root: str | os.PathLike[str] | None = None,
        session_settings: SessionSettings | None = None,
        rollover_tokens: int | None = None,
        model: str = "gpt-4o",
    ) -> None:
        if rollover_tokens is not None and rollover_tokens < 1:
            raise LedgerError("rollover_tokens must be a positive number of tokens")
        self.rollover_tokens = rollover_tokens
        self._counter = TokenCounter(model) if rollover_tokens is not None else None
        self.store = open_store(store, root)
        self.history: History = self.store.history(session_id)
        self.session_id = self.history.workspace
        self.session_settings = session_settings or SessionSettings()
        self._async = AsyncStore(store=self.store).history(self.session_id)
        self._pop_lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"LedgerSession({self.session_id!r}, root={self.store.root!r})"

    def _view(self) -> list[Row]:
        try:
            window = self.history.window if self._counter is not None else 0
            view = self.history.provider_view()
        except WorkspaceNotFound:
            return []
        if self._counter is None or not any(r.kind != "lead_in" for r in view):
            return view
        assert self.rollover_tokens is not None
        if self._counter.rows([r.data for r in view]).tokens <= self.rollover_tokens:
            return view
        try:
            self.history.rollover([], expect_window=window)
        except WindowChanged:
            pass  # another writer moved the window first: serve the window as it is now
        return self.history.provider_view()

    def items(self, limit: int | None = None) -> list[dict[str, Any]]:
        """``get_items`` without the event loop."""
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        items = rows_to_items(self._view())
        if limit is None:
            return items
        return items[-limit:] if limit > 0 else []

    async def get_items(self, limit: int | None = None) -> list[Any]:
        return await asyncio.to_thread(self.items, limit)

    async def add_items(self, items: list[Any]) -> None:
        if not items:
            return
        rows = [item_row(item) for item in items]
        await self._async.append_many(rows)

    def pop(self) -> dict[str, Any] | None:
        """``pop_item`` without the event loop."""
        view = self._view()
        if not view:
            return None
        row = view[-1]
        if row.kind == "lead_in":
            raise LedgerError(
                f"workspace {self.session_id!r}: the newest item is the lead-in of window "
                f"{self.history.window}, which cannot be popped; clear the session instead"
            )
        items = rows_to_items([row])
        self.history.reject(row.seq)
        return items[-1] if items else None

    async def pop_item(self) -> Any:
        async with self._pop_lock:
            return await asyncio.to_thread(self.pop)

    async def clear_session(self) -> None:
        await self._async.clear_soft()

    async def delete_session(self) -> bool:
        """Delete the whole workspace (retention ends). False if there was none."""
        return await asyncio.to_thread(self.store.delete, self.session_id)


def session_history_tool(session: LedgerSession) -> Any:
    """``session_history`` of the session's workspace as an SDK ``FunctionTool``
    (the JSON result is what the model gets; bad arguments come back as error
    results, never exceptions)."""
    tool = session.history.session_history()
    spec = tool.definition("openai")["function"]
    lock = asyncio.Lock()

    async def invoke(_ctx: Any, arguments: str) -> str:
        import msgspec

        try:
            args = msgspec.json.decode(arguments or "{}")
        except msgspec.DecodeError:
            args = None
        if not isinstance(args, dict):
            return tool.call({"action": None})  # the tool's own bad_request result
        async with lock:  # the tool keeps per-query state: one call at a time
            return await asyncio.to_thread(tool.call, args)

    return _agents.FunctionTool(
        name=spec["name"], description=spec["description"],
        params_json_schema=spec["parameters"], on_invoke_tool=invoke,
        strict_json_schema=False,
    )
