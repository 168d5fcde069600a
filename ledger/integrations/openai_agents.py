"""The OpenAI Agents SDK's ``Session``, stored in a ledger workspace.

``LedgerSession(session_id, store=None, root=None)`` keeps one SDK session in
the workspace named ``session_id``. Every SDK item is one canonical row: its
parts are what :mod:`ledger.adapters.openai_responses` makes of the item (so
``session_history``, ``tledger show`` and every export see a normal
conversation), and ``meta["openai_agents"]`` holds the item exactly as the SDK
gave it, which ``get_items`` returns unchanged (ids, reasoning, call ids and
unknown item types included).

Meanings (docs/how-to/openai-agents.md):

- ``get_items(limit)``: the current window's provider view as Responses input
  items, oldest first; with ``limit`` (or ``session_settings.limit``) the
  newest ``limit``. It reads the window, never the whole session, and never
  writes.
- ``add_items(items)``: one all-or-nothing batch.
- ``pop_item()``: a marked rewrite (``History.reject``) of the newest visible
  row of the window: the row leaves the view, its original is kept in
  quarantine, the epoch changes and open ``session_history`` cursors expire.
  Returns the popped item; None on an empty window. The lead-in of a rolled
  over window cannot be popped (``LedgerError``).
- ``clear_session()``: a manual reset (``History.clear_soft``): the window
  empties, and the rows before it become the privacy floor, unreachable by
  ``session_history`` but retained. ``delete_session()`` removes the whole
  workspace (``Store.delete``).

The budget (``context_limit``, default what the model takes as input) is applied by
``run_config()``: its ``call_model_input_filter`` (:meth:`LedgerSession.model_input`)
runs before every model call of a run. The SDK stores each turn's items
(``add_items``) before the next model call, so the filter finds the trigger
stored -- the user's message or the tool step's results, the newest batch
-- and lets the runtime object decide (``Conversation.send_stored``): send,
send with the once-per-window budget warning appended, roll over at a
settled step (one batch: boundary, lead-in, the calls the trigger answers
and the trigger, copied; the originals stay sealed in the old window), or
refuse with ``SendRefused`` (a ``LedgerError``) before the model is called.
An input that cannot fit even a fresh window is refused and quarantined: its
stored rows become rejected records (one marked rewrite, as ``pop_item``).
The model is then sent the window as stored (the SDK's own input list is
replaced), with its system instructions; a call still waiting for approval
is left out, as the SDK leaves it out. Tool schemas and instructions count.
Only the agent's tools are granted, so a rollover that would seal context
needs ``session_history_tool(session)`` among them. When another run on
the session (another process) rolled over after this run stored its input
and sealed it, the filter carries the input into the new window (copies
marked ``meta.carried_from``) before deciding; across another run's clear
it refuses (``SendRefused``, rule ``cleared``) instead of carrying it past
the privacy floor.

``run_compaction`` (the SDK's ``OpenAIResponsesCompactionAwareSession``) is
a rollover that deletes nothing: forced or called by hand it rolls over now
(``Conversation.rollover``); the SDK's own unforced call after a turn lets
the budget decide. ``rollover_tokens`` (the old get_items-time rollover) is
refused with a ``LedgerError`` naming ``context_limit``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from ledger.adapters import openai_responses
from ledger.adapters.common import raw_part
from ledger.aio import AsyncStore
from ledger.core.errors import LedgerError
from ledger.core.ids import validate_session
from ledger.core.redact import redact
from ledger.core.rows import Row, check_depth, too_deep_error
from ledger.core.toolpairs import pair
from ledger.integrations import open_store, require
from ledger.integrations.openai_agents_branches import BranchesMixin
from ledger.policy import ToolPolicy, ToolRule
from ledger.rollover.conversation import (
    MOVED_ON,
    SEND_ATTEMPTS,
    Conversation,
    Request,
    SendConflict,
    SendRefused,
    stored_copy,
)
from ledger.rollover.engine import BudgetConfig, Decision
from ledger.rollover.request import tool_schema
from ledger.tokens.models import resolve
from ledger.transcript.history import History
from ledger.transcript.store import Store

_agents = require("agents", "agents")
from agents.memory import SessionABC, SessionSettings  # noqa: E402
from agents.run_config import ModelInputData  # noqa: E402

__all__ = ["META_KEY", "POP_ATTEMPTS", "LedgerSession", "item_row", "rows_to_items",
           "session_history_tool"]

#: How often ``pop_item`` reads the window again when another process popped
#: the item it read first.
POP_ATTEMPTS = 20

META_KEY = "openai_agents"

_T = TypeVar("_T")


def _plain(item: Any) -> dict[str, Any]:
    if isinstance(item, Mapping):
        return dict(item)
    dump = getattr(item, "model_dump", None)
    if dump is not None:
        try:
            return dict(dump(exclude_unset=True, mode="json"))
        except RecursionError:
            raise too_deep_error(what="item") from None
    raise LedgerError(f"not a Responses input item: {type(item).__name__}")


def item_row(item: Any) -> dict[str, Any]:
    """The canonical row of one SDK item (the item itself kept in meta). An
    item nested deeper than a row may is refused (``InvalidRow``) before the
    adapter recurses into it."""
    plain = _plain(item)
    check_depth(plain, what="item")
    rows = openai_responses.from_input([plain])
    if len(rows) == 1 and rows[0].get("parts"):
        row = rows[0]
    else:
        role = rows[0]["role"] if len(rows) == 1 else "assistant"
        row = {"kind": "message", "role": role, "parts": [raw_part(openai_responses.API, plain)]}
    row["meta"] = {META_KEY: plain}
    return row


def rows_to_items(rows: Sequence[Row | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Responses input items for provider-view rows (``Row`` objects or
    canonical row dicts): the kept item of each row written by a session, the
    adapter's items for runs of other rows (the lead-in, warnings, rows
    appended by other tools)."""
    items: list[dict[str, Any]] = []
    foreign: list[dict[str, Any]] = []
    for row in rows:
        # Rows and dicts first: an ABC check costs more than the rest of the
        # loop's work on a row.
        data = row.data if isinstance(row, Row) else row if isinstance(row, (dict, Mapping)) \
            else row.data
        meta = data.get("meta")
        kept = meta.get(META_KEY) if isinstance(meta, (dict, Mapping)) else None
        if isinstance(kept, dict):
            kind = kept.get("type")
            if isinstance(kind, str) and kind.endswith("_output") and not any(
                    isinstance(p, (dict, Mapping)) and p.get("type") == "tool_result"
                    for p in data.get("parts") or ()):
                kept = None  # a result the view serves as text (its call is settled or sealed)
        if isinstance(kept, dict):
            if foreign:
                items.extend(openai_responses.to_input(foreign))
                foreign = []
            items.append(kept)
        else:
            foreign.append(dict(data))
    if foreign:
        items.extend(openai_responses.to_input(foreign))
    return items


class LedgerSession(BranchesMixin, SessionABC):
    """An Agents SDK session kept in the ledger workspace ``session_id``.

    ``store`` or ``root`` pick the store (default ``$TLEDGER_ROOT``, else
    ``./.tledger``). The id must be a valid workspace id (``InvalidWorkspace``
    otherwise, and not of the form of an encoded LangGraph or Claude name:
    ``ledger.core.ids.validate_session``). Nothing is created on disk until the
    first write.

    ``context_limit`` (default: what ``model`` takes as input, its window
    minus its output reserve, from the model registry),
    ``warn_fraction``, ``rollover_fraction``, ``hard_ceiling`` and
    ``automatic`` are the budget of :class:`~ledger.rollover.conversation.Conversation`,
    which :meth:`run_config`'s input filter applies before every model call.

    The ``AdvancedSQLiteSession`` branch calls (``create_branch_from_turn``,
    ``switch_to_branch``, ...) keep each branch as a fork of the workspace
    (:mod:`ledger.integrations.openai_agents_branches`); every other call acts
    on the current branch.
    """

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        store: Store | None = None,
        root: str | os.PathLike[str] | None = None,
        *,
        context_limit: int | None = None,
        model: str = "gpt-4o",
        session_settings: SessionSettings | None = None,
        warn_fraction: float = 0.70,
        rollover_fraction: float = 0.85,
        hard_ceiling: int | None = None,
        automatic: bool = True,
        rollover_tokens: int | None = None,
    ) -> None:
        if rollover_tokens is not None:
            raise LedgerError(
                "LedgerSession(rollover_tokens=...) is no longer supported: it rolled over "
                "inside get_items, which now only reads. Give context_limit=N (the model's "
                "token budget: a warning at 70%, a rollover at 85%, never a request above 95%) "
                "and run with run_config=session.run_config()"
            )
        self.store = open_store(store, root)
        self.history: History = self.store.history(validate_session(session_id))
        self.session_id = self.history.workspace
        self.session_settings = session_settings or SessionSettings()
        self.model = model
        if context_limit is None:
            spec = resolve(model)
            context_limit = spec.context_limit - spec.output_reserve
        self._budget: dict[str, Any] = {"model": model, "budget": BudgetConfig(
            context_limit, warn_fraction=warn_fraction, rollover_fraction=rollover_fraction,
            hard_ceiling=hard_ceiling, automatic=automatic)}
        # Checks the budget now: a bad limit or an unknown model fails here.
        self._conv = Conversation(self.history, **self._budget)
        self._agent_parts: tuple[str, dict[str, Any]] = ("", {})
        self._sent_seq = -1  # the newest row the last model request held
        self._batch_from: int | None = None  # the first seq of the newest add_items batch
        self._batch_to = -1  # and its last
        self._prestored: list[str] = []  # input the filter stored before the SDK did
        self._added_items: list[Any] = []  # the items of the newest add_items
        self._added_keys: set[str] | None = set()  # their keys, made when first needed
        # The window's open calls as this session last knew them, with the
        # state they are of: the ids, or the window's rows to pair when they
        # are first needed. A batch appended at that state updates them; any
        # other write (another process, a rewrite) changes the state, and the
        # window is read again.
        self._seen: _Seen | None = None
        self._async = AsyncStore(store=self.store).history(self.session_id)
        self._pop_lock = asyncio.Lock()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"LedgerSession({self.session_id!r}, root={redact(self.store.root)!r})"

    @property
    def context_limit(self) -> int:
        """The budget in tokens (what the model takes as input when none was given)."""
        return self._conv.config.context_limit

    # --- the Session protocol ----------------------------------------------------------

    def items(self, limit: int | None = None, branch_id: str | None = None) -> list[dict[str, Any]]:
        """``get_items`` without the event loop. Reads only."""
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        if branch_id is None or branch_id == self.branch:
            items = rows_to_items(self.history.provider_view())
        else:
            items = rows_to_items(self.branch_history(branch_id).provider_view())
        if limit is None:
            return items
        return items[-limit:] if limit > 0 else []

    async def get_items(self, limit: int | None = None,
                        branch_id: str | None = None) -> list[Any]:
        """The current branch's items (``branch_id``: another branch's)."""
        return await _off_loop(self.items, limit, branch_id)

    async def add_items(self, items: list[Any]) -> None:
        if not items:
            return
        items = list(items)
        prestored, self._prestored = self._prestored, []
        while prestored and items and _key(items[0]) == prestored[0]:
            del items[0], prestored[0]  # stored already by the input filter (a streamed run)
        if not items:
            return
        rows = [item_row(item) for item in items]
        if self.branch != "main":
            await asyncio.to_thread(self.require_branch)
        self._added_items, self._added_keys = items, None
        result, settled = await _off_loop(self._add_rows, rows)
        self._batch_from, self._batch_to = result.seqs[settled], result.seqs[-1]

    def _add_rows(self, rows: list[dict[str, Any]],
                  within: int | None = None) -> tuple[Any, int]:
        """Append one batch. A user message that arrives while calls are open
        settles them: an error result (``MOVED_ON``) for each, in the same
        batch, just before the message (``Conversation``'s rule). ``within``:
        only into the window with that marker (``_WindowMoved`` otherwise,
        nothing stored)."""
        from ledger.core.errors import Conflict

        k = next((i for i, r in enumerate(rows) if _is_user_item(r)), None)
        # A first try that reads nothing (below).
        optimistic = self._seen is not None and within is None
        for attempt in range(5 + optimistic):
            # The first try starts from the state this session's own last
            # batch left, without reading it. A batch that settles nothing is
            # conditional on its window only (the batch's first seq and epoch
            # below say whether anything was written since). A user message
            # settles the open calls kept with that state, so its batch is
            # conditional on all of it -- next seq, window and epoch: another
            # writer's append or rewrite since refuses it before anything is
            # written, and the next try reads the state and the window.
            exact = False
            if attempt == 0 and optimistic and self._seen is not None:
                state, exact = self._seen.state, k is not None
            else:
                state = _state(self.history.snapshot())
            epoch, next_seq, window = state
            if within is not None and window != within:
                raise _WindowMoved
            batch = rows
            seen = self._seen if self._seen is not None and self._seen.state == state else None
            if k is not None:
                if seen is None:
                    seen = _Seen(state, None, [r.data for r in self.history.provider_view()])
                open_ = _open_after(seen.open_ids(), rows[:k])
                settle = [item_row({"type": "function_call_output", "call_id": cid,
                                    "output": MOVED_ON}) for cid in open_]
                batch = [*rows[:k], *settle, *rows[k:]]
            try:
                if exact:
                    result = self.history.append_many(batch, expect_next_seq=next_seq,
                                                      expect_window=window, expect_epoch=epoch)
                else:
                    result = self.history.append_many(batch, expect_window=window)
            except Conflict:
                continue
            self._seen = None
            if seen is not None and result.seqs[0] == next_seq and result.epoch == epoch:
                # Nothing was written between the read and this batch.
                self._seen = _Seen((result.epoch, result.seqs[-1] + 1, result.window),
                                   _open_after(seen.open_ids(), batch), None)
            # The SDK's own items start after results that settle calls first.
            return result, (len(batch) - len(rows) if k == 0 else 0)
        raise SendConflict(
            f"workspace {self.session_id!r}: other writers changed the window under each of "
            "5 tries to store the run's items (several runs on one session at once); nothing "
            "was stored", Decision.refused("conflict", "window changed", 0), rows)


    def _added(self) -> set[str]:
        """The keys of the newest ``add_items`` batch's items."""
        if self._added_keys is None:
            self._added_keys = {_key(i) for i in self._added_items}
        return self._added_keys

    def pop(self) -> Any:
        """One try of ``pop_item`` without the event loop: the popped item,
        None on an empty window, or ``_POPPED_ELSEWHERE`` when another process
        rejected the row first (``pop_once`` retries)."""
        view = self.history.provider_view()
        if not view:
            return None
        row = view[-1]
        if row.kind == "lead_in":
            raise LedgerError(
                f"workspace {self.session_id!r}: the newest item is the lead-in of window "
                f"{self.history.window}, which cannot be popped; clear the session instead"
            )
        items = rows_to_items([row])
        done = self.history.reject(row.seq)
        if row.seq not in done.rejected:
            return _POPPED_ELSEWHERE
        return items[-1] if items else None

    def pop_once(self) -> dict[str, Any] | None:
        """``pop`` that gives each item to at most one caller, across
        processes: the reject runs under the engine's lock and says whether
        this call rejected the row; when another process popped it first, the
        window is read again (up to ``POP_ATTEMPTS`` times)."""
        for _ in range(POP_ATTEMPTS):
            got = self.pop()
            if got is not _POPPED_ELSEWHERE:
                return got
        raise LedgerError(
            f"workspace {self.session_id!r}: pop_item lost the race for the newest item "
            f"{POP_ATTEMPTS} times in a row (other processes pop this session); nothing was "
            "popped by this call")

    async def pop_item(self) -> Any:
        async with self._pop_lock:
            return await asyncio.to_thread(self.pop_once)

    def open_calls(self) -> list[str]:
        """Ids of the window's function calls that have no output yet (an
        approval that waits, a run that died mid-tool)."""
        return [c.id for c in pair(r.data for r in self.history.provider_view()).open_calls()]

    def cancel_calls(self, reason: str = "cancelled") -> list[str]:
        """``cancel_open_calls`` without the event loop."""
        if not isinstance(reason, str) or not reason:
            raise LedgerError("cancel_open_calls needs a reason (a non-empty string)")
        with self._lock:
            ids = self.open_calls()
            if ids:
                self.history.append_many([item_row(
                    {"type": "function_call_output", "call_id": cid, "output": f"error: {reason}"})
                    for cid in ids])
            return ids

    async def cancel_open_calls(self, reason: str = "cancelled") -> list[str]:
        """Settle every open function call with an error output saying
        ``reason``, in one batch; returns their ids. A new user message does
        the same by itself (``MOVED_ON``); an output that arrives later is
        stored and shown to the model as text."""
        return await asyncio.to_thread(self.cancel_calls, reason)

    async def clear_session(self) -> None:
        await self._async.clear_soft()

    async def delete_session(self) -> bool:
        """Delete the whole workspace and every branch of it (retention
        ends); the session is on ``main`` after. False if there was none."""
        def delete() -> bool:
            self.drop_all_branches()
            return bool(self.store.delete(self.session_id))
        return await asyncio.to_thread(delete)

    # --- branches (AdvancedSQLiteSession's API; openai_agents_branches) -----------------

    items_of = staticmethod(rows_to_items)

    def _use(self, workspace: str) -> None:
        """Point the session at ``workspace`` (a branch switch): a fresh
        budget state, since what was sent belongs to the other branch."""
        with self._lock:
            self.history = self.store.history(workspace)
            self._conv = Conversation(self.history, **self._budget)
            self._agent_parts = ("", {})
            self._sent_seq, self._batch_from, self._batch_to = -1, None, -1
            self._prestored, self._added_items, self._added_keys = [], [], set()
            self._seen = None
            self._async = AsyncStore(store=self.store).history(workspace)

    async def create_branch_from_turn(self, turn_number: int,
                                      branch_name: str | None = None) -> str:
        """A branch holding everything before user turn ``turn_number`` of
        the current branch's window (a fork), switched to; returns its id."""
        return await asyncio.to_thread(self.branch_from_turn, turn_number, branch_name)

    async def create_branch_from_content(self, search_term: str,
                                         branch_name: str | None = None) -> str:
        """``create_branch_from_turn`` at the first turn holding ``search_term``."""
        return await asyncio.to_thread(self.branch_from_content, search_term, branch_name)

    async def switch_to_branch(self, branch_id: str) -> None:
        await asyncio.to_thread(self.switch, branch_id)

    async def delete_branch(self, branch_id: str, force: bool = False) -> None:
        await asyncio.to_thread(self.drop_branch, branch_id, force)

    async def list_branches(self) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self.branches)

    async def get_conversation_turns(self, branch_id: str | None = None) -> list[dict[str, Any]]:
        return await asyncio.to_thread(
            lambda: [t.info(100) for t in self.turns_of(branch_id)])

    async def find_turns_by_content(self, search_term: str,
                                    branch_id: str | None = None) -> list[dict[str, Any]]:
        return await asyncio.to_thread(
            lambda: [t.info(None) for t in self.turns_of(branch_id) if t.matches(search_term)])

    # --- the budget: run_config and run_compaction --------------------------------------

    def run_config(self, **kwargs: Any) -> Any:
        """An ``agents.RunConfig`` (``kwargs`` are its other fields) whose
        ``call_model_input_filter`` is :meth:`model_input`: the budget before
        every model call of a run."""
        if "call_model_input_filter" in kwargs:
            raise LedgerError(
                "run_config() sets call_model_input_filter itself (the session's budget); "
                "to filter input as well, wrap session.model_input in your own filter"
            )
        return _agents.RunConfig(call_model_input_filter=self.model_input, **kwargs)

    async def model_input(self, data: Any) -> Any:
        """The ``call_model_input_filter``: the request for this model call, as
        the session stores it (see the module docstring)."""
        instructions = data.model_data.instructions
        schemas = _tool_schemas(data.agent)
        given = [_plain(i) for i in data.model_data.input]
        items = await _off_loop(self.request_items, instructions or "", schemas, given)
        return ModelInputData(input=items, instructions=instructions)

    def request_items(
        self,
        system: str = "",
        tools: Mapping[str, Mapping[str, Any]] | None = None,
        given: Sequence[Mapping[str, Any]] = (),
    ) -> list[Any]:
        """The budget step of one model call without the event loop: decide
        on the trigger (send, warn, roll over, or refuse with ``SendRefused``)
        and return the window's items as the model gets them. ``given`` is the
        SDK's own input list: its items after the newest one the window holds
        are not stored yet (a streamed run stores its input after this filter)
        and are sent (stored) here; ``add_items`` then skips them."""
        with self._lock:
            conv = self._conversation(system, dict(tools or {}))
            for _ in range(SEND_ATTEMPTS):
                request = self._request(conv, given)
                if request is not None:
                    self._sent_seq = self.history.next_seq - 1
                    return _drop_open_calls(rows_to_items(request.messages))
            raise SendConflict(
                f"workspace {self.session_id!r}: other runs sealed the window under each of "
                f"{SEND_ATTEMPTS} tries to send the run's input; the model was not called",
                Decision.refused("conflict", "window sealed", conv.config.ceiling), [])

    def _request(self, conv: Conversation,
                 given: Sequence[Mapping[str, Any]]) -> Request | None:
        """One try of ``request_items``: the request, or None when another
        run sealed the trigger between this try's read and its send (rule
        ``sealed``: nothing was sent; the next try carries it)."""
        view = self.history.provider_view()
        own, carried = self._batch_from, None
        if own is not None and own > self._sent_seq and (not view or view[0].seq > own):
            # This run's input is not in the window: another run's rollover
            # sealed it, or a clear hid it (rare: reads more).
            carried = self._carry_sealed(own, conv)
            if carried is not None:
                view = self.history.provider_view()
        unstored = self._unstored(given, view)
        if any(item_row(i)["role"] == "assistant" for i in unstored):
            # The model's output is always stored before the next call: an
            # item that only looks unstored is not sent (stored) twice.
            unstored = []
        if unstored:
            request = conv.send([item_row(i) for i in unstored])
            self._prestored = [_key(i) for i in unstored]
            return request
        first = self._trigger_start(view) if carried is None else carried
        try:
            return conv.request() if first is None else conv.send_stored(first)
        except SendRefused as refused:
            if refused.decision.rule == "sealed":
                return None
            self._settle_refused(refused)
            if first is not None:
                self._drop_input(first)
            raise

    async def run_compaction(self, args: Mapping[str, Any] | None = None) -> None:
        """The SDK's compaction hook as a rollover that deletes nothing.

        Called by hand (no ``args``) or with ``force``: roll over now
        (``Conversation.rollover``); refused with a ``LedgerError`` while a
        tool call is open or when there is nothing to seal. Called by the SDK
        after a turn (``force`` false; the SDK does so when its model returns
        response ids): the budget decides on the window as it stands, as
        before a model call (a warning, or a rollover above the threshold),
        and a refusal is left to the next model call."""
        forced = args is None or bool(args.get("force"))
        await asyncio.to_thread(self._compact, forced)

    def _compact(self, forced: bool) -> None:
        with self._lock:
            conv = self._conversation(*self._agent_parts)
            if forced:
                conv.rollover()
                return
            try:
                # No new rows: the budget decides on the window as it stands.
                conv.send_stored(self.history.next_seq)
            except LedgerError:
                return  # the next model call meets the same verdict and raises it
            self._sent_seq = self.history.next_seq - 1

    # --- internals ---------------------------------------------------------------------

    def _conversation(self, system: str, tools: dict[str, Any]) -> Conversation:
        """The runtime object for the agent's system text and tools, rebuilt
        when they change (a handoff, dynamic instructions) with its state (a
        pending rollover) kept. Only the agent's tools are granted, so a
        rollover needs the agent to have ``session_history``."""
        if (system, tools) != self._agent_parts:
            conv = Conversation(
                self.history, system=system, tools=tools,
                policy=ToolPolicy([ToolRule.enable(name) for name in tools]), **self._budget,
            )
            conv.state = self._conv.state
            self._conv, self._agent_parts = conv, (system, tools)
        return self._conv

    def _settle_refused(self, refused: SendRefused) -> None:
        """Tool results quarantined by the hard preflight leave their calls
        open, and an open call blocks every later rollover: answer each such
        call with an error result (an SDK ``function_call_output``) so the
        step settles and the model learns why there is no output."""
        if not refused.quarantined:
            return
        tokens = refused.decision.tokens
        items = [
            {"type": "function_call_output", "call_id": str(part.get("id")),
             "output": f"error: this tool output was refused and quarantined: with it the "
                       f"request counted {tokens} tokens, and it cannot fit even a fresh "
                       "context window"}
            for row in refused.rows for part in row.get("parts") or ()
            if isinstance(part, Mapping) and part.get("type") == "tool_result"
        ]
        if items:
            self.history.append_many([item_row(i) for i in items])

    def _drop_input(self, first: int) -> None:
        """A refused run keeps no input in the window: the stored rows of its
        trigger that are not tool outputs become rejected records (one marked
        rewrite; already rejected rows are left as they are). Tool outputs
        stay: they settle their calls. Rows another run stored meanwhile stay."""
        seqs = [r.seq for r in self.history.provider_view()
                if r.seq >= first and not _only_outputs(r.data)
                and _key(r.meta.get(META_KEY)) in self._added()]  # this run's, not another's
        if seqs:
            self.history.reject(seqs)

    def _unstored(self, given: Sequence[Mapping[str, Any]],
                  view: Sequence[Row]) -> list[Mapping[str, Any]]:
        """The tail of the SDK's input after the newest item the window holds."""
        if not given:
            return []
        newest = _key(given[-1])
        if view and rows_to_items(view[-1:]) and newest == _key(rows_to_items(view[-1:])[-1]):
            return []  # the usual case: the SDK stored everything before this call
        window = [_key(i) for i in rows_to_items(view)]
        keys = [_key(i) for i in given]
        for key in reversed(window):  # an open call the SDK left out is skipped
            if key in keys:
                last = len(keys) - 1 - keys[::-1].index(key)
                return list(given[last + 1:])
        if window and any(_key(i) in self._added() for i in given):
            return []  # stored by this session; other runs moved the window on since
        if window:
            raise LedgerError(
                f"workspace {self.session_id!r}: the run's input holds nothing of the "
                "session's window; run with session=<this session> as well as "
                "run_config=session.run_config()"
            )
        return list(given)

    def _carry_sealed(self, own: int, conv: Conversation) -> int | None:
        """The first seq of this run's input in the active window when
        another run's rollover sealed it before this model call (the input
        stored, then the other run's send rolled over with only its own
        trigger): the model must not answer without the question it was
        called for. A copy carried by that rollover is used as it is; else
        the input rows of the newest ``add_items`` batch are copied into the
        active window (marked ``meta.carried_from``, as a rollover carries),
        one batch conditional on the window read here, and are the trigger.
        An input hidden by a clear (a privacy floor after it) is never
        carried across it: the send is refused (``SendRefused``, rule
        ``cleared``) and nothing reaches the model. None when the input is
        in the active window after all, or the batch held no input (the
        model's own output): the usual walk decides."""
        for _ in range(SEND_ATTEMPTS):
            rows, snap = self.history.provider_state()
            window = snap.window_seq
            if own >= window:
                return None
            for row in rows:
                carried = row.meta.get("carried_from")
                if isinstance(carried, int) and own <= carried <= self._batch_to:
                    return row.seq  # the other run's rollover carried it
            stored = []
            for row in self.history.rows(own - 1):
                if row.seq > self._batch_to:
                    break
                # The run's own items (not results its batch settled calls
                # with); a rejected row has no parts.
                kept = row.meta.get(META_KEY)
                if row.kind == "message" and row.parts and isinstance(kept, dict) \
                        and _key(kept) in self._added():
                    stored.append(row)
            if not any(r.role != "assistant" for r in stored):
                return None
            floor = snap.floor
            if floor is not None and (floor.seq < 0 or floor.seq >= own):
                raise SendRefused(
                    f"workspace {self.session_id!r}: send refused (rule cleared): the run's "
                    f"input (seq {own}) was stored before a clear of the session (the privacy "
                    "floor of another run's clear_session); it is not carried across the "
                    "floor and the model was not called; run again to ask it in the new "
                    "window",
                    Decision.refused("cleared", "the input is behind a privacy floor",
                                     conv.config.ceiling), [])
            try:
                result, settled = self._add_rows([stored_copy(r) for r in stored], window)
            except _WindowMoved:
                continue
            self._batch_from, self._batch_to = result.seqs[settled], result.seqs[-1]
            return self._batch_from
        raise SendConflict(
            f"workspace {self.session_id!r}: other runs moved the window on under each of "
            f"{SEND_ATTEMPTS} tries to carry the run's input (seq {own}) into it; the model "
            "was not called",
            Decision.refused("conflict", "window changed", conv.config.ceiling), [])

    def _trigger_start(self, view: Sequence[Row]) -> int | None:
        """The seq of the first row of this send's trigger: the user's message
        or the tool results stored since the model last spoke. In this process
        that is the newest ``add_items`` batch (earlier inputs the model has
        not answered stay context); for a session opened on a stored window,
        the rows after the model's newest output. None when there are none, or
        when they were sent already.

        This process's own batch that no request has held yet (an input, not
        the model's output) is the trigger even when another run on the
        session (another process) stored rows after it, its model's answer
        included: the walk back below would stop at that answer and leave
        this step without a trigger, so without the budget's decision -- a
        window that another run filled past the hard ceiling meanwhile was
        then refused (``StepBudgetExceeded``) instead of rolled over."""
        floor = self._sent_seq
        own = self._batch_from
        if own is not None:
            if own > floor:
                for row in reversed(view):
                    if row.seq <= own:
                        if row.seq == own and row.kind == "message" and row.role != "assistant":
                            return own  # (the model's own output is never a trigger)
                        break
            floor = max(floor, own - 1)
        first: int | None = None
        for row in reversed(view):
            if row.kind != "message":
                if first is None:
                    continue  # a warning after the trigger it followed
                break
            if row.role == "assistant" or row.seq <= floor:
                break
            first = row.seq
        return first


_POPPED_ELSEWHERE: Any = object()


class _WindowMoved(Exception):
    """``_add_rows(within=...)`` met another window: nothing was stored."""


async def _off_loop(fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)`` in the loop's default executor, as ``asyncio.to_thread``
    but without running it in a copy of the caller's context variables (the
    store's code reads none): the hop of every ``add_items``, ``get_items``
    and model call, where the copy and its ``Context.run`` cost about a tenth
    of a short turn's CPU (bench/RESULTS.md, issue 31, third round)."""
    return await asyncio.get_running_loop().run_in_executor(None, functools.partial(fn, *args))


def _only_outputs(row: Mapping[str, Any]) -> bool:
    parts = row.get("parts")
    return bool(parts) and isinstance(parts, list) and all(
        isinstance(p, Mapping) and p.get("type") == "tool_result" for p in parts)


def _is_user_item(row: Mapping[str, Any]) -> bool:
    parts = row.get("parts")
    return row.get("role") == "user" and isinstance(parts, list) and any(
        isinstance(p, Mapping) and p.get("type") != "tool_result" for p in parts)


class _Seen:
    """The open calls of the window at ``state``: their ids, or the window's
    rows, paired when the ids are first asked for."""

    __slots__ = ("_ids", "_rows", "state")

    def __init__(self, state: tuple[int, int, int], ids: list[str] | None,
                 rows: list[Mapping[str, Any]] | None) -> None:
        self.state, self._ids, self._rows = state, ids, rows

    def open_ids(self) -> list[str]:
        if self._ids is None:
            self._ids = [c.id for c in pair(self._rows or ()).open_calls()]
            self._rows = None
        return self._ids


def _open_after(open_ids: list[str], rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The ids of the calls open after ``rows`` are added to a window whose
    open calls are ``open_ids`` (pairing: a result answers the newest open
    call with its id, so only the open calls matter)."""
    if not rows:
        return list(open_ids)
    head = [{"role": "assistant", "parts": [{"type": "tool_call", "id": i}
                                            for i in open_ids]}] if open_ids else []
    return [c.id for c in pair([*head, *rows]).open_calls()]


def _state(snap: Any) -> tuple[int, int, int]:
    """What identifies a window's contents: epoch (every rewrite changes it),
    next seq (every append) and window marker."""
    return (snap.epoch, snap.next_seq, snap.window_seq)


def _key(item: Any) -> str:
    try:
        return json.dumps(_plain(item), sort_keys=True, default=str)
    except RecursionError:  # an item nested too deep to compare, or to store
        raise too_deep_error(what="item") from None


def _drop_open_calls(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Leave out tool calls without their result in the same input (a call
    that waits for approval), as the SDK does for its own input. An output
    answers the newest call before it with its ``call_id`` that has none yet
    (ids are scoped to their step, as in ``ledger.core.toolpairs``)."""
    waiting: dict[Any, list[int]] = {}
    for i, item in enumerate(items):
        if not isinstance(item, dict) or item.get("call_id") is None:
            continue
        kind = str(item.get("type", ""))
        if kind.endswith("_output"):
            if waiting.get(item["call_id"]):
                waiting[item["call_id"]].pop()
        elif kind.endswith("_call"):
            waiting.setdefault(item["call_id"], []).append(i)
    drop = {i for pending in waiting.values() for i in pending}
    return [item for i, item in enumerate(items) if i not in drop]


def _tool_schemas(agent: Any) -> dict[str, dict[str, Any]]:
    """The function tools and handoffs the agent advertises, as neutral schemas."""
    schemas: dict[str, dict[str, Any]] = {}
    for tool in getattr(agent, "tools", None) or ():
        params = getattr(tool, "params_json_schema", None)
        name = getattr(tool, "name", None)
        if isinstance(name, str) and isinstance(params, dict):
            schemas[name] = tool_schema(name, getattr(tool, "description", "") or "", params)
    for item in getattr(agent, "handoffs", None) or ():
        handoff = item if isinstance(item, _agents.Handoff) else _agents.handoff(item)
        schemas[handoff.tool_name] = tool_schema(
            handoff.tool_name, handoff.tool_description, handoff.input_json_schema)
    return schemas


def session_history_tool(session: LedgerSession) -> Any:
    """``session_history`` of the session's workspace as an SDK ``FunctionTool``
    (the JSON result is what the model gets; bad arguments come back as error
    results, never exceptions)."""
    tool = session.history.session_history()
    spec = tool.definition("openai")["function"]
    lock = asyncio.Lock()
    tools = {session.history.workspace: tool}  # one per branch the session visits

    async def invoke(_ctx: Any, arguments: str) -> str:
        import msgspec

        try:
            args = msgspec.json.decode(arguments or "{}")
        except msgspec.DecodeError:
            args = None
        if not isinstance(args, dict):
            return tool.call({"action": None})  # the tool's own bad_request result
        history = session.history  # the current branch's
        current = tools.get(history.workspace) or tools.setdefault(
            history.workspace, history.session_history())
        async with lock:  # the tool keeps per-query state: one call at a time
            return await asyncio.to_thread(current.call, args)

    return _agents.FunctionTool(
        name=spec["name"], description=spec["description"],
        params_json_schema=spec["parameters"], on_invoke_tool=invoke,
        strict_json_schema=False,
    )
