"""The send-time decision (warn, roll over, refuse, go on), per-step checks,
the context-overflow backstop, and the file tracker protocol.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any, Protocol

from ledger.notes import NOTES_MAX_BYTES, NOTES_PATH
from ledger.policy import HISTORY_TOOL
from ledger.rollover.rules import (
    LEAD_IN_TEXT,
    WARNING_META_KEY,
    BudgetConfig,
    Count,
    Counter,
    ProviderRequest,
    StepBudgetExceeded,
    _count,
    _d,
    budget_warned,
    carried_rows,
    has_sealable_context,
    is_settled,
    lead_in_for,
    lead_in_message,
)

__all__ = [
    "Action",
    "Decision",
    "FileSnapshot",
    "FileTracker",
    "LazyCount",
    "NotesOffer",
    "OverflowAction",
    "OverflowVerdict",
    "PinnedModel",
    "RolloverState",
    "SendInputs",
    "ViewHistory",
    "check_step",
    "decide",
    "on_context_overflow",
    "send_inputs",
    "step",
    "warning_row",
]

# --- decisions ------------------------------------------------------------------


class Action(str, Enum):
    SEND = "send"
    WARN = "warn"
    ROLLOVER = "rollover"
    REJECT = "reject"


@dataclass(frozen=True)
class NotesOffer:
    """The settled tool step a warning offers: write the notes file."""

    path: str = NOTES_PATH
    max_bytes: int = NOTES_MAX_BYTES


class LazyCount:
    """A count made when first asked for (``SendInputs.fresh``); equal to
    another count of the same tokens and exactness."""

    __slots__ = ("_count", "_make")

    def __init__(self, make: Callable[[], Count]) -> None:
        self._make: Callable[[], Count] | None = make
        self._count: Count | None = None

    def __call__(self) -> Count:
        if self._count is None:
            assert self._make is not None
            self._count, self._make = self._make(), None
        return self._count

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyCount):
            return self() == other()
        return self() == other if isinstance(other, Count) else NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"LazyCount({self._count!r})" if self._count is not None else "LazyCount(...)"


@dataclass(frozen=True)
class SendInputs:
    """Everything one send decision depends on.

    ``current`` counts the request in the current window (persisted view plus
    the trigger), ``fresh`` the same trigger in a fresh window (lead-in plus
    trigger): a ``Count``, or a :class:`LazyCount` counting it when a decision
    first needs it (:meth:`fresh_count`; only a due rollover does). ``precedence``
    names an active mode that takes precedence (one of ``PRECEDENCE_MODES``
    or any other mode the runtime ranks above rollover).
    """

    current: Count
    fresh: Count | LazyCount
    has_context: bool
    settled: bool
    history_access: bool
    warned: bool = False
    notes_writable: bool = False
    precedence: str | None = None
    pending: bool = False

    def fresh_count(self) -> Count:
        """``fresh``, counted now if it was left to be counted."""
        return self.fresh() if isinstance(self.fresh, LazyCount) else self.fresh


@dataclass(frozen=True)
class Decision:
    """What to do with one send.

    ``continuation``: the turn may go on (False on every reject).
    ``quarantine``: store the rejected input as a rejected request (only for a
    payload that cannot fit even a fresh window). ``pending``: a rollover is
    queued for the next send. ``blocked``: why a due rollover was not done.
    """

    action: Action
    rule: str
    reason: str
    tokens: int
    exact: bool
    ceiling: int
    notes: NotesOffer | None = None
    pending: bool = False
    quarantine: bool = False
    continuation: bool = True
    blocked: str | None = None
    suppressed_by: str | None = None

    @classmethod
    def refused(cls, rule: str, reason: str, ceiling: int) -> Decision:
        """A reject made before anything was counted (another writer's
        conflict, a sealed or cleared trigger, a store that refused the
        rows): no tokens, not exact, and the turn does not go on."""
        return cls(Action.REJECT, rule, reason, 0, False, ceiling, continuation=False)


def decide(inputs: SendInputs, config: BudgetConfig) -> Decision:
    """The budget decision for one send. Pure; see the rule table."""
    cur = inputs.current
    ceiling = config.ceiling
    over = cur.tokens > ceiling
    est = "" if cur.exact else " (estimate)"

    def make(action: Action, rule: str, reason: str, **kw: Any) -> Decision:
        if action is Action.REJECT:
            kw.setdefault("continuation", False)
        return Decision(action, rule, reason, cur.tokens, cur.exact, ceiling, **kw)

    over_reason = (
        f"the assembled request counts {cur.tokens} tokens{est}, above the hard ceiling "
        f"{ceiling}"
    )
    if not config.automatic:
        if over:
            return make(
                Action.REJECT, "B7",
                f"{over_reason}; automatic handling is off, so the turn stops (no warning, "
                "rollover, continuation or quarantine; completed tool results are kept)",
            )
        return make(Action.SEND, "B6", "automatic handling is off; the request fits")
    if inputs.precedence is not None:
        if over:
            return make(
                Action.REJECT, "P4", f"{over_reason}; {inputs.precedence} takes precedence",
                suppressed_by=inputs.precedence,
            )
        return make(
            Action.SEND, "P4", f"{inputs.precedence} takes precedence over rollover",
            suppressed_by=inputs.precedence,
        )
    due = inputs.pending or cur.tokens > config.rollover_at
    if not due:
        if cur.tokens > config.warn_at and not inputs.warned and inputs.settled:
            notes = NotesOffer() if inputs.notes_writable else None
            return make(
                Action.WARN, "B2",
                f"the request counts {cur.tokens} tokens{est}, above the warning threshold "
                f"{config.warn_at}; a rollover starts above {config.rollover_at}",
                notes=notes,
            )
        return make(Action.SEND, "B1", "the request is below the budget thresholds")
    if not inputs.has_context:
        if over:
            return make(
                Action.REJECT, "B5",
                f"{over_reason} in a window with no earlier context: it cannot fit even a "
                "fresh window",
                quarantine=True,
            )
        return make(Action.SEND, "A6", "nothing to seal: a fitting first request is sent")
    fresh = inputs.fresh_count()
    if fresh.tokens > ceiling:
        return make(
            Action.REJECT, "B5",
            f"the payload counts {fresh.tokens} tokens"
            f"{'' if fresh.exact else ' (estimate)'} even in a fresh window, above the "
            f"hard ceiling {ceiling}; it is rejected before any provider request",
            quarantine=True,
        )
    if not inputs.history_access:
        why = (
            f"rollover blocked: the effective tool policy does not grant `{HISTORY_TOOL}`, so "
            "sealing this window would lose access to it (no summary is substituted)"
        )
        if over:
            return make(Action.REJECT, "A5", f"{over_reason}; {why}", blocked=why)
        return make(Action.SEND, "A5", why, blocked=why)
    if not inputs.settled:
        why = "rollover waits for the running tool step to settle"
        if over:
            return make(Action.REJECT, "P2", f"{over_reason}; {why}", pending=True, blocked=why)
        return make(Action.SEND, "P2", why, pending=True, blocked=why)
    return make(
        Action.ROLLOVER, "B4" if cur.tokens > config.rollover_at else "P1",
        f"the request counts {cur.tokens} tokens{est}; rolling over to a fresh window",
    )


@dataclass(frozen=True)
class RolloverState:
    """The runtime's in-memory rollover state for one conversation.

    Nothing here is persisted: a restart starts from :meth:`after_restart`
    (paused: no pending rollover, no queued continuation) and derives pressure
    from persisted history.
    """

    window: int
    warned: bool = False
    pending: bool = False
    continuation: tuple[Mapping[str, Any], ...] | None = None

    @classmethod
    def after_restart(cls, window: int) -> RolloverState:
        return cls(window)

    def observe(self, window: int) -> RolloverState:
        """Adopt ``window``; a new window starts with a clean state."""
        return self if window == self.window else RolloverState(window)

    def queue(self, continuation: Sequence[Mapping[str, Any]] | None = None) -> RolloverState:
        """Queue a rollover for the next send. At most one is pending: a second
        request (and its continuation) is ignored."""
        if self.pending:
            return self
        cont = None if continuation is None else tuple(continuation)
        return replace(self, pending=True, continuation=cont)

    def suppress(self) -> RolloverState:
        """A mode that takes precedence ran: drop the pending rollover."""
        return replace(self, pending=False, continuation=None)

    def take_continuation(self) -> tuple[tuple[Mapping[str, Any], ...] | None, RolloverState]:
        return self.continuation, replace(self, continuation=None)


def step(
    state: RolloverState, inputs: SendInputs, config: BudgetConfig
) -> tuple[Decision, RolloverState]:
    """:func:`decide` with the in-memory state folded in and updated."""
    merged = inputs
    if (state.warned and not inputs.warned) or state.pending != inputs.pending:
        # (A new SendInputs only when the state changes it: ``replace`` costs
        # more than the decision itself, and a send without a warning or a
        # queued rollover behind it needs none.)
        merged = replace(inputs, warned=inputs.warned or state.warned, pending=state.pending)
    decision = decide(merged, config)
    new = state
    if decision.action is Action.WARN:
        new = replace(new, warned=True)
    if decision.pending and not new.pending:
        new = replace(new, pending=True)
    if decision.suppressed_by is not None and new.pending:
        new = new.suppress()
    return decision, new


class ViewHistory(Protocol):
    """What a send decision reads from history."""

    @property
    def window(self) -> int: ...

    def provider_view(self) -> Sequence[Any]: ...

    @property
    def next_seq(self) -> int:
        """The seq of the next row: the id a rollover now gives its window."""
        ...


def send_inputs(
    history: ViewHistory,
    trigger_rows: Sequence[Mapping[str, Any]],
    *,
    request_for: Callable[[Sequence[Mapping[str, Any]]], ProviderRequest],
    count: Counter,
    history_access: bool,
    notes_writable: bool = False,
    precedence: str | None = None,
    lead_in_text: str = LEAD_IN_TEXT,
    carry: Sequence[Mapping[str, Any]] | None = None,
    view: Sequence[Any] | None = None,
    window: int | None = None,
    settled: bool | None = None,
    current_for: Callable[[Sequence[Mapping[str, Any]]], ProviderRequest] | None = None,
) -> tuple[int, SendInputs]:
    """The window marker and decision inputs, derived from persisted history.

    ``request_for(messages)`` assembles a request over the given messages the
    way the builder would (ordinary requests use live middleware). ``carry``
    is the window rows a rollover at this step carries with the trigger
    (default: ``carried_rows(view, trigger)``, what ``prepare_rollover``
    carries): they count in the fresh window, not twice in the current one.
    ``view`` is the provider view when the caller already read it, and
    ``window`` the window marker it read it at. The fresh-window count (and
    the carry it needs) is made only when the decision asks for it.
    ``settled`` is whether no tool call is open in ``[*view, *trigger]``,
    when the caller knows it without pairing the window again.
    ``current_for`` builds the current window's request when it is built
    otherwise than the fresh window's (``Conversation``'s leaves out the
    calls still open, as the request it sends does, while a rollover's
    payload keeps them: it carries them with their results once settled).
    """
    if window is None:
        window = history.window
    rows = history.provider_view() if view is None else view
    view = [r if type(r) is dict else _d(r) for r in rows]  # dicts as they are, inline
    trigger = list(trigger_rows)
    current = _count(count, (request_for if current_for is None else current_for)(
        [*view, *trigger]))

    def fresh() -> Count:
        lead = lead_in_message(lead_in_for(history.next_seq, lead_in_text))
        rows = carried_rows(view, trigger) if carry is None else carry
        return _count(count, request_for([lead, *rows, *trigger]))

    return window, SendInputs(
        current=current,
        fresh=LazyCount(fresh),
        has_context=has_sealable_context(view),
        settled=is_settled([*view, *trigger]) if settled is None else settled,
        history_access=history_access,
        warned=budget_warned(view),
        notes_writable=notes_writable,
        precedence=precedence,
    )


def warning_row(decision: Decision) -> dict[str, Any]:
    """The machine warning row to append for a WARN decision."""
    text = (
        f"Context budget warning: this conversation uses {decision.tokens} tokens of its "
        "window; an automatic rollover to a fresh window will follow."
    )
    notes: dict[str, Any] | None = None
    if decision.notes is not None:
        text += (
            f" Before it does, you may write what you need to keep into "
            f"`{decision.notes.path}` (at most {decision.notes.max_bytes} bytes)."
        )
        notes = {"path": decision.notes.path, "max_bytes": decision.notes.max_bytes}
    return {
        "kind": "warning",
        "role": "system",
        "parts": [{"type": "text", "text": text}],
        "meta": {WARNING_META_KEY: True, "tokens": decision.tokens, "notes": notes},
    }


# --- provider steps and the overflow backstop ---------------------------------------


@dataclass(frozen=True)
class PinnedModel:
    """The model limit an attempt pinned when it started."""

    model: str
    context_limit: int
    hard_ceiling: int

    @classmethod
    def pin(cls, model: str, config: BudgetConfig) -> PinnedModel:
        return cls(model, config.context_limit, config.ceiling)


def check_step(
    request: ProviderRequest,
    pinned: PinnedModel,
    count: Counter,
    *,
    activated_schemas: Sequence[Mapping[str, Any]] = (),
) -> Count:
    """Check one provider step after thinking/media transforms.

    Counts ``request`` with ``activated_schemas`` (tools activated during the
    turn) added, against the attempt's pinned ceiling. Raises
    :class:`StepBudgetExceeded`: the step is blocked, never rolled over.
    """
    extra = tuple(s for s in activated_schemas if s not in request.tools)
    # With nothing to add, ``request`` itself: the same request a counter
    # that keeps its last count (``Conversation``'s) then knows at once,
    # instead of comparing an equal copy's messages with it.
    counted = _count(count, replace(request, tools=request.tools + extra) if extra else request)
    if counted.tokens > pinned.hard_ceiling:
        raise StepBudgetExceeded(counted.tokens, pinned.hard_ceiling, counted.exact, pinned.model)
    return counted


class OverflowAction(str, Enum):
    RETRY = "retry"
    REJECT = "reject"


@dataclass(frozen=True)
class OverflowVerdict:
    action: OverflowAction
    reason: str


def on_context_overflow(
    *,
    exact: bool,
    automatic: bool,
    history_access: bool,
    has_context: bool,
    settled: bool,
    retried: bool,
    precedence: str | None = None,
) -> OverflowVerdict:
    """Map a provider context-overflow error to retry or reject -- never a drop.

    A retry is an in-process emergency rollover (same admission snapshot); it
    is offered once, and only where a rollover is allowed at all.
    """
    basis = "an estimate" if not exact else "an exact count"
    blockers = [
        (not automatic, "automatic handling is off"),
        (precedence is not None, f"{precedence} takes precedence"),
        (retried, "the emergency retry was already used"),
        (not has_context, "the window has nothing to seal"),
        (not history_access, f"the policy does not grant `{HISTORY_TOOL}`"),
        (not settled, "a tool step is not settled"),
    ]
    for blocked, why in blockers:
        if blocked:
            return OverflowVerdict(
                OverflowAction.REJECT,
                f"the provider reported a context overflow ({basis} said it fit); {why}: the "
                "request is rejected",
            )
    return OverflowVerdict(
        OverflowAction.RETRY,
        f"the provider reported a context overflow ({basis} said it fit); retrying once in a "
        "fresh window",
    )


# --- the file tracker -----------------------------------------------------------------


class FileTracker(Protocol):
    """The runtime's edited-file tracker, as far as an emergency retry needs it."""

    @property
    def owner(self) -> object: ...

    def baseline(self, path: str) -> Any: ...

    def restore(self, path: str, baseline: Any) -> None: ...


@dataclass(frozen=True)
class FileSnapshot:
    """A copy of accepted tracking baselines, taken when an emergency retry starts."""

    owner: object
    baselines: tuple[tuple[str, Any], ...]

    @classmethod
    def copy(cls, tracker: FileTracker, paths: Iterable[str]) -> FileSnapshot:
        """Copy the current accepted baseline of each path (paths without one
        are left out). This is the only time the tracker is read."""
        taken = []
        for path in dict.fromkeys(paths):
            baseline = tracker.baseline(path)
            if baseline is not None:
                taken.append((path, baseline))
        return cls(tracker.owner, tuple(taken))

    def restore_into(self, tracker: FileTracker) -> tuple[str, ...]:
        """Restore the copied baselines while ``owner`` is still current;
        returns the restored paths (none when ownership moved on)."""
        if tracker.owner is not self.owner:
            return ()
        for path, baseline in self.baselines:
            tracker.restore(path, baseline)
        return tuple(path for path, _ in self.baselines)




