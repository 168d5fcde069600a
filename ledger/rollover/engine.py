"""Automatic token-budget rollover: budget decisions, the prepared request and
the rollover transaction.

This is the runtime half of the design record's "Decision" section
(``seed/000_cce4e270632b8476.txt``, ADR 0005). It is a policy engine an agent
runtime calls; it owns no storage and no tokenizer. Every part of the runtime
it depends on is an explicit input, so each rule is testable without an agent:

=========================  ===================================================
runtime part               input here
=========================  ===================================================
token counts               ``count(request) -> (tokens, exact)``
request builder            ``build(RequestParts) -> ProviderRequest``
middleware registrations   :class:`ledger.admission.MiddlewareRegistry`
tool-access policy         :class:`ledger.policy.ToolPolicy` (or a callable)
compaction modes           ``precedence`` (a mode name, or a callable)
memory context             ``memory() -> MemoryContext``
cancellation               ``abort()`` (preparation only), ``cancelled()``
context-scoped cleanup     ``RolloverHooks.cleanup`` (named callbacks)
post-commit callbacks      promote memory, clear branch summaries, notify
file tracker               :class:`FileTracker` + :class:`FileSnapshot`
storage                    :class:`RolloverHistory` (``ledger.transcript.history.History``)
=========================  ===================================================

Only :func:`commit_rollover` (and :func:`run_rollover`, which wraps prepare,
admit and commit) has effects, and only through those inputs. The runtime
object :class:`ledger.rollover.conversation.Conversation` composes these pieces
for an agent loop (one call per send).

Flow of one send
================
1. :func:`send_inputs` derives pressure from *persisted* history (so a restart
   recomputes it from disk) and :func:`step` turns it, with the in-memory
   :class:`RolloverState`, into a :class:`Decision`: send, warn, rollover or
   reject.
2. For a rollover: :func:`prepare_rollover` builds and counts the complete
   candidate request into one :class:`PreparedRollover`; :func:`admit_rollover`
   decides whether it may proceed; :func:`commit_rollover` clears
   context-scoped state, appends the prepared rows as one batch and starts that
   same request. The caller adopts ``RolloverOutcome.window``.
3. Every provider step is checked by :func:`check_step` against the attempt's
   :class:`PinnedModel`; a provider context-overflow error is mapped by
   :func:`on_context_overflow` to retry or reject.

Rule table
==========
Each sentence of the record's "Decision" section about rollover, admission,
preflight and notes maps to a rule id. Tests name the ids they cover: every
test id starts with its rule id, and ``tests/rollover/test_rules.py`` checks
that each id below is named by at least one test. Retrieval, cursor, receipt,
rejection-storage and counting sentences belong to other modules.

====  ==================================================  ========================================
id    record ("Decision")                                 rule here
====  ==================================================  ========================================
B1    (below every threshold)                             decide: send
B2    A once-per-window warning ...                       decide: warn above warn_at, once per
                                                          window (in-memory flag or a persisted
                                                          warning row), only at a settled step
B3    ... offers a settled tool step to write             Decision.notes only when writable;
      workspace/context-notes.md (up to 8 KiB, if         notes.check_notes_write caps 8 KiB
      writable)
B4    (automatic rollover on a token budget)              decide: rollover above rollover_at
B5    A payload estimated not to fit even in a fresh      decide: reject + quarantine the input;
      window is rejected before a provider request.       admission refuses too_large
B6    With automatic handling disabled, no rollover or    decide: automatic=False never warns or
      flush warning is emitted, but hard assembled-       rolls over; over the ceiling it rejects
      request preflight still blocks oversized requests.
B7    At a settled hard ceiling with automatic handling   reject with continuation=False,
      disabled, the turn stops without warning,           quarantine=False; history untouched
      rollover, continuation, or preflight quarantine;
      completed sibling tool results remain durable.
B8    (thresholds)                                        BudgetConfig: fractions of the limit,
                                                          hard ceiling below the limit
B9    ... the next message derives context pressure from  send_inputs reads
      persisted history.                                  history.provider_view()
S1    Each provider step is checked again after           check_step: transformed request +
      thinking/media transforms against the attempt's     activated schemas vs PinnedModel
      pinned model limit, including newly activated
      schemas.
S2    A per-step budget failure blocks without an         StepBudgetExceeded (emergency_rollover
      emergency rollover; completed tool results remain   False); history untouched
      durable.
S3    Builder preflight retains its existing recoverable  decide over rollover_at yields rollover,
      rollover path.                                      not a block
S4    ... provider context-overflow handling remains a    on_context_overflow: retry or reject,
      backstop.                                           never a drop
S5    With Tool Search, preflight counts only advertised  policy.advertised_schemas
      schemas while retaining the full tool map for
      execution.
P1    ... allows only one pending rollover to be handled  RolloverState.queue is idempotent; step
      on the next send.                                   handles it next send
P2    Rollover waits for a settled tool step ...          decide: unsettled -> send + pending
                                                          (reject if over)
P3    ... preserves tool call/result pairs ...            prepare/admit refuse split pairs
                                                          (unsettled); carried_rows moves a
                                                          settling step's calls into the batch
P4    Manual /compact, idle compaction, continuous        precedence suppresses rollover, warning
      compaction, and effective RLM retain their          and pending; admission refuses
      existing behavior and take precedence over          suppressed
      rollover.
P5    Restart stays paused: it does not resurrect a       RolloverState.after_restart: no pending,
      queued continuation ...                             no continuation
P6    Recovery tests must still cover partial prefixes    a boundary-only or boundary + lead-in
      ... without duplicating rollover or resurrecting    prefix is a fresh window: send, no new
      queued work.                                        boundary
P7    The reset, lead-in, and triggering message or       one history.rollover call with
      continuation are committed as one all-or-nothing    expect_window
      batch before continuation.
A1    ... an explicit tool name or matching wildcard      ToolRule: exact name or regex fullmatch
      must grant access ...
A2    ... and later matching rules can remove it.         agent rules, then caller rules; last
                                                          match wins
A3    The experiment does not widen narrow allowlists     no implicit grant of session_history
      ...
A4    ... built-in Exec and Plan grant access through     policy.PRESETS
      .*, and Explore inherits that grant.
A5    If effective policy omits or disables history       decide / admit_rollover: blocked, reason
      access, a rollover that would seal existing         history_access; no summary row
      context is blocked rather than falling back to
      lossy summaries.
A6    A fitting first request in an empty or internal-    decide: nothing to seal -> send,
      only window does not require history access.        whatever the policy
M1    ... request admission reconciles the workspace's    admission.capture reconciles first
      lazy plugin hooks ...
M2    ... and captures an immutable, ordered snapshot of  AdmissionSnapshot
      the applicable request-assembly registrations.
M3    Explicit workspace scopes are enforced during       Registration.workspaces
      dispatch, so registrations for other workspaces do
      not block admission.
M4    Unrestricted middleware is uncertified even when    refused uncertified_middleware, even
      it appears benign ... Such middleware blocks        when the policy grants all
      rollover; it is never overridden by restoring a
      denied tool.
M5    Only the context-only registration adapter          Registration.context_only; non-text
      certifies toolset preservation: it receives no      output is an error
      tool references and writes back system text alone.
M6    The rollover turn's primary and fallback requests   PreparedRollover.start / fallback /
      run the admitted snapshot; thinking rebuilds        rebuild / retry; the snapshot refuses
      retain that assembled context and toolset. ... In-  pickling and never enters rows
      process automatic retries retain the same
      snapshot; it is never serialized into history or
      send options.
M7    Registration/unregistration changes affect          a captured snapshot never changes; the
      subsequent admissions.                              next capture sees changes
M8    Ordinary non-rollover requests retain live          admission.apply_live
      middleware filtering.
M9    Plugin disposal and managed-plugin mutation epochs  AdmissionSnapshot.check_live on every
      remain live revocation checks, and hook execution   use; a mount per hook call
      reacquires sandbox mounts ...
T1    ... the existing builder prepares the complete      prepare_rollover, counted once
      candidate request: pinned system/middleware text,
      fresh memory context, actual advertised schemas,
      and the exact candidate rows.
T2    Admission failure releases prepared resources       admit_rollover releases; nothing cleared
      without sealing the current window or clearing its  or appended
      context-scoped state.
T3    Cancellation and admission are checked before       commit_rollover, before cleanup
      cleanup ...
T4    Only context-scoped cache, persisted carryover,     RolloverHooks.cleanup, nothing else
      and sandbox clearing runs before append.            before append
T5    ... cleanup failure must prevent a provider         CleanupFailed: no append, no request
      request.
T6    ... and again before append.                        commit_rollover, after cleanup
T7    Successful admission persists those rows ...        history.rollover(prepared rows,
                                                          expect_window); rows fingerprinted
T8    If cleanup succeeds but cancellation or append      old transcript stays; cleared state is
      failure prevents publication, the old transcript    not restored
      remains with that disposable state cleared ...
T9    Candidate memory context is promoted only after     promote, clear branch summaries, notify:
      the rollover append succeeds. ... Branch-summary    after append only
      clearing and epoch notification run after append
      ...
T10   ... and starts the same one-shot prepared request,  PreparedRollover.start once; builder and
      avoiding a second tool/system/hook assembly ...     hooks run once
T11   The admission abort link is limited to              abort only in prepare_rollover;
      preparation. Once the candidate is ready, explicit  cancelled decides discard/deliver
      cancellation/rollback guards decide whether to
      discard it or retain delivery ...
T12   When rollover invalidates other sends, its own      RolloverOutcome.window (History.window);
      caller must adopt the updated epoch before          other sends get WindowChanged
      continuing.
F1    An in-process emergency retry restores only the     FileSnapshot.restore_into after commit,
      copied file snapshot's original accepted tracking   owner checked
      baseline, after the rollover batch commits and its
      owner is still current.
F2    It does not reread snapshot content, adopt a newer  tracker read once at copy; plain
      tracker baseline, or restore unrelated old-window   rollovers never touch it
      files. ... Existing edited-file carryover is
      unchanged.
N1    ... existing notes can be appended after the        notes.select_with_notes: a ninth entry
      unchanged ordinary hot-memory selection, allowing
      up to nine entries without displacing the normal
      eight.
N2    This additional excerpt has its own 8 KiB /         notes.notes_excerpt
      2,000-token allowance, including formatting ...
N3    Notes already selected normally are not             no ninth entry when already selected
      duplicated.
N4    Memory and Memory Hot Set remain required; when     nothing added unless both are on
      token-budget mode is inactive, the file follows
      ordinary memory-selection rules.
L1    The lead-in identifies the new window and offers    LEAD_IN_TEXT (History's one template)
      session_history retrieval; it does not summarize    names the window id (next_seq); the
      old messages.                                       store adds meta.window
====  ==================================================  ========================================
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ledger.admission import AdmissionRefused, AdmissionSnapshot
from ledger.policy import HISTORY_TOOL
from ledger.rollover import decide as _decide
from ledger.rollover import prepare as _prepare
from ledger.rollover import rules as _rules
from ledger.rollover.decide import *  # noqa: F403 (the engine's face: its parts' names)
from ledger.rollover.decide import (
    FileSnapshot,
)
from ledger.rollover.prepare import *  # noqa: F403 (the engine's face: its parts' names)
from ledger.rollover.prepare import (
    PreparedRollover,
    RolloverHistory,
    RolloverHooks,
    RolloverParts,
    _check_pairs,
    prepare_rollover,
)
from ledger.rollover.rules import *  # noqa: F403 (the engine's face: its parts' names)
from ledger.rollover.rules import (
    CleanupFailed,
    DeliveryFailed,
    PostCommitError,
    PreparedStateError,
    ProviderRequest,
    RolloverCancelled,
    _d,
    _fingerprint,
)

# The engine's face: its own names and those of its parts.
__all__ = [
    "RULE_IDS",
    "RolloverOutcome",
    "admit_rollover",
    "commit_rollover",
    "run_rollover",
]
__all__ += _decide.__all__ + _prepare.__all__ + _rules.__all__

RULE_IDS: tuple[str, ...] = (
    "B1", "B2", "B3", "B4", "B5", "B6", "B7", "B8", "B9",
    "S1", "S2", "S3", "S4", "S5",
    "P1", "P2", "P3", "P4", "P5", "P6", "P7",
    "A1", "A2", "A3", "A4", "A5", "A6",
    "M1", "M2", "M3", "M4", "M5", "M6", "M7", "M8", "M9",
    "T1", "T2", "T3", "T4", "T5", "T6", "T7", "T8", "T9", "T10", "T11", "T12",
    "F1", "F2",
    "N1", "N2", "N3", "N4",
    "L1",
)  # fmt: skip

def admit_rollover(
    prepared: PreparedRollover,
    history: RolloverHistory,
    parts: RolloverParts,
    *,
    cleared: bool = False,
) -> None:
    """Decide whether the prepared rollover may proceed (rules T2, T6).

    On refusal the prepared resources are released and
    :class:`~ledger.admission.AdmissionRefused` is raised; nothing is sealed.
    ``cleared`` records whether cleanup had already run (it is not undone).
    """

    def refuse(reason: str, message: str) -> None:
        prepared.release()
        raise AdmissionRefused(
            reason, f"workspace {parts.workspace!r}: rollover refused: {message}", cleared=cleared
        )

    if prepared.status != "prepared":
        raise PreparedStateError(
            f"workspace {parts.workspace!r}: prepared rollover is {prepared.status}"
        )
    current = history.window
    if current != prepared.window:
        refuse(
            "window_changed",
            f"the window changed from {prepared.window} to {current} since preparation",
        )
    if history.next_seq != prepared.boundary:
        refuse(
            "window_changed",
            f"rows were appended since preparation (next seq {history.next_seq}, prepared "
            f"for {prepared.boundary}); the prepared lead-in names window {prepared.boundary}",
        )
    mode = parts.current_precedence()
    if mode is not None:
        refuse("suppressed", f"{mode} takes precedence over rollover")
    if not prepared.had_context:
        refuse("nothing_to_seal", "the window holds no conversation to seal")
    if not parts.current_policy().history_access:
        refuse(
            "history_access",
            f"the effective tool policy omits or disables `{HISTORY_TOOL}`; sealing this "
            "window would lose access to it, and no summary is substituted",
        )
    try:
        prepared.snapshot.certify()
        prepared.snapshot.check_live(cleared=cleared)
    except AdmissionRefused as exc:
        prepared.release()
        exc.cleared = cleared
        raise
    if _fingerprint(prepared.trigger) != prepared.fingerprint:
        refuse("rows_changed", "the prepared rows were modified after preparation")
    view = [_d(r) for r in history.provider_view()]
    try:
        _check_pairs(view, prepared.trigger)
    except AdmissionRefused as exc:
        refuse("unsettled", str(exc))
    if prepared.count.tokens > parts.config.ceiling:
        refuse(
            "too_large",
            f"the prepared request counts {prepared.count.tokens} tokens"
            f"{'' if prepared.count.exact else ' (estimate)'}, above the hard ceiling "
            f"{parts.config.ceiling} even in a fresh window",
        )


@dataclass(frozen=True)
class RolloverOutcome:
    """A committed rollover. ``window`` is the new window marker the caller
    adopts (``History.window``; a rollover is an append, so the epoch is no
    signal). ``discarded``: the cancel guard dropped the prepared request after
    commit. Otherwise the request was started with ``send`` (``response``), or,
    without ``send``, ``prepared.start`` is the caller's to call.
    """

    result: Any
    window: int
    prepared: PreparedRollover
    discarded: bool = False
    response: Any = None
    restored_files: tuple[str, ...] = field(default=())
    discard_reason: str | None = None


def commit_rollover(
    prepared: PreparedRollover,
    history: RolloverHistory,
    parts: RolloverParts,
    hooks: RolloverHooks,
    *,
    cancelled: Callable[[], bool] | None = None,
    send: Callable[[ProviderRequest], Any] | None = None,
) -> RolloverOutcome:
    """Clear context-scoped state, append the prepared rows, start the request.

    Order (fail closed): cancellation and admission; cleanup callbacks;
    cancellation and admission again; ONE ``history.rollover`` batch with
    ``expect_window``; then promote memory, clear branch summaries, notify the
    new window, restore an emergency retry's file baselines; then the
    ``cancelled`` guard decides between discarding and delivering the prepared
    request. A cleanup failure means no append and no request. After cleanup, a
    cancellation or append failure leaves the old transcript with the cleared
    state cleared: it is not restored, because a failed acknowledgment may still
    mean the batch was published.
    """
    is_cancelled = cancelled if cancelled is not None else (lambda: False)
    ws = parts.workspace
    if is_cancelled():
        prepared.release()
        raise RolloverCancelled(
            "before_cleanup",
            f"workspace {ws!r}: rollover cancelled before cleanup; nothing was cleared or appended",
            cleared=False,
        )
    admit_rollover(prepared, history, parts)
    done: list[str] = []
    for name, clear in hooks.cleanup:
        try:
            clear()
        except Exception as exc:
            prepared.release()
            raise CleanupFailed(
                name,
                tuple(done),
                f"workspace {ws!r}: context cleanup {name!r} failed ({exc}); nothing was "
                "appended and no provider request was made",
            ) from exc
        done.append(name)
    if is_cancelled():
        prepared.release()
        raise RolloverCancelled(
            "before_append",
            f"workspace {ws!r}: rollover cancelled after cleanup; the old window stays (its "
            "context-scoped state stays cleared)",
            cleared=True,
        )
    admit_rollover(prepared, history, parts, cleared=True)
    try:
        result = history.rollover(
            list(prepared.trigger),
            lead_in=prepared.lead_in_text,
            tool_available=True,
            expect_window=prepared.window,
            expect_next_seq=prepared.boundary,
        )
    except BaseException:
        prepared.release()
        raise
    prepared._mark_committed()
    window = int(result.window)
    restored: tuple[str, ...] = ()
    first_error: BaseException | None = None
    post: list[Callable[[], Any]] = []
    if hooks.promote_memory is not None:
        promote = hooks.promote_memory
        post.append(lambda: promote(prepared.memory.text))
    if hooks.clear_branch_summaries is not None:
        post.append(hooks.clear_branch_summaries)
    if hooks.notify_window is not None:
        notify = hooks.notify_window
        post.append(lambda: notify(window))
    for callback in post:
        try:
            callback()
        except Exception as exc:
            first_error = first_error or exc
    if prepared.file_snapshot is not None and hooks.tracker is not None:
        try:
            restored = prepared.file_snapshot.restore_into(hooks.tracker)
        except Exception as exc:
            first_error = first_error or exc
    if first_error is not None:
        prepared.release()
        raise PostCommitError(
            window,
            result,
            f"workspace {ws!r}: rollover committed (window {window}) but a post-commit step "
            f"failed ({first_error}); adopt the new window; the request was not started",
        ) from first_error
    # Past publication nothing is undone; interruption and disposal can only
    # keep the prepared request from being delivered.
    discard = "cancelled" if is_cancelled() else prepared.snapshot.revocation()
    if discard is not None:
        prepared.release()
        return RolloverOutcome(
            result, window, prepared, discarded=True, restored_files=restored,
            discard_reason=discard,
        )
    if send is None:
        return RolloverOutcome(result, window, prepared, restored_files=restored)
    try:
        response = prepared.start(send)
    except Exception as exc:
        raise DeliveryFailed(
            window,
            result,
            f"workspace {ws!r}: rollover committed (window {window}); its request failed: "
            f"{exc}; adopt the new window",
        ) from exc
    return RolloverOutcome(result, window, prepared, response=response, restored_files=restored)


def run_rollover(
    history: RolloverHistory,
    trigger_rows: Sequence[dict[str, Any]],
    parts: RolloverParts,
    hooks: RolloverHooks,
    *,
    send: Callable[[ProviderRequest], Any] | None = None,
    abort: Callable[[], bool] | None = None,
    cancelled: Callable[[], bool] | None = None,
    snapshot: AdmissionSnapshot | None = None,
    file_snapshot: FileSnapshot | None = None,
) -> RolloverOutcome:
    """Prepare, admit and commit one rollover (the whole transaction)."""
    prepared = prepare_rollover(
        history, trigger_rows, parts, abort=abort, snapshot=snapshot, file_snapshot=file_snapshot
    )
    admit_rollover(prepared, history, parts)
    return commit_rollover(prepared, history, parts, hooks, cancelled=cancelled, send=send)
