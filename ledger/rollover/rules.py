"""Rollover's vocabulary: its errors, the budget configuration, request counts,
and the pure rules over rows (settled tool pairs, internal rows, warnings).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from ledger.core.errors import BudgetExceeded, LedgerError
from ledger.core.rows import Row
from ledger.core.toolpairs import pair
from ledger.transcript.history import LEAD_IN_TEXT as _LEAD_IN_TEMPLATE
from ledger.transcript.history import TOOL_OFFER

__all__ = [
    "LEAD_IN_TEXT",
    "PRECEDENCE_MODES",
    "WARNING_META_KEY",
    "BudgetConfig",
    "BudgetConfigError",
    "CleanupFailed",
    "Count",
    "Counter",
    "DeliveryFailed",
    "PostCommitError",
    "PreparedStateError",
    "ProviderRequest",
    "RequestBuilder",
    "RequestParts",
    "RolloverCancelled",
    "RolloverError",
    "StepBudgetExceeded",
    "assemble",
    "budget_warned",
    "carried_rows",
    "has_sealable_context",
    "is_internal",
    "is_settled",
    "lead_in_for",
    "lead_in_message",
    "open_tool_calls",
    "orphan_tool_results",
]

# One lead-in text for the engine and ``History.rollover``: it names the new
# window by the seq of its reset row (the id ``session_history`` ``list``
# reports), offers ``session_history``, and quotes or summarises nothing. The
# prepared request holds the exact row text, so the engine predicts that seq
# (the history's next seq at preparation) and commits with ``expect_next_seq``.
LEAD_IN_TEXT = _LEAD_IN_TEMPLATE.replace("{tool}", TOOL_OFFER)
WARNING_META_KEY = "budget_warning"

#: Modes that take precedence over rollover (the record's list).
PRECEDENCE_MODES = frozenset(
    {"manual_compaction", "idle_compaction", "continuous_compaction", "rlm"}
)


# --- errors -------------------------------------------------------------------


class RolloverError(LedgerError):
    """A rollover that did not complete; see the subclass for what was done."""


class BudgetConfigError(RolloverError):
    """Budget thresholds that contradict each other."""


class RolloverCancelled(RolloverError):
    """Cancelled before publication. ``stage`` says where; ``cleared`` whether
    context-scoped state had already been cleared (it is not restored)."""

    def __init__(self, stage: str, message: str, *, cleared: bool) -> None:
        super().__init__(message)
        self.stage = stage
        self.cleared = cleared


class CleanupFailed(RolloverError):
    """A context-scoped cleanup callback failed: nothing was appended and no
    provider request was made. ``cleared`` names the callbacks that had run."""

    def __init__(self, step: str, cleared: tuple[str, ...], message: str) -> None:
        super().__init__(message)
        self.step = step
        self.cleared = cleared


class PostCommitError(RolloverError):
    """The rollover batch is committed (adopt ``window``) but a post-commit
    callback failed, so the prepared request was not started."""

    def __init__(self, window: int, result: Any, message: str) -> None:
        super().__init__(message)
        self.window = window
        self.result = result


class DeliveryFailed(RolloverError):
    """The rollover batch is committed (adopt ``window``) and the prepared
    request was started, but ``send`` raised; the cause is chained."""

    def __init__(self, window: int, result: Any, message: str) -> None:
        super().__init__(message)
        self.window = window
        self.result = result


class PreparedStateError(RolloverError):
    """A prepared rollover used after release, or started twice."""


class StepBudgetExceeded(BudgetExceeded):
    """A provider step above the attempt's pinned hard ceiling. The step is
    blocked; there is no emergency rollover, and results already appended stay."""

    emergency_rollover = False

    def __init__(self, tokens: int, ceiling: int, exact: bool, model: str) -> None:
        super().__init__(
            f"provider step for model {model!r} counts {tokens} tokens"
            f"{'' if exact else ' (estimate)'}, above its pinned hard ceiling {ceiling}; "
            "the step is blocked (no emergency rollover); completed tool results are kept"
        )
        self.tokens = tokens
        self.ceiling = ceiling
        self.exact = exact
        self.model = model


# --- configuration and counts --------------------------------------------------


@dataclass(frozen=True)
class BudgetConfig:
    """Thresholds of one model's context window.

    ``warn_fraction`` and ``rollover_fraction`` are fractions of
    ``context_limit``; ``hard_ceiling`` (tokens, below the limit; default 95%
    of it) is the most any provider request may count. ``automatic=False``
    turns warnings and rollover off; the hard ceiling still holds.
    """

    context_limit: int
    warn_fraction: float = 0.70
    rollover_fraction: float = 0.85
    hard_ceiling: int | None = None
    automatic: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.context_limit, bool) or not isinstance(self.context_limit, int):
            raise BudgetConfigError("context_limit must be an integer number of tokens")
        if self.context_limit <= 0:
            raise BudgetConfigError(f"context_limit must be positive, got {self.context_limit}")
        if not 0 < self.warn_fraction < self.rollover_fraction <= 1:
            raise BudgetConfigError(
                "thresholds must satisfy 0 < warn_fraction < rollover_fraction <= 1, got "
                f"{self.warn_fraction} and {self.rollover_fraction}"
            )
        ceiling = self.hard_ceiling
        if ceiling is None:
            ceiling = (self.context_limit * 95) // 100
            object.__setattr__(self, "hard_ceiling", ceiling)
        if not 0 < ceiling < self.context_limit:
            raise BudgetConfigError(
                f"hard_ceiling must be below the context limit {self.context_limit}, got {ceiling}"
            )
        if self.rollover_at > ceiling:
            raise BudgetConfigError(
                f"the rollover threshold ({self.rollover_at} tokens) is above the hard ceiling "
                f"({ceiling}); lower rollover_fraction or raise hard_ceiling"
            )

    @property
    def ceiling(self) -> int:
        assert self.hard_ceiling is not None
        return self.hard_ceiling

    @property
    def warn_at(self) -> int:
        return int(self.context_limit * self.warn_fraction)

    @property
    def rollover_at(self) -> int:
        return int(self.context_limit * self.rollover_fraction)


@dataclass(frozen=True)
class Count:
    tokens: int
    exact: bool


@dataclass(frozen=True)
class ProviderRequest:
    """One provider request as the builder assembled it. Immutable."""

    model: str
    system: str
    tools: tuple[Mapping[str, Any], ...]
    messages: tuple[Mapping[str, Any], ...]
    memory: str = ""


Counter = Callable[[ProviderRequest], "tuple[int, bool]"]


@dataclass(frozen=True)
class RequestParts:
    """What the builder assembles into a request."""

    model: str
    system: str
    memory: str
    tools: tuple[Mapping[str, Any], ...]
    messages: tuple[Mapping[str, Any], ...]


RequestBuilder = Callable[[RequestParts], ProviderRequest]


def assemble(parts: RequestParts) -> ProviderRequest:
    """The plain builder: the parts, as they are."""
    return ProviderRequest(parts.model, parts.system, parts.tools, parts.messages, parts.memory)


def _count(count: Counter, request: ProviderRequest) -> Count:
    tokens, exact = count(request)
    return Count(int(tokens), bool(exact))


# --- rows -----------------------------------------------------------------------


def _d(row: Any) -> Mapping[str, Any]:
    # A dict first: the ABC check costs several times a type check.
    if isinstance(row, dict):
        return row
    return row.to_dict() if isinstance(row, Row) or not isinstance(row, Mapping) else row


def _parts(row: Mapping[str, Any]) -> list[Any]:
    parts = row.get("parts")
    return parts if isinstance(parts, list) else []


def open_tool_calls(rows: Iterable[Any]) -> set[str]:
    """Ids of tool calls in ``rows`` that have no result in ``rows`` (a call id
    is scoped to its step: ``ledger.core.toolpairs``)."""
    return {c.id for c in pair(rows).open_calls()}


def orphan_tool_results(rows: Iterable[Any]) -> set[str]:
    """Ids of tool results in ``rows`` that answer no call before them in
    ``rows`` (their call is elsewhere, or already has a result)."""
    return {rid for _, rid in pair(rows).unmatched()}


def is_settled(rows: Iterable[Any]) -> bool:
    """No tool call without its result."""
    return not open_tool_calls(rows)


def is_internal(row: Mapping[str, Any]) -> bool:
    """Synthetic rows that hold no conversation: lead-ins, warnings, system
    rows, rows marked ``meta.internal``, empty records."""
    if row.get("kind", "message") != "message":
        return True
    if row.get("role") == "system":
        return True
    meta = row.get("meta")
    if isinstance(meta, Mapping) and meta.get("internal") is True:
        return True
    return not _parts(row)


def has_sealable_context(rows: Iterable[Any]) -> bool:
    """Whether a window holds conversation a rollover would seal."""
    return any(not is_internal(_d(r)) for r in rows)


def budget_warned(rows: Iterable[Any]) -> bool:
    """Whether a budget warning row is already in these (window) rows."""
    for row in rows:
        d = row if type(row) is dict else _d(row)  # a window's rows: dicts inline
        if d.get("kind") != "warning":
            continue
        meta = d.get("meta")
        if isinstance(meta, Mapping) and meta.get(WARNING_META_KEY):
            return True
    return False


def lead_in_for(window: int, template: str = LEAD_IN_TEXT) -> str:
    """The lead-in text of the window whose reset row has seq ``window``."""
    return template.replace("{window}", str(window))


def lead_in_message(text: str = LEAD_IN_TEXT, *, window: int | None = None) -> dict[str, Any]:
    """The lead-in as the provider sees it (the store writes the same role and
    text; ``meta`` is not provider-visible). With ``window``, ``{window}`` in
    ``text`` is filled in."""
    if window is not None:
        text = lead_in_for(window, text)
    return {"kind": "lead_in", "role": "system", "parts": [{"type": "text", "text": text}]}


def carried_rows(view: Iterable[Any], trigger: Iterable[Any]) -> list[dict[str, Any]]:
    """The window rows a rollover carries so that no tool pair is split.

    When ``trigger`` answers tool calls that sit in the window being sealed
    (a tool step settled by results whose call was stored earlier, parallel
    calls answered one at a time, an approval granted later), the step goes
    into the new window whole, ahead of the trigger: every row of the step
    (``ledger.core.toolpairs``: the adjacent assistant rows of one model
    output) and every window row holding one of its results -- closed over
    those rows' other results, whose steps come too. So the model's next
    request holds each call of the step with its result. Call ids are scoped
    to their step: an id reused by an older step pulls nothing of it along.
    Rows in between that belong to no carried step (user messages,
    assistant text) stay sealed in the old window, retrievable with
    ``session_history``; the carried rows keep their order. Each carried row
    is a copy without the store-assigned fields, marked ``meta.carried_from``
    (the seq it was copied from). Empty when nothing needs carrying.
    """
    rows = [dict(_d(r)) for r in view]
    trig = [_d(r) for r in trigger]
    n = len(rows)
    p = pair([*rows, *trig], step_break=n)
    todo = [p.calls[k].step for row, _, k in p.results
            if row >= n and k is not None and p.calls[k].row < n]
    by_step: dict[int, list[int]] = {}
    for c in p.calls:
        by_step.setdefault(c.step, []).append(c.result if c.result is not None else -1)
    results_in: dict[int, list[int]] = {}
    for row, _, k in p.results:
        if k is not None:
            results_in.setdefault(row, []).append(p.calls[k].step)
    keep: set[int] = set()
    done: set[int] = set()
    while todo:
        s = todo.pop()
        if s in done:
            continue
        done.add(s)
        keep.update(i for i in p.steps[s] if i < n)
        for r in by_step.get(s, ()):
            if 0 <= r < n and r not in keep:
                keep.add(r)
                todo.extend(results_in.get(r, ()))
    out = []
    for i in sorted(keep):
        kept = rows[i]
        copy = {k: v for k, v in kept.items() if k not in _CARRY_DROPPED}
        meta = dict(kept["meta"]) if isinstance(kept.get("meta"), Mapping) else {}
        if isinstance(kept.get("seq"), int):
            meta["carried_from"] = kept["seq"]
        copy["meta"] = meta
        out.append(copy)
    return out


_CARRY_DROPPED = frozenset({"seq", "id", "ts", "batch"})


def _fingerprint(rows: Sequence[Mapping[str, Any]]) -> bytes:
    return msgspec.json.encode(list(rows))




