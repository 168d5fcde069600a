"""The prepared rollover request: its parts, its hooks, and how it is built
and checked before admission.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from ledger.admission import (
    AdmissionRefused,
    AdmissionSnapshot,
    MiddlewareRegistry,
    capture,
)
from ledger.core.toolpairs import split_check
from ledger.policy import ToolPolicy, advertised_schemas
from ledger.rollover.decide import FileSnapshot, FileTracker, ViewHistory
from ledger.rollover.rules import (
    LEAD_IN_TEXT,
    BudgetConfig,
    Count,
    Counter,
    PreparedStateError,
    ProviderRequest,
    RequestBuilder,
    RequestParts,
    RolloverCancelled,
    _count,
    _d,
    _fingerprint,
    assemble,
    carried_rows,
    has_sealable_context,
    lead_in_for,
    lead_in_message,
)

__all__ = [
    "MemoryContext",
    "PreparedRollover",
    "RolloverHistory",
    "RolloverHooks",
    "RolloverParts",
    "prepare_rollover",
]

# --- the prepared request -------------------------------------------------------------


@dataclass(frozen=True)
class MemoryContext:
    """A fresh memory context; ``release`` frees what loading it holds."""

    text: str
    release: Callable[[], None] | None = None


class RolloverHistory(ViewHistory, Protocol):
    """What the transaction needs from ``ledger.transcript.history.History``. The new
    window's id is ``next_seq`` at preparation (the reset row's seq), so the
    prepared lead-in names it and the commit passes ``expect_next_seq``."""

    def rollover(
        self,
        trigger_rows: Sequence[dict[str, Any]],
        lead_in: str | None = None,
        tool_available: bool = True,
        *,
        expect_window: int | None = None,
        expect_next_seq: int | None = None,
    ) -> Any: ...


@dataclass
class RolloverParts:
    """The runtime parts a rollover is prepared and admitted with."""

    workspace: str
    model: str
    system: str
    tools: Mapping[str, Mapping[str, Any]]
    policy: ToolPolicy | Callable[[], ToolPolicy]
    registry: MiddlewareRegistry
    memory: Callable[[], MemoryContext]
    count: Counter
    config: BudgetConfig
    build: RequestBuilder = assemble
    activated: Iterable[str] | None = None
    precedence: str | Callable[[], str | None] | None = None
    lead_in_text: str = LEAD_IN_TEXT

    def current_policy(self) -> ToolPolicy:
        return self.policy if isinstance(self.policy, ToolPolicy) else self.policy()

    def current_precedence(self) -> str | None:
        p = self.precedence
        return p() if callable(p) else p


@dataclass
class RolloverHooks:
    """Callbacks of the transaction. ``cleanup`` is context-scoped state only
    (cache, persisted carryover, sandbox), run in order before the append."""

    cleanup: Sequence[tuple[str, Callable[[], None]]] = ()
    promote_memory: Callable[[str], None] | None = None
    clear_branch_summaries: Callable[[], None] | None = None
    notify_window: Callable[[int], None] | None = None
    tracker: FileTracker | None = None


class PreparedRollover:
    """One complete candidate request and the rows it will persist.

    Built once by :func:`prepare_rollover`; its request is started at most
    once. Fallback, thinking rebuilds and retries reuse the assembled system
    text and toolset (no second assembly) after a live revocation check.
    """

    def __init__(
        self,
        *,
        workspace: str,
        window: int,
        trigger: tuple[dict[str, Any], ...],
        lead_in_text: str,
        request: ProviderRequest,
        count: Count,
        snapshot: AdmissionSnapshot,
        memory: MemoryContext,
        had_context: bool,
        file_snapshot: FileSnapshot | None,
        boundary: int,
    ) -> None:
        self.workspace = workspace
        self.window = window
        self.boundary = boundary
        self.trigger = trigger
        self.lead_in_text = lead_in_text
        self.request = request
        self.count = count
        self.snapshot = snapshot
        self.memory = memory
        self.had_context = had_context
        self.file_snapshot = file_snapshot
        self.fingerprint = _fingerprint(trigger)
        self.status = "prepared"  # -> released | committed -> started

    @property
    def rows(self) -> tuple[dict[str, Any], ...]:
        """The exact caller rows the batch appends after reset and lead-in."""
        return self.trigger

    def release(self) -> None:
        """Free what preparation holds. Idempotent; a committed rollover keeps
        its request deliverable until started."""
        if self.status in ("released", "started"):
            return
        self.status = "released"
        if self.memory.release is not None:
            self.memory.release()

    def _mark_committed(self) -> None:
        self.status = "committed"

    def start(self, send: Callable[[ProviderRequest], Any]) -> Any:
        """Start the prepared request (once, after commit)."""
        if self.status != "committed":
            raise PreparedStateError(
                f"workspace {self.workspace!r}: prepared rollover is {self.status}; only a "
                "committed rollover starts its request, and only once"
            )
        self.snapshot.check_live(cleared=True)
        self.status = "started"
        return send(self.request)

    def _reuse(self) -> None:
        if self.status not in ("committed", "started"):
            raise PreparedStateError(
                f"workspace {self.workspace!r}: prepared rollover is {self.status}"
            )
        self.snapshot.check_live(cleared=True)

    def fallback(self, model: str) -> ProviderRequest:
        """The fallback attempt: same system text, toolset and messages."""
        self._reuse()
        return replace(self.request, model=model)

    def rebuild(
        self,
        transform: Callable[[tuple[Mapping[str, Any], ...]], Sequence[Mapping[str, Any]]],
    ) -> ProviderRequest:
        """A thinking rebuild: messages transformed, system text and tools kept."""
        self._reuse()
        return replace(self.request, messages=tuple(transform(self.request.messages)))

    def retry(self) -> ProviderRequest:
        """An in-process automatic retry: the same request."""
        self._reuse()
        return self.request


def _check_pairs(view: Sequence[Mapping[str, Any]], trigger: Sequence[Mapping[str, Any]]) -> None:
    """Refuse a rollover that would split a pair (``ledger.core.toolpairs.split_check``):
    a call in the window that neither the window nor the trigger answers, a
    call in the trigger without its result there, or a result in the trigger
    whose call would stay sealed in the old window (``carried_rows`` moves
    such steps into the trigger). A result that answers no call in the view
    (its call is in an earlier window) splits nothing."""
    found = split_check(view, trigger)
    if found.open_view or found.open_trigger or found.split:
        raise AdmissionRefused(
            "unsettled",
            "rollover refused: it would split tool calls from their results "
            f"(open in window: {sorted(set(found.open_view))}, open in trigger: "
            f"{sorted(set(found.open_trigger))}, results without their call: "
            f"{sorted(set(found.split))}); wait for a settled tool step",
        )


def prepare_rollover(
    history: RolloverHistory,
    trigger_rows: Sequence[dict[str, Any]],
    parts: RolloverParts,
    *,
    abort: Callable[[], bool] | None = None,
    snapshot: AdmissionSnapshot | None = None,
    file_snapshot: FileSnapshot | None = None,
) -> PreparedRollover:
    """Build and count the complete candidate request (rule T1).

    Captures the admission snapshot (unless an in-process retry passes the one
    it already holds), runs its context-only hooks once to pin the system text,
    loads a fresh memory context, selects the advertised schemas, and builds
    the request over ``[lead-in, *carried, *trigger_rows]``, where
    ``carried`` is ``carried_rows(view, trigger_rows)``: the window's rows of
    the tool step the trigger settles (empty for an ordinary trigger). ``abort`` (the admission
    abort link) is honoured here and nowhere later. Nothing is cleared or
    appended; on failure whatever was loaded is released.
    """

    def check_abort() -> None:
        if abort is not None and abort():
            raise RolloverCancelled(
                "prepare",
                f"workspace {parts.workspace!r}: rollover aborted during preparation; nothing "
                "was cleared or appended",
                cleared=False,
            )

    window = history.window
    boundary = history.next_seq
    view = [_d(r) for r in history.provider_view()]
    # A trigger that settles a tool step whose calls sit in the window carries
    # those calls (and their other results) into the batch (rule P3).
    trigger = (*carried_rows(view, trigger_rows), *trigger_rows)
    _check_pairs(view, trigger)
    lead_text = lead_in_for(boundary, parts.lead_in_text)
    check_abort()
    snap = snapshot if snapshot is not None else capture(parts.registry, parts.workspace)
    if snap.workspace != parts.workspace:
        raise AdmissionRefused(
            "revoked",
            f"admission snapshot of workspace {snap.workspace!r} used for {parts.workspace!r}",
        )
    snap.certify()
    check_abort()
    memory: MemoryContext | None = None
    try:
        system = snap.system_text(parts.system)
        memory = parts.memory()
        check_abort()
        schemas = advertised_schemas(parts.tools, parts.current_policy(), parts.activated)
        messages = (lead_in_message(lead_text), *trigger)
        request = parts.build(RequestParts(parts.model, system, memory.text, schemas, messages))
        counted = _count(parts.count, request)
        check_abort()
    except BaseException:
        if memory is not None and memory.release is not None:
            memory.release()
        raise
    return PreparedRollover(
        workspace=parts.workspace,
        window=window,
        trigger=trigger,
        lead_in_text=lead_text,
        request=request,
        count=counted,
        snapshot=snap,
        memory=memory,
        had_context=has_sealable_context(view),
        file_snapshot=file_snapshot,
        boundary=boundary,
    )




