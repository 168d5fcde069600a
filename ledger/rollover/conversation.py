"""One conversation under a token budget: the runtime object an agent loop drives.

:class:`Conversation` composes the engine beneath it and repeats none of its
rules: ``ledger.rollover.engine`` decides (``send_inputs`` + ``step``) and runs the
transaction (``run_rollover``), ``ledger.admission`` filters ordinary requests
(``apply_live``) and admits rollovers, ``ledger.policy`` picks the advertised
tools, the hard guard counts (``ledger.rollover.guards.request_counter``) and
``check_step`` is the last check of every request. The loop gives it rows and
gets back the next provider request, or a :class:`SendRefused` (a
``LedgerError``) saying why there is none::

    conv = Conversation.open(store, "ws", model="gpt-4o", context_limit=8000,
                             system="You are ...", tools={"bash": BASH})
    request = conv.send([user_row])            # -> Request (stored, preflighted)
    reply = call_model(request.openai_chat())  # or .anthropic(), .openai_responses()
    conv.record([reply_row])                   # model output: stored, no request
    request = conv.send(tool_result_rows)      # the next request of the tool step

Tool steps
==========
A send's rows (the *trigger*) are what precedes the next model call: a user
message, the results of a tool step, or the assistant row holding the calls
together with their results. When a rollover is due and the trigger answers
calls already stored in the window (``record``-ed model output, parallel
calls answered one at a time, an approval granted later), the rollover batch
carries those calls into the new window (``ledger.rollover.engine.carried_rows``):
``[reset, lead-in, *carried, *trigger]``. So a rollover commits only at a
settled step and the model's next request holds each call with its result.
While a call is open (no result stored or sent), no rollover happens (rule P2):
the request is sent in the current window without the open call (no provider
accepts a call without its result) and counted without it (``Request.tokens``
and the decision's count are of what is sent), and the rollover waits; above
the hard ceiling a send of tool results is refused (naming the open calls) -- the
results are stored all the same (``SendRefused.stored``), and the send that
settles the step rolls over, carrying the step whole (``ledger.core.toolpairs``:
every call of it and every result that settled it; call ids are scoped to
their step). Nothing wedges: a user message that arrives while calls are open
settles them with an error result (:data:`MOVED_ON`) in its batch, and
:meth:`Conversation.cancel_open_calls` settles them on demand. User messages
in between stay in the old window, retrievable.

Every returned request is checked against the hard ceiling (``check_step``)
before anything is appended; none exceeds it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from operator import is_
from typing import TYPE_CHECKING, Any, TypeVar

from ledger.admission import AdmissionRefused, MiddlewareRegistry, apply_live
from ledger.core.errors import Conflict, InvalidRow, LedgerError
from ledger.core.rows import Row, check_caller_row, check_depth
from ledger.core.toolpairs import pair
from ledger.core.windows import provider_rows
from ledger.policy import HISTORY_TOOL, ToolPolicy, advertised_schemas, preset_policy
from ledger.rollover.engine import (
    Action,
    BudgetConfig,
    BudgetConfigError,
    Decision,
    MemoryContext,
    PinnedModel,
    ProviderRequest,
    RolloverHooks,
    RolloverParts,
    RolloverState,
    StepBudgetExceeded,
    carried_rows,
    check_step,
    is_settled,
    run_rollover,
    send_inputs,
    step,
    warning_row,
)
from ledger.rollover.guards import request_bound, request_counter
from ledger.rollover.request import Request, tool_schema
from ledger.rollover.rules import Count, _count, lead_in_for, lead_in_message
from ledger.tokens.models import ModelRegistry, resolve

if TYPE_CHECKING:
    from ledger.storage.engine import Snapshot
    from ledger.transcript.history import AppendResult, History
    from ledger.transcript.retrieval import SessionHistory
    from ledger.transcript.store import Store

__all__ = [
    "MOVED_ON",
    "SEND_ATTEMPTS",
    "Conversation",
    "OpenCall",
    "Request",
    "SendConflict",
    "SendRefused",
    "settle_rows",
    "stored_copy",
    "tool_schema",
]

_T = TypeVar("_T")

#: The output of the error result that settles a call still open when a user
#: message arrives (the call, an approval that waits, a run that died).
MOVED_ON = "error: no result was recorded for this call before the user went on"

#: How often a send is tried again when another writer changed the window
#: between its read and its conditional append (nothing is stored by a try
#: that meets ``WindowChanged`` or ``Conflict``).
SEND_ATTEMPTS = 5


class SendRefused(LedgerError):
    """No request for this send. ``decision`` is the engine's verdict (rule id,
    reason, counted tokens, ceiling); ``rows`` the refused input;
    ``quarantined`` the seqs of the rejected records stored for it (rule B5);
    ``stored`` the seqs of tool results kept durable although no request could
    be made (rule P2: the step is still running). Nothing else was appended."""

    def __init__(
        self,
        message: str,
        decision: Decision,
        rows: Sequence[Mapping[str, Any]],
        quarantined: Sequence[int] = (),
        stored: Sequence[int] = (),
    ) -> None:
        super().__init__(message)
        self.decision = decision
        self.rows = tuple(rows)
        self.quarantined = tuple(quarantined)
        self.stored = tuple(stored)
        #: The calls that keep the step open (rule P2): settle them with their
        #: results or ``Conversation.cancel_open_calls(reason)``.
        self.open_calls: tuple[OpenCall, ...] = ()


class SendConflict(SendRefused):
    """Other writers changed the window between this send's read and its
    conditional append on every one of ``SEND_ATTEMPTS`` tries (two runs on
    one workspace at once). Nothing of this send was stored; send again."""


@dataclass(frozen=True)
class OpenCall:
    """A tool call of the active window without a result: its id, tool name
    and the seq of the row holding it."""

    id: str
    name: str | None
    seq: int | None


def settle_rows(calls: Sequence[OpenCall | str], output: str,
                reason: str) -> list[dict[str, Any]]:
    """One error result row per call (``meta.settled`` says why): what
    settles a call that will get no result of its own."""
    return [
        {"kind": "message", "role": "tool",
         "parts": [{"type": "tool_result", "id": c.id if isinstance(c, OpenCall) else c,
                    "output": output, "error": True}],
         "meta": {"settled": reason}}
        for c in calls
    ]


def _is_user_message(row: Mapping[str, Any]) -> bool:
    """A user's message (not a row of tool results sent in a user role)."""
    if row.get("kind", "message") != "message" or row.get("role") != "user":
        return False
    parts = row.get("parts")
    return isinstance(parts, list) and any(
        isinstance(p, Mapping) and p.get("type") != "tool_result" for p in parts)


def _open_calls(rows: Sequence[Any]) -> list[OpenCall]:
    found = pair(rows).open_calls()
    out = []
    for c in found:
        row = rows[c.row]
        seq = row.get("seq") if isinstance(row, Mapping) else getattr(row, "seq", None)
        out.append(OpenCall(c.id, c.name, seq if isinstance(seq, int) else None))
    return out


def _without_open_calls(messages: list[dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    """The request's messages without the calls that have no result yet (an
    approval that waits, a parallel call still running): no provider accepts
    a call without its result, and the Agents SDK leaves them out the same
    way. A row left with no parts goes."""
    found = pair(messages).open_calls()
    if not found:
        return tuple(messages)
    drop: dict[int, set[int]] = {}
    for c in found:
        drop.setdefault(c.row, set()).add(c.part)
    out = []
    for i, m in enumerate(messages):
        if i in drop:
            parts = [p for j, p in enumerate(m["parts"]) if j not in drop[i]]
            if not parts:
                continue
            m = {**m, "parts": parts}
        out.append(m)
    return tuple(out)


def _seq_of(row: Mapping[str, Any]) -> int:
    seq = row.get("seq")
    return seq if isinstance(seq, int) else 1 << 62  # unknown: never older than a state


def _open_after(known: Sequence[OpenCall],
                rows: Sequence[Mapping[str, Any]]) -> list[OpenCall]:
    """The open calls once ``rows`` follow a window whose open calls are
    ``known``: ``_open_calls([*window, *rows])`` without pairing the window
    again. A result answers the newest open call before it with its id, so
    only the open calls matter: they stand in for the window as one row."""
    if not rows:
        return list(known)
    head = [{"kind": "message", "role": "assistant", "parts": [
        {"type": "tool_call", "id": c.id, "name": c.name} for c in known]}] if known else []
    out = []
    for c in pair([*head, *rows]).open_calls():
        if head and c.row == 0:
            out.append(known[c.part])
            continue
        seq = rows[c.row - len(head)].get("seq")
        out.append(OpenCall(c.id, c.name, seq if isinstance(seq, int) else None))
    return out


def settle_before_user(view: Sequence[Mapping[str, Any]],
                       trigger: list[dict[str, Any]],
                       open_view: Sequence[OpenCall] | None = None) -> list[dict[str, Any]]:
    """``trigger`` with an error result (:data:`MOVED_ON`) for each call still
    open when its first user message arrives, placed just before that
    message: the user moved on, so the step is settled in the same batch.
    ``open_view`` is the view's open calls when the caller knows them."""
    k = next((i for i, r in enumerate(trigger) if _is_user_message(r)), None)
    if k is None:
        return trigger
    open_ = (_open_calls([*view, *trigger[:k]]) if open_view is None
             else _open_after(open_view, trigger[:k]))
    if not open_:
        return trigger
    return [*trigger[:k], *settle_rows(open_, MOVED_ON, "user_moved_on"), *trigger[k:]]


def _served(view: list[dict[str, Any]], batch: list[dict[str, Any]]) -> list[Any]:
    """``provider_rows([*view, *batch])`` for ``view``, a provider view: the
    view's rows are served as they are (the filter leaves its own output
    unchanged), so when no row of ``batch`` holds a tool result -- the only
    part whose serving depends on the rows before it -- only ``batch`` is
    filtered."""
    for row in batch:
        parts = row.get("parts")
        if isinstance(parts, list) and any(
                type(p) is not dict or p.get("type") == "tool_result" for p in parts):
            return provider_rows([*view, *batch])
    return [*view, *provider_rows(batch)]


def _as_sent(messages: Sequence[Any], *, viewed: bool, settled: bool) -> Sequence[Any]:
    """``messages`` as a request sends them: as the provider view serves them
    (``provider_rows``; not run when ``viewed``: they are a view already)
    and without the calls that have no result yet (``_without_open_calls``;
    not run when ``settled``: none is open). ``messages`` itself when neither
    changes a row, so a request built over them stays the one counted."""
    out: Sequence[Any] = messages
    if not viewed:
        out = provider_rows([m if type(m) is dict else _canonical(m) for m in out])
    if not settled:
        out = _without_open_calls(list(out))
    if out is messages or (len(out) == len(messages) and all(map(is_, out, messages))):
        return messages
    return out


def _messages(messages: Sequence[Mapping[str, Any]], *,
              own: bool = False) -> tuple[dict[str, Any], ...]:
    """A request's messages (as sent: ``_as_sent``) as canonical rows: copies
    (the caller may change them), except with ``own``, when the rows are
    dicts this send made for itself (the view's ``to_dict`` copies, the
    input's copies, settling and warning rows) and nothing else holds them."""
    if own:
        return tuple(m if type(m) is dict and "kind" in m else _canonical(m) for m in messages)
    # A plain dict holding its kind is copied inline: a request holds the
    # whole window, and two calls a row cost more than the copy itself.
    return tuple({**m} if type(m) is dict and "kind" in m else _canonical(m) for m in messages)


class _LastCounted:
    """``count`` that answers the request it counted last without counting it
    again: a send counts its request for the decision and checks the same
    request (its rows the same objects) against the hard ceiling. Only
    within one try (``forget`` between tries): the rows of a request handed
    out may be changed by the caller afterwards."""

    def __init__(self, count: Callable[[ProviderRequest], tuple[int, bool]]) -> None:
        self._count = count
        self._last: tuple[ProviderRequest, tuple[int, bool]] | None = None

    def forget(self) -> None:
        self._last = None

    def __call__(self, request: ProviderRequest) -> tuple[int, bool]:
        last = self._last
        if last is not None and (last[0] is request or last[0] == request):
            return last[1]
        result = self._count(request)
        self._last = (request, result)
        return result


def _history_tool() -> dict[str, Any]:
    from ledger.transcript.retrieval.tool import DESCRIPTION, PARAMETERS

    return tool_schema(HISTORY_TOOL, DESCRIPTION, PARAMETERS)


def _results_only(row: Mapping[str, Any]) -> bool:
    parts = row.get("parts")
    return bool(parts) and isinstance(parts, list) and all(
        isinstance(p, Mapping) and p.get("type") == "tool_result" for p in parts
    )


def _canonical(row: Any) -> dict[str, Any]:
    """A request message as a canonical row: ``kind`` always present."""
    out = _plain(row)
    return out if "kind" in out else {"kind": "message", **out}


def _plain(row: Any) -> dict[str, Any]:
    # Rows and dicts first: an ABC check costs several times a type check,
    # and a send copies every row of its request.
    if isinstance(row, Row):
        return row.to_dict()
    return dict(row) if isinstance(row, dict) or isinstance(row, Mapping) else row.to_dict()


def stored_copy(row: Any) -> dict[str, Any]:
    """A stored row as a trigger row: without the store-assigned fields, marked
    ``meta.carried_from`` (as ``carried_rows`` marks the rows it carries)."""
    plain = _plain(row)
    copy = {k: v for k, v in plain.items() if k not in ("seq", "id", "ts", "batch")}
    meta = dict(plain["meta"]) if isinstance(plain.get("meta"), Mapping) else {}
    if isinstance(plain.get("seq"), int):
        meta["carried_from"] = plain["seq"]
    copy["meta"] = meta
    return copy


def _input(rows: Iterable[Mapping[str, Any]] | Mapping[str, Any]) -> list[dict[str, Any]]:
    if isinstance(rows, Mapping):
        check_depth(rows, 0)
        return [dict(rows)]
    if isinstance(rows, (str, bytes)):
        raise InvalidRow("rows must be a list of row objects")
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise InvalidRow(f"row {i}: must be a JSON object, got {type(row).__name__}", i)
        check_depth(row, i)  # before counting, adapting or copying recurses into it
        out.append(dict(row))
        # The store's row rules, before any count or write: a bad row is
        # refused as such (never quarantined, never half stored).
        check_caller_row(out[-1], i)
    return out


class Conversation:
    """One workspace's conversation with one model under one token budget.

    ``budget`` is the caller's :class:`~ledger.rollover.engine.BudgetConfig`
    (its ``context_limit`` at most the model's window minus its output
    reserve, the model registry's numbers; thresholds warn 70%, roll over 85%,
    hard ceiling 95% unless given); ``context_limit=N`` is short for
    ``budget=BudgetConfig(N)``, and with neither the budget is the model's
    whole input room. ``tools`` maps names to neutral schemas
    (:func:`tool_schema`); ``session_history`` is added when absent, since a
    rollover needs it. ``policy`` (default: every tool granted) decides what
    is advertised and whether rollover may seal a window. ``registry``,
    ``memory``, ``hooks`` and ``precedence`` are the engine's runtime parts
    (``ledger.rollover.engine``), all optional.

    Not thread-safe: one loop drives one object. Its in-memory state (the
    warning flag, a pending rollover) follows the persisted window on every
    call, so a clear, a rollover or a restart elsewhere is picked up.
    """

    def __init__(
        self,
        history: History,
        *,
        model: str,
        budget: BudgetConfig | None = None,
        context_limit: int | None = None,
        system: str = "",
        tools: Mapping[str, Mapping[str, Any]] | None = None,
        policy: ToolPolicy | Callable[[], ToolPolicy] | None = None,
        registry: MiddlewareRegistry | None = None,
        memory: Callable[[], MemoryContext] | None = None,
        hooks: RolloverHooks | None = None,
        precedence: str | Callable[[], str | None] | None = None,
        notes_writable: bool = False,
        activated: Iterable[str] | None = None,
        models: ModelRegistry | None = None,
    ) -> None:
        spec = resolve(model, models)
        room = spec.context_limit - spec.output_reserve
        if budget is not None and context_limit is not None:
            raise BudgetConfigError("give budget= or context_limit=, not both")
        if budget is not None and not isinstance(budget, BudgetConfig):
            raise BudgetConfigError(f"budget must be a BudgetConfig, got {type(budget).__name__}")
        limit = budget.context_limit if budget is not None else (
            room if context_limit is None else context_limit)
        if isinstance(limit, int) and not isinstance(limit, bool) and limit > room:
            raise BudgetConfigError(
                f"context_limit {limit} is above what model {model!r} can take as input "
                f"({spec.context_limit} context - {spec.output_reserve} output reserve = {room})"
            )
        self.history = history
        self.model = model
        self.config = budget if budget is not None else BudgetConfig(context_limit=limit)
        all_tools = {name: dict(schema) for name, schema in (tools or {}).items()}
        all_tools.setdefault(HISTORY_TOOL, _history_tool())
        self.tools = all_tools
        self.hooks = hooks if hooks is not None else RolloverHooks()
        self.notes_writable = notes_writable
        self._count = _LastCounted(request_counter(registry=models))
        self._bound = request_bound(registry=models)
        self.parts = RolloverParts(
            workspace=history.workspace,
            model=model,
            system=system,
            tools=all_tools,
            policy=policy if policy is not None else preset_policy("exec"),
            registry=registry if registry is not None else MiddlewareRegistry(),
            memory=memory if memory is not None else (lambda: MemoryContext("")),
            count=self._count,
            config=self.config,
            activated=activated,
            precedence=precedence,
        )
        self.pinned = PinnedModel.pin(model, self.config)
        self._next_seq = 0  # the history's next seq as the newest _follow read it
        self._epoch = 0  # and its epoch
        # The window's open calls with the state (epoch, next seq, window)
        # they are of: set from this object's own batches, so a send does not
        # pair the whole window again; any other write changes the state.
        self._open: tuple[tuple[int, int, int], tuple[OpenCall, ...]] | None = None
        # The messages of the last request built while no live middleware
        # was registered: rows this object made for itself (``_messages``).
        self._own: tuple[Any, ...] | None = None
        # The first request ``_decide``'s builder made (the current window's,
        # which the decision counted) and the messages it was built from, for
        # ``_send`` to hand out when the request it would build again is the
        # same (``_same_request``).
        self._current: tuple[ProviderRequest, Sequence[Mapping[str, Any]]] | None = None
        self.state = RolloverState.after_restart(history.window)

    @classmethod
    def open(cls, store: Store, workspace: str, **kwargs: Any) -> Conversation:
        """``Conversation(store.history(workspace), **kwargs)``."""
        return cls(store.history(workspace), **kwargs)

    def __repr__(self) -> str:
        return (f"Conversation({self.history.workspace!r}, model={self.model!r}, "
                f"context_limit={self.config.context_limit})")

    # --- reads --------------------------------------------------------------------

    @property
    def window(self) -> int:
        """The active window (``History.window``; 0 for a new workspace)."""
        return self.history.window

    def session_history(self) -> SessionHistory:
        """The ``session_history`` tool bound to this workspace: run the model's
        calls of it with ``.call(arguments)``."""
        return self.history.session_history()

    def request(self) -> Request:
        """The request for the window as it is, without new rows (e.g. to retry
        a model call). Checked against the hard ceiling."""
        self._count.forget()
        view = self._view()
        with self._memory() as memory:  # one memory context per request
            provider = self._request_for(view, memory)
        counted = check_step(provider, self.pinned, self._count)
        decision = Decision(Action.SEND, "B1", "the window as stored", counted.tokens,
                            counted.exact, self.config.ceiling)
        return self._wrap(provider, counted, decision)

    # --- writes -------------------------------------------------------------------

    def record(
        self,
        rows: Iterable[Mapping[str, Any]] | Mapping[str, Any],
        *,
        quarantine: bool = True,
    ) -> AppendResult:
        """Store rows that need no request now -- the model's output, tool
        results as they arrive -- in the active window, as one batch.

        The hard preflight of rule B5 applies here too: rows that cannot fit
        even a fresh window (a huge tool output) would make every later
        request impossible, so they are refused with :class:`SendRefused` and
        stored as rejected records in one batch (unless ``quarantine=False``);
        send an error result for the call instead.
        """
        given = _input(rows)
        # Rows that settle nothing (no user message) need no read of the
        # window: the first try may start from the state this object's own
        # last batch left (``_resume``); the conditional append refuses it if
        # the window changed meanwhile, and the result says whether anything
        # else was written in between.
        own = not any(_is_user_message(r) for r in given)
        return self._attempts(given, lambda memory: self._record(given, quarantine, memory),
                              resume=own, follow=own)

    def _record(self, given: list[dict[str, Any]], quarantine: bool,
                memory: str) -> AppendResult:
        # Only a user message settles open calls: the window is read for it.
        open_view: list[OpenCall] | None = None
        if any(_is_user_message(r) for r in given):
            view = self._view()
            open_view = self._open_of(view)
            trigger = settle_before_user(view, given, open_view)
        else:
            trigger = given
            known = self._open
            if known is not None and known[0] == (self._epoch, self._next_seq,
                                                  self.state.window):
                open_view = list(known[1])
        lead = lead_in_message(lead_in_for(self._next_seq, self.parts.lead_in_text))
        request = self._request_for([lead, *trigger], memory, sent=False)
        # Counted only when a bound found without the tokenizer does not
        # already show the rows fit (rule B5 asks no more than that): the
        # count of a record's new rows was most of what a record cost
        # beyond its append (bench/RESULTS.md, issue 31, turns7).
        bound = self._bound(request)
        fresh = None if bound is not None and bound <= self.config.ceiling else _count(
            self._count, request)
        if fresh is not None and fresh.tokens > self.config.ceiling:
            est = "" if fresh.exact else " (estimate)"
            self._refuse(Decision(
                Action.REJECT, "B5",
                f"the rows count {fresh.tokens} tokens{est} even in a fresh window, above "
                f"the hard ceiling {self.config.ceiling}; no request could hold them",
                fresh.tokens, fresh.exact, self.config.ceiling, quarantine=True,
                continuation=False,
            ), given, quarantine)
        result = self.history.append_many(trigger, expect_window=self.state.window)
        self._appended(result, open_view, trigger)
        return result

    # --- tool calls left open -------------------------------------------------------

    def open_calls(self) -> list[OpenCall]:
        """The tool calls of the active window that have no result yet, in
        order (an approval that waits, a call whose process died). A user
        message settles them (:data:`MOVED_ON`); so does
        :meth:`cancel_open_calls`."""
        return _open_calls(self.history.provider_view())

    def cancel_open_calls(self, reason: str = "cancelled") -> AppendResult | None:
        """Settle every open call with an error result saying ``reason``, in
        one batch (None when no call is open). The step is then settled: the
        next send may roll over, and no request holds a call without its
        result. A result that arrives later is stored and shown to the model
        as text, never as a second result of the call."""
        if not isinstance(reason, str) or not reason:
            raise InvalidRow("cancel_open_calls needs a reason (a non-empty string)")
        return self._attempts([], lambda _: self._cancel(reason), memory=False)

    def _cancel(self, reason: str) -> AppendResult | None:
        open_ = self.open_calls()
        if not open_:
            return None
        rows = settle_rows(open_, f"error: {reason}", "cancelled")
        return self.history.append_many(rows, expect_window=self.state.window)

    def clear(self) -> AppendResult:
        """A manual clear (``History.clear_soft``): the new window starts empty
        and earlier windows are no longer retrievable (a privacy floor)."""
        self._follow()
        result = self.history.clear_soft(expect_window=self.state.window)
        self.state = self.state.observe(self.history.window)
        return result

    def send(
        self,
        rows: Iterable[Mapping[str, Any]] | Mapping[str, Any],
        *,
        quarantine: bool = True,
    ) -> Request:
        """Store ``rows`` and return the next provider request.

        The engine decides (``send_inputs`` + ``step``): send in the window,
        send with the once-per-window budget warning appended after the rows,
        roll over (one batch: reset, lead-in, carried tool-step rows, the rows)
        or refuse. A refusal raises :class:`SendRefused`; when the input
        cannot fit even a fresh window (rule B5) it is stored as rejected
        records in one batch unless ``quarantine=False``. Rows are stored only
        when a request within the hard ceiling is returned.
        """
        trigger = _input(rows)
        if not trigger:
            raise InvalidRow("send needs at least one row; request() rebuilds the stored window")
        # (The send reads the state with its view: ``_view``.)
        return self._attempts(trigger, lambda memory: self._send(trigger, quarantine, memory),
                              follow=False)

    def _attempts(self, given: list[dict[str, Any]], once: Callable[[str], _T], *,
                  memory: bool = True, resume: bool = False, follow: bool = True) -> _T:
        """Run one write (a send, a record, settling open calls) over the
        persisted window, again (up to ``SEND_ATTEMPTS``) while another writer
        changes the window under it; each failed try stored nothing.
        ``once`` gets the memory context's text of this try (with ``memory``).
        Every refusal is a :class:`SendRefused`, a conflict on every try a
        :class:`SendConflict`. ``resume``: the first try starts from the state
        of this object's own last batch when it knows one (``_resume``), else
        from a state read (``_follow``); ``follow=False``: ``once`` reads the
        state itself, with the view (``_view``), and no try reads it before."""
        for attempt in range(SEND_ATTEMPTS):
            self._count.forget()
            self._own = None
            if follow and not (resume and attempt == 0 and self._resume()):
                self._follow()
            try:
                if not memory:
                    return once("")
                with self._memory() as text:  # one memory context per request
                    return once(text)
            except Conflict:
                continue
            except AdmissionRefused as exc:
                if exc.reason == "window_changed":
                    continue
                raise SendRefused(
                    f"workspace {self.history.workspace!r}: send refused: {exc}; nothing was "
                    "stored", Decision.refused("P3", str(exc), self.config.ceiling), given,
                ) from exc
            except StepBudgetExceeded as exc:
                raise SendRefused(
                    f"workspace {self.history.workspace!r}: send refused (rule S1): {exc}; "
                    "nothing was stored",
                    Decision(Action.REJECT, "S1", str(exc), exc.tokens, exc.exact, exc.ceiling,
                             continuation=False), given,
                ) from exc
        raise self._conflict(given)

    def _conflict(self, given: list[dict[str, Any]]) -> SendConflict:
        why = (f"other writers changed window {self.history.window} under each of "
               f"{SEND_ATTEMPTS} tries (two runs on one workspace at once)")
        return SendConflict(
            f"workspace {self.history.workspace!r}: send refused: {why}; nothing of this send "
            "was stored: send it again",
            Decision.refused("conflict", why, self.config.ceiling), given)

    @contextmanager
    def _memory(self) -> Iterator[str]:
        """The memory context's text for one request, released after it."""
        memory = self.parts.memory()
        try:
            yield memory.text
        finally:
            if memory.release is not None:
                memory.release()

    def _decide(
        self,
        trigger: list[dict[str, Any]],
        view: list[dict[str, Any]],
        memory: str,
        carry: Sequence[Mapping[str, Any]] | None = None,
        *,
        settled: bool | None = None,
    ) -> tuple[int, Decision, RolloverState,
               Callable[[Sequence[Mapping[str, Any]]], ProviderRequest]]:
        """The window, decision and next state of one send, its builder of
        requests to send (``_request_for``: without open calls; ``settled``:
        whether no call is open after the trigger, when the caller knows,
        else the builder pairs the rows)."""
        policy = self.parts.current_policy()
        self._current = None
        known = bool(settled)

        def request_for(messages: Sequence[Mapping[str, Any]]) -> ProviderRequest:
            # A request to send (the current window's, then the served one):
            # built without its open calls, so counted as sent.
            request = self._request_for(messages, memory, settled=known)
            if self._current is None:
                self._current = (request, messages)
            return request

        def payload_for(messages: Sequence[Mapping[str, Any]]) -> ProviderRequest:
            # The fresh window's (rule B5): a rollover carries a step once it
            # is settled, its calls with their results, so the calls count.
            return self._request_for(messages, memory, sent=False)

        window, inputs = send_inputs(
            self.history,
            trigger,
            request_for=payload_for,
            current_for=request_for,
            count=self._count,
            history_access=policy.history_access,
            notes_writable=self.notes_writable,
            precedence=self.parts.current_precedence(),
            lead_in_text=self.parts.lead_in_text,
            carry=carry,
            view=view,
            window=self.state.window,
            settled=settled,
        )
        decision, state = step(self.state, inputs, self.config)
        return window, decision, state, request_for

    def _rollover_or_wait(
        self, decision: Decision, state: RolloverState, trigger: list[dict[str, Any]]
    ) -> tuple[Request | None, Decision, RolloverState]:
        """Roll over with ``trigger``; or, when admission refuses what the
        decision allowed (middleware, precedence that appeared meanwhile), a
        queued rollover and a send decision: the rows go to the current window
        if the request fits there."""
        try:
            return self._rollover(decision, trigger), decision, state
        except AdmissionRefused as exc:
            if exc.reason == "window_changed":
                raise  # another writer: the send is tried again
            if decision.tokens > self.config.ceiling:
                raise SendRefused(
                    f"workspace {self.history.workspace!r}: send refused (rule "
                    f"{decision.rule}): the request counts {decision.tokens} tokens, above the "
                    f"hard ceiling {self.config.ceiling}, and the rollover was refused: {exc}; "
                    "nothing was stored",
                    Decision(Action.REJECT, decision.rule, str(exc), decision.tokens,
                             decision.exact, decision.ceiling, continuation=False,
                             blocked=exc.reason), trigger,
                ) from exc
            return None, Decision(
                Action.SEND, decision.rule, f"rollover refused: {exc}", decision.tokens,
                decision.exact, decision.ceiling, pending=True, blocked=exc.reason,
            ), state.queue()

    def _send(self, given: list[dict[str, Any]], quarantine: bool, memory: str) -> Request:
        view = self._view()
        open_view = self._open_of(view)
        trigger = settle_before_user(view, given, open_view)
        settle: list[dict[str, Any]] = []
        if len(trigger) > len(given) and _is_user_message(given[0]):
            # The calls the user left open close the window they are in: the
            # settling results count as window rows, never as a step to carry.
            settle, trigger = trigger[: len(trigger) - len(given)], given
        # The calls open after the settling rows and the trigger: whether
        # the step is settled, and (for a batch of just these rows) what
        # ``_appended`` keeps.
        open_after: list[OpenCall] | None = _open_after(open_view, [*settle, *trigger])
        window, decision, state, request_for = self._decide(
            trigger, [*view, *settle], memory, settled=not open_after)
        if decision.action is Action.REJECT:
            self._refuse(decision, given, quarantine)
        rolled = decision.action is Action.ROLLOVER
        if rolled:
            if settle:
                # A rollover batch must start with its reset, so the settling
                # results are committed just before it, in the old window.
                self.history.append_many(settle, expect_window=window)
                view, settle = [*view, *settle], []
            done, decision, state = self._rollover_or_wait(decision, state, trigger)
            if done is not None:
                return done
        extra = [warning_row(decision)] if decision.action is Action.WARN else []
        # The request over the rows as the store will serve them, checked
        # against the hard ceiling before anything is appended.
        # (Counted once: when it is the request the decision counted, the
        # counter gives that count again.)
        batch = [*settle, *trigger, *extra]
        served = _served(view, batch)
        current = self._current
        if not rolled and not extra and current is not None and self._same_request(
                current[1], served):
            provider = current[0]
            self._own = provider.messages
        else:
            provider = request_for(served)
        counted = check_step(provider, self.pinned, self._count)
        result = self.history.append_many(batch, expect_window=window)
        self._appended(result, open_view, batch,
                       open_after if not rolled and not extra else None)
        self.state = state
        return self._wrap(provider, counted, decision, warned=bool(extra),
                          blocked=decision.blocked, own=provider.messages is self._own)

    def send_stored(self, first_seq: int, *, quarantine: bool = True) -> Request:
        """``send`` for a trigger that is already stored: the window's rows from
        ``first_seq`` on (for a framework that stores its items before the model
        call, like the Agents SDK session).

        The decision is ``send``'s, over the window before ``first_seq`` with
        those rows as the trigger. A rollover carries them (as copies marked
        ``meta.carried_from``, like carried tool-step rows) into the new window
        in its one batch; the originals stay sealed in the old window. A
        refusal that quarantines (rule B5) turns the stored rows into rejected
        records by one marked rewrite (``History.reject``), since they are
        stored already. Nothing else is appended except the warning of a WARN.
        A ``first_seq`` before the active window (another writer's rollover or
        clear sealed the trigger after it was stored) is refused with rule
        ``sealed`` before anything is decided or appended: the rows from it
        on would be someone else's, and the model would answer without the
        trigger. The caller reads the window again (and may carry the
        trigger into it, as the Agents SDK session does).
        """
        return self._attempts([], lambda memory: self._send_stored(first_seq, quarantine,
                                                                    memory), follow=False)

    def _send_stored(self, first_seq: int, quarantine: bool, memory: str) -> Request:
        rows, snap = self.history.provider_state()
        self._adopt(snap)
        if first_seq < snap.window_seq:
            why = (f"the trigger (rows from seq {first_seq}) was sealed by another writer's "
                   f"rollover or clear (window {snap.window_seq})")
            raise SendRefused(
                f"workspace {self.history.workspace!r}: send refused (rule sealed): {why}; "
                "nothing was sent or stored: read the window again",
                Decision.refused("sealed", why, self.config.ceiling), [])
        view = [_plain(r) for r in rows if r.seq < first_seq]
        stored = [r for r in rows if r.seq >= first_seq]
        trigger = [stored_copy(r) for r in stored]
        carry = carried_rows(view, trigger)
        window, decision, state, request_for = self._decide(
            trigger, view, memory, carry, settled=is_settled([*view, *trigger]))
        if decision.action is Action.REJECT:
            seqs: list[int] = []
            if decision.quarantine and quarantine and stored:
                seqs = [r.seq for r in stored]
            else:
                # A refused input does not stay in the window (each later
                # request would meet it); completed tool results do (rule S2).
                seqs = [r.seq for r in stored if not _results_only(r.data)]
            if seqs:
                self.history.reject(seqs)
            done = (f"; the stored input, rows {seqs}, is now rejected record(s)" if seqs
                    else "; the stored tool results stay as they are")
            open_ = _open_calls(self.history.provider_view()) if decision.rule == "P2" else []
            if open_:
                done += (f"; open tool calls {[c.id for c in open_]} keep the step running: "
                         "send their results, or settle them with cancel_open_calls(reason)")
            refused = SendRefused(
                f"workspace {self.history.workspace!r}: send refused (rule {decision.rule}): "
                f"{decision.reason}{done}",
                decision, trigger, seqs,
            )
            refused.open_calls = tuple(open_)
            raise refused
        if decision.action is Action.ROLLOVER:
            # The carried call rows go first, so the engine finds nothing
            # more to carry (the stored originals are in the window too).
            sent, decision, state = self._rollover_or_wait(decision, state, [*carry, *trigger])
            if sent is not None:
                return sent
        extra = [warning_row(decision)] if decision.action is Action.WARN else []
        # The stored rows stay where they are: the request is the window as the
        # store serves it, with the warning, checked before the warning is appended.
        provider = request_for(provider_rows([*(_plain(r) for r in rows), *extra]))
        counted = check_step(provider, self.pinned, self._count)
        if extra:
            self.history.append_many(extra, expect_window=window)
        self.state = state
        return self._wrap(provider, counted, decision, warned=bool(extra),
                          blocked=decision.blocked)

    def rollover(self) -> Request:
        """Roll over now, whatever the budget says (a manual rollover, e.g. the
        Agents SDK's ``run_compaction``): one ``run_rollover`` transaction with
        no trigger, so nothing is deleted and the new window holds the lead-in.
        Refused like any rollover (``AdmissionRefused``: an open tool call, no
        conversation to seal, no ``session_history`` access)."""
        self._count.forget()
        rows = self._view()
        with self._memory() as memory:  # one memory context per request
            tokens, exact = self._count(self._request_for(rows, memory))
        decision = Decision(Action.ROLLOVER, "manual", "a rollover was asked for",
                            tokens, exact, self.config.ceiling)
        return self._rollover(decision, [])

    # --- internals ------------------------------------------------------------------

    def _follow(self) -> None:
        """Adopt the persisted window (a clear or rollover elsewhere, a restart):
        one read of the workspace's state, kept for this try."""
        self._adopt(self.history.snapshot())

    def _adopt(self, snap: Snapshot) -> None:
        self._next_seq, self._epoch = snap.next_seq, snap.epoch
        self.state = self.state.observe(snap.window_seq)

    def _resume(self) -> bool:
        """Take the state this object's own last batch left (epoch, next
        seq, window) instead of reading it, when that batch was appended
        right after a state read and the window is the one ``state`` holds;
        False (nothing changed) when there is none. Only for a write that
        reads no rows: its append is conditional on the window, and
        ``_appended`` keeps the open calls only when the batch's first seq
        and epoch show that nothing was written since that state."""
        known = self._open
        if known is None or known[0][2] != self.state.window:
            return False
        self._epoch, self._next_seq = known[0][0], known[0][1]
        return True

    def _open_of(self, view: Sequence[Mapping[str, Any]]) -> list[OpenCall]:
        """The open calls of ``view``, read after the state ``_follow`` saw:
        kept from this object's last batch when nothing was written since and
        the view holds nothing newer than that state (a write between the
        state read and the view read)."""
        known = self._open
        if known is not None and known[0] == (self._epoch, self._next_seq, self.state.window) \
                and view and _seq_of(view[-1]) < self._next_seq:
            return list(known[1])
        return _open_calls(view)

    def _appended(self, result: AppendResult, open_before: Sequence[OpenCall] | None,
                  rows: Sequence[Mapping[str, Any]],
                  open_after: Sequence[OpenCall] | None = None) -> None:
        """Keep the open calls after this object's batch ``rows`` when the
        batch came right after the state ``_follow`` saw (nothing written in
        between) and the calls open before it are known; else forget them.
        ``open_after``: ``_open_after(open_before, rows)`` when the caller
        has it already."""
        self._open = None
        if open_before is not None and result.seqs and result.seqs[0] == self._next_seq and (
                result.epoch == self._epoch):
            after = _open_after(open_before, rows) if open_after is None else open_after
            self._open = ((result.epoch, result.seqs[-1] + 1, result.window), tuple(after))

    def _same_request(self, built_from: Sequence[Mapping[str, Any]],
                      messages: Sequence[Mapping[str, Any]]) -> bool:
        """Whether ``_request_for(messages)`` would build the request built
        from ``built_from`` again: the same message objects in the same
        order, and nothing that could assemble them differently since -- no
        live middleware, a fixed policy, activated tools a collection (an
        iterator is used up by the first request). A send then hands out the
        request its decision counted instead of building and comparing an
        equal one."""
        parts = self.parts
        return (parts.registry.idle and isinstance(parts.policy, ToolPolicy)
                and (parts.activated is None or isinstance(parts.activated, Collection))
                and len(messages) == len(built_from)
                and all(map(is_, messages, built_from)))

    def _view(self) -> list[dict[str, Any]]:
        """The provider view as plain dicts, and the state it was read under
        adopted (``_follow`` without a read of its own): one read per try."""
        rows, snap = self.history.provider_state()
        self._adopt(snap)
        return [r.to_dict() if type(r) is Row else _plain(r) for r in rows]

    def _request_for(self, messages: Sequence[Mapping[str, Any]], memory: str, *,
                     settled: bool = False, sent: bool = True) -> ProviderRequest:
        """An ordinary request over ``messages`` (a provider view): live
        middleware, the send's memory text, advertised schemas (what the
        engine calls ``request_for``). With ``sent``, the request as it is
        sent, so its count is the count of what the model gets: without the
        calls that have no result yet (``settled``: the caller knows none is
        open), and a live hook's rows served as the view serves rows.
        ``sent=False``: a payload's request (a fresh window's, rule B5),
        which keeps its calls: they are sent with their results once settled."""
        policy = self.parts.current_policy()
        schemas = advertised_schemas(self.tools, policy, self.parts.activated)
        idle = self.parts.registry.idle  # no hook can add rows of its own
        live = apply_live(
            self.parts.registry,
            self.history.workspace,
            {"system": self.parts.system, "tools": list(schemas), "messages": list(messages)},
        )
        rows = live["messages"]
        if sent:
            rows = _as_sent(rows, viewed=idle, settled=settled and idle)
        request = ProviderRequest(self.model, live["system"], tuple(live["tools"]),
                                  tuple(rows), memory)
        self._own = request.messages if idle else None
        return request

    def _rollover(self, decision: Decision, trigger: list[dict[str, Any]]) -> Request:
        outcome = run_rollover(self.history, trigger, self.parts, self.hooks)
        carried = len(outcome.prepared.trigger) - len(trigger)
        self.state = RolloverState(outcome.window)
        if outcome.discarded:
            # Committed, but the snapshot was revoked after publication: the
            # prepared request may not be delivered; build one from the view.
            return self.request()
        provider = outcome.prepared.start(lambda request: request)
        # Admission refused any open call; the rows are the rollover's own
        # (lead-in, carried, trigger), not a view: counted as they are sent.
        sent = _as_sent(provider.messages, viewed=False, settled=False)
        if sent is not provider.messages:
            provider = replace(provider, messages=tuple(sent))
        counted = check_step(provider, self.pinned, self._count)
        return self._wrap(provider, counted, decision, rolled_over=True, carried=carried)

    def _refuse(self, decision: Decision, rows: list[dict[str, Any]], quarantine: bool) -> None:
        seqs: list[int] = []
        kept: list[int] = []
        open_: list[OpenCall] = []
        if decision.rule == "P2":
            open_ = _open_calls([*self.history.provider_view(), *rows])
        if decision.quarantine and quarantine and rows:
            seqs = list(self.history.quarantine(rows, expect_window=self.state.window).seqs)
            note = f"; the input is stored as rejected record(s) {seqs}"
        elif decision.pending and rows and all(_results_only(r) for r in rows):
            # Completed results of a running step stay durable (rules B7, S2):
            # the step settles when the rest arrive, and then it rolls over.
            kept = list(self.history.append_many(rows, expect_window=self.state.window).seqs)
            note = (f"; the tool results are stored (seqs {kept}): send the results of the "
                    "open calls (or error results) to settle the step")
        else:
            note = "; nothing was stored"
        if open_:
            note += (f"; open tool calls {[c.id for c in open_]} keep the step running: send "
                     "their results, or settle them with Conversation.cancel_open_calls(reason)")
        refused = SendRefused(
            f"workspace {self.history.workspace!r}: send refused (rule {decision.rule}): "
            f"{decision.reason}{note}",
            decision, rows, seqs, kept,
        )
        refused.open_calls = tuple(open_)
        raise refused

    def _wrap(
        self,
        provider: ProviderRequest,
        counted: Count,
        decision: Decision,
        *,
        rolled_over: bool = False,
        warned: bool = False,
        carried: int = 0,
        blocked: str | None = None,
        own: bool = False,
    ) -> Request:
        """The ``Request`` of ``provider``, a request as sent (``_as_sent``:
        ``counted`` is the count of its messages). ``own``: they are this
        send's own dicts (``_messages``)."""
        system = provider.system
        if provider.memory:
            system = f"{system}\n\n{provider.memory}" if system else provider.memory
        return Request(
            model=provider.model,
            system=system,
            tools=tuple(provider.tools),
            messages=_messages(provider.messages, own=own),
            tokens=counted.tokens,
            exact=counted.exact,
            ceiling=self.config.ceiling,
            window=self.state.window,
            decision=decision,
            rolled_over=rolled_over,
            warned=warned,
            carried=carried,
            blocked=blocked,
            provider=provider,
        )

