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
the request is sent in the current window and the rollover waits; above the
hard ceiling the send is refused until the caller settles the call (a result,
or an error result for a denied approval or a cancellation) -- tool results
sent meanwhile are stored all the same (``SendRefused.stored``), and the send
that settles the step rolls over. Only the rows of the settling tool step are
carried (its call rows and their results), so the new window stays small;
user messages in between stay in the old window, retrievable.

Every returned request is checked against the hard ceiling (``check_step``)
before anything is appended; none exceeds it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ledger.admission import AdmissionRefused, MiddlewareRegistry, apply_live
from ledger.core.errors import InvalidRow, LedgerError
from ledger.core.rows import check_caller_row
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
    carried_rows,
    check_step,
    run_rollover,
    send_inputs,
    step,
    warning_row,
)
from ledger.rollover.guards import request_counter
from ledger.rollover.request import Request, tool_schema
from ledger.rollover.rules import Count, _count, lead_in_for, lead_in_message
from ledger.tokens.models import ModelRegistry, resolve

if TYPE_CHECKING:
    from ledger.transcript.history import AppendResult, History
    from ledger.transcript.retrieval import SessionHistory
    from ledger.transcript.store import Store

__all__ = ["Conversation", "Request", "SendRefused", "tool_schema"]


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
    return dict(row) if isinstance(row, Mapping) else row.to_dict()


def _stored_copy(row: Any) -> dict[str, Any]:
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
        return [dict(rows)]
    if isinstance(rows, (str, bytes)):
        raise InvalidRow("rows must be a list of row objects")
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise InvalidRow(f"row {i}: must be a JSON object, got {type(row).__name__}", i)
        out.append(dict(row))
        # The store's row rules, before any count or write: a bad row is
        # refused as such (never quarantined, never half stored).
        check_caller_row(out[-1], i)
    return out


class Conversation:
    """One workspace's conversation with one model under one token budget.

    ``context_limit`` is the caller's budget, at most the model's window minus
    its output reserve (the model registry's numbers, also the default); the
    thresholds are fractions of it as in
    :class:`~ledger.rollover.engine.BudgetConfig` (warn 70%, roll over 85%, hard
    ceiling 95% unless given). ``tools`` maps names to neutral schemas
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
        context_limit: int | None = None,
        system: str = "",
        tools: Mapping[str, Mapping[str, Any]] | None = None,
        policy: ToolPolicy | Callable[[], ToolPolicy] | None = None,
        warn_fraction: float = 0.70,
        rollover_fraction: float = 0.85,
        hard_ceiling: int | None = None,
        automatic: bool = True,
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
        limit = room if context_limit is None else context_limit
        if isinstance(limit, int) and not isinstance(limit, bool) and limit > room:
            raise BudgetConfigError(
                f"context_limit {limit} is above what model {model!r} can take as input "
                f"({spec.context_limit} context - {spec.output_reserve} output reserve = {room})"
            )
        self.history = history
        self.model = model
        self.config = BudgetConfig(
            context_limit=limit,
            warn_fraction=warn_fraction,
            rollover_fraction=rollover_fraction,
            hard_ceiling=hard_ceiling,
            automatic=automatic,
        )
        all_tools = {name: dict(schema) for name, schema in (tools or {}).items()}
        all_tools.setdefault(HISTORY_TOOL, _history_tool())
        self.tools = all_tools
        self.hooks = hooks if hooks is not None else RolloverHooks()
        self.notes_writable = notes_writable
        self._count = request_counter(registry=models)
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
        self._follow()
        view = [_plain(r) for r in self.history.provider_view()]
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
        trigger = _input(rows)
        self._follow()
        with self._memory() as memory:  # one memory context per request
            lead = lead_in_message(lead_in_for(self.history.next_seq, self.parts.lead_in_text))
            fresh = _count(self._count, self._request_for([lead, *trigger], memory))
        if fresh.tokens > self.config.ceiling:
            est = "" if fresh.exact else " (estimate)"
            self._refuse(Decision(
                Action.REJECT, "B5",
                f"the rows count {fresh.tokens} tokens{est} even in a fresh window, above the "
                f"hard ceiling {self.config.ceiling}; no request could hold them",
                fresh.tokens, fresh.exact, self.config.ceiling, quarantine=True,
                continuation=False,
            ), trigger, quarantine)
        return self.history.append_many(trigger, expect_window=self.state.window)

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
        self._follow()
        with self._memory() as memory:  # one memory context per request
            return self._send(trigger, quarantine, memory)

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
    ) -> tuple[int, Decision, RolloverState, Callable[[Sequence[Mapping[str, Any]]],
                                                      ProviderRequest]]:
        """The window, decision and next state of one send, and its request builder."""
        policy = self.parts.current_policy()

        def request_for(messages: Sequence[Mapping[str, Any]]) -> ProviderRequest:
            return self._request_for(messages, memory)

        window, inputs = send_inputs(
            self.history,
            trigger,
            request_for=request_for,
            count=self._count,
            history_access=policy.history_access,
            notes_writable=self.notes_writable,
            precedence=self.parts.current_precedence(),
            lead_in_text=self.parts.lead_in_text,
            carry=carry,
            view=view,
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
            if decision.tokens > self.config.ceiling:
                raise
            return None, Decision(
                Action.SEND, decision.rule, f"rollover refused: {exc}", decision.tokens,
                decision.exact, decision.ceiling, pending=True, blocked=exc.reason,
            ), state.queue()

    def _send(self, trigger: list[dict[str, Any]], quarantine: bool, memory: str) -> Request:
        view = [_plain(r) for r in self.history.provider_view()]
        window, decision, state, request_for = self._decide(trigger, view, memory)
        if decision.action is Action.REJECT:
            self._refuse(decision, trigger, quarantine)
        if decision.action is Action.ROLLOVER:
            done, decision, state = self._rollover_or_wait(decision, state, trigger)
            if done is not None:
                return done
        extra = [warning_row(decision)] if decision.action is Action.WARN else []
        # The request over the rows as the store will serve them, checked
        # against the hard ceiling before anything is appended.
        provider = request_for(provider_rows([*view, *trigger, *extra]))
        counted = check_step(provider, self.pinned, self._count)
        self.history.append_many([*trigger, *extra], expect_window=window)
        self.state = state
        return self._wrap(provider, counted, decision, warned=bool(extra),
                          blocked=decision.blocked)

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
        """
        self._follow()
        with self._memory() as memory:  # one memory context per request
            return self._send_stored(first_seq, quarantine, memory)

    def _send_stored(self, first_seq: int, quarantine: bool, memory: str) -> Request:
        rows = self.history.provider_view()
        view = [_plain(r) for r in rows if r.seq < first_seq]
        stored = [r for r in rows if r.seq >= first_seq]
        trigger = [_stored_copy(r) for r in stored]
        carry = carried_rows(view, trigger)
        window, decision, state, request_for = self._decide(trigger, view, memory, carry)
        if decision.action is Action.REJECT:
            seqs: list[int] = []
            if decision.quarantine and quarantine and stored:
                seqs = [r.seq for r in stored]
                self.history.reject(seqs)
            done = (f"; the stored input, rows {seqs}, is now rejected record(s)" if seqs
                    else "; the stored rows stay as they are")
            raise SendRefused(
                f"workspace {self.history.workspace!r}: send refused (rule {decision.rule}): "
                f"{decision.reason}{done}",
                decision, trigger, seqs,
            )
        if decision.action is Action.ROLLOVER:
            # The carried call rows go first, so the engine finds nothing
            # more to carry (the stored originals are in the window too).
            done, decision, state = self._rollover_or_wait(decision, state, [*carry, *trigger])
            if done is not None:
                return done
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
        self._follow()
        rows = [_plain(r) for r in self.history.provider_view()]
        with self._memory() as memory:  # one memory context per request
            tokens, exact = self._count(self._request_for(rows, memory))
        decision = Decision(Action.ROLLOVER, "manual", "a rollover was asked for",
                            tokens, exact, self.config.ceiling)
        return self._rollover(decision, [])

    # --- internals ------------------------------------------------------------------

    def _follow(self) -> None:
        """Adopt the persisted window (a clear or rollover elsewhere, a restart)."""
        self.state = self.state.observe(self.history.window)

    def _request_for(self, messages: Sequence[Mapping[str, Any]], memory: str) -> ProviderRequest:
        """An ordinary request over ``messages``: live middleware, the send's
        memory text, advertised schemas (what the engine calls ``request_for``)."""
        policy = self.parts.current_policy()
        schemas = advertised_schemas(self.tools, policy, self.parts.activated)
        live = apply_live(
            self.parts.registry,
            self.history.workspace,
            {"system": self.parts.system, "tools": list(schemas), "messages": list(messages)},
        )
        return ProviderRequest(self.model, live["system"], tuple(live["tools"]),
                               tuple(live["messages"]), memory)

    def _rollover(self, decision: Decision, trigger: list[dict[str, Any]]) -> Request:
        outcome = run_rollover(self.history, trigger, self.parts, self.hooks)
        carried = len(outcome.prepared.trigger) - len(trigger)
        self.state = RolloverState(outcome.window)
        if outcome.discarded:
            # Committed, but the snapshot was revoked after publication: the
            # prepared request may not be delivered; build one from the view.
            return self.request()
        provider = outcome.prepared.start(lambda request: request)
        counted = check_step(provider, self.pinned, self._count)
        return self._wrap(provider, counted, decision, rolled_over=True, carried=carried)

    def _refuse(self, decision: Decision, rows: list[dict[str, Any]], quarantine: bool) -> None:
        seqs: list[int] = []
        kept: list[int] = []
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
        raise SendRefused(
            f"workspace {self.history.workspace!r}: send refused (rule {decision.rule}): "
            f"{decision.reason}{note}",
            decision, rows, seqs, kept,
        )

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
    ) -> Request:
        system = provider.system
        if provider.memory:
            system = f"{system}\n\n{provider.memory}" if system else provider.memory
        return Request(
            model=provider.model,
            system=system,
            tools=tuple(provider.tools),
            messages=tuple(_canonical(m) for m in provider_rows(provider.messages)),
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

