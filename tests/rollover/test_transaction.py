"""The rollover transaction against an in-memory history: the prepared request,
admission, fault injection at every step, emergency-retry file baselines and
window adoption. Test ids start with the rule id of ``ledger.rollover.engine``."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import pytest

from ledger.admission import AdmissionRefused, Registration, SnapshotRevoked
from ledger.core.errors import CommitFailed, CommitUncertain, WindowChanged
from ledger.policy import ToolPolicy, ToolRule
from ledger.rollover.engine import (
    LEAD_IN_TEXT,
    Action,
    BudgetConfig,
    CleanupFailed,
    DeliveryFailed,
    FileSnapshot,
    PostCommitError,
    PreparedRollover,
    PreparedStateError,
    ProviderRequest,
    RolloverCancelled,
    RolloverOutcome,
    RolloverState,
    admit_rollover,
    commit_rollover,
    prepare_rollover,
    run_rollover,
    send_inputs,
    step,
)
from tests.helpers import msg
from tests.helpers.rollover import (
    CONFIG,
    NO_HISTORY,
    TOOLS,
    FakeHistory,
    Runtime,
    count,
    seeded_history,
    tool_call,
    tool_result,
)

USER_FIELDS = ("kind", "role", "parts", "meta", "id", "x_unknown")


def caller_view(row: dict[str, Any]) -> dict[str, Any]:
    """The caller-given fields of a stored row (what the store must keep)."""
    return {k: row[k] for k in USER_FIELDS if k in row}


def trigger() -> list[dict[str, Any]]:
    return [msg("next question", "user", meta={"src": "t"}, id="trig-1", x_unknown={"a": [1]})]


def rollover_batch(h: FakeHistory) -> list[dict[str, Any]]:
    for i, row in enumerate(h.stored):
        if row["kind"] == "reset" and row["reset"]["reason"] == "rollover":
            bid = row["batch"]["id"]
            return [r for r in h.stored[i:] if r["batch"]["id"] == bid]
    return []


# --- T1: the prepared request ------------------------------------------------------------


def test_T1_prepared_request_is_complete_and_counted() -> None:
    rt = Runtime(activated=["session_history", "bash"])
    h = seeded_history()
    rows = trigger()
    p = prepare_rollover(h, rows, rt.parts)
    assert p.request.system == "BASE+ctx"  # pinned middleware text
    assert p.request.memory == "MEM1"  # a fresh memory context
    assert [t["name"] for t in p.request.tools] == ["session_history", "bash"]  # advertised
    assert p.request.messages[0]["kind"] == "lead_in"
    # L1: the lead-in names the new window by the seq its reset row will get
    assert p.request.messages[0]["parts"][0]["text"] == LEAD_IN_TEXT.replace(
        "{window}", str(h.next_seq)
    )
    assert p.boundary == h.next_seq == 7 and "(window 7)" in p.lead_in_text
    assert all(a is b for a, b in zip(p.request.messages[1:], rows, strict=True))
    assert (p.count.tokens, p.count.exact) == count(p.request)
    assert p.window == h.window == 0 and p.status == "prepared"
    assert rt.events == ["hook", "memory", "build"]
    assert h.rollover_calls == []  # nothing appended by preparation


def test_L1_lead_in_quotes_no_old_rows() -> None:
    rt = Runtime()
    h = seeded_history()
    p = prepare_rollover(h, trigger(), rt.parts)
    text = p.request.messages[0]["parts"][0]["text"]
    for row in h.stored:
        for part in row["parts"]:
            assert part.get("text", "\0") not in text


# --- P3 / P7 -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setup", "rows"),
    [
        pytest.param([msg("x", "user"), tool_call("c1")], trigger(),
                     id="P3-open-call-in-window-refused"),
        pytest.param([msg("x", "user")], [tool_call("c9")], id="P3-trigger-open-call-refused"),
    ],
)
def test_pairs_are_never_split(setup: list[dict[str, Any]], rows: list[dict[str, Any]]) -> None:
    rt = Runtime()
    h = FakeHistory()
    h.append_many(setup)
    with pytest.raises(AdmissionRefused) as info:
        prepare_rollover(h, rows, rt.parts)
    assert info.value.reason == "unsettled"
    assert rt.loads == 0 and h.rollover_calls == []


PAD = "x" * 820  # the window above CONFIG's rollover threshold (800)


def parallel_calls(*ids: str) -> dict[str, Any]:
    return {"kind": "message", "role": "assistant", "parts": [
        {"type": "tool_call", "id": i, "name": "bash", "input": {}} for i in ids]}


@pytest.mark.parametrize(
    ("setup", "rows", "carried"),
    [
        pytest.param([msg(PAD, "user"), tool_call("c1")], [tool_result("c1")], ["c1"],
                     id="P3-result-of-a-stored-call-carries-the-call"),
        pytest.param([msg(PAD, "user"), parallel_calls("a", "b"), tool_result("b"),
                      msg("status?", "user")], [tool_result("a")], ["a+b", "b"],
                     id="P3-parallel-calls-answered-out-of-order-carry-the-step"),
        pytest.param([msg(PAD, "user"), tool_call("c1"), tool_result("c1")],
                     [tool_result("c1")], [],
                     id="P3-a-late-second-result-of-an-answered-call-carries-nothing"),
    ],
)
def test_P3_a_settling_trigger_carries_its_calls(
    setup: list[dict[str, Any]], rows: list[dict[str, Any]], carried: list[str]
) -> None:
    rt = Runtime()
    h = FakeHistory()
    h.append_many(setup)
    seqs = [r["seq"] for r in h.stored if any(p["type"].startswith("tool_") for p in r["parts"])]
    window, inputs = send_inputs(h, rows, request_for=lambda m: ProviderRequest(
        "m1", "BASE", (), tuple(m)), count=count, history_access=True)
    decision, _ = step(RolloverState(window), inputs, CONFIG)
    assert decision.action is Action.ROLLOVER and inputs.settled
    out = run_rollover(h, rows, rt.parts, rt.hooks(), send=rt.send)
    batch = rollover_batch(h)
    moved = batch[2:2 + len(carried)]
    assert ["+".join(p["id"] for p in r["parts"]) for r in moved] == carried
    assert [r["meta"]["carried_from"] for r in moved] == seqs[: len(carried)]
    assert "status?" not in str(batch)  # rows between stay in the old window
    assert out.prepared.trigger[len(carried):] == tuple(rows)
    assert rt.sent[0].messages[1:] == out.prepared.trigger  # the model gets the pair


def test_P3_a_reused_call_id_carries_only_its_own_step() -> None:
    """Providers that call every step's call ``call_0``: the result answers the
    newest open ``call_0``, and only that step is carried (the carried rows do
    not grow with every rollover)."""
    rt = Runtime()
    h = FakeHistory()
    h.append_many([msg(PAD, "user"), tool_call("call_0"), tool_result("call_0"),
                   msg("next", "user"), tool_call("call_0")])
    run_rollover(h, [tool_result("call_0")], rt.parts, rt.hooks(), send=rt.send)
    batch = rollover_batch(h)
    assert [r["meta"].get("carried_from") for r in batch[2:]] == [h.stored[4]["seq"], None]
    for _ in range(3):  # another step with the same id, settled by a rollover each time
        h.append_many([msg(PAD, "user"), tool_call("call_0")])
        run_rollover(h, [tool_result("call_0")], rt.parts, rt.hooks(), send=rt.send)
        assert len(rollover_batch(h)) == 4  # reset, lead-in, the call, its result


def test_P3_settled_pairs_stay_whole_in_old_window() -> None:
    rt = Runtime()
    h = FakeHistory()
    h.append_many([msg("x", "user"), tool_call("c1"), tool_result("c1")])
    cont = [msg("continue", "user", meta={"continuation": True})]
    out = run_rollover(h, cont, rt.parts, rt.hooks(), send=rt.send)
    old = [r for r in h.stored if r["seq"] < out.window]
    assert [p["type"] for r in old for p in r["parts"]] == ["text", "tool_call", "tool_result"]


def test_P7_one_batch_reset_lead_in_trigger() -> None:
    rt = Runtime()
    h = seeded_history()
    rows = [msg("a", "user"), msg("b", "user")]
    out = run_rollover(h, rows, rt.parts, rt.hooks(), send=rt.send)
    batch = rollover_batch(h)
    assert [r["kind"] for r in batch] == ["reset", "lead_in", "message", "message"]
    assert {r["batch"]["n"] for r in batch} == {4}
    assert len(h.rollover_calls) == 1 and h.rollover_calls[0]["expect_window"] == 0
    assert out.window == batch[0]["seq"] == h.window


# --- the fault-injection matrix ---------------------------------------------------------------


@dataclass
class Control:
    """Switches a fault flips during the transaction."""

    abort: bool = False
    cancel: bool = False
    prepared: PreparedRollover | None = None
    extra: list[str] = field(default_factory=list)


def _noop(rt: Runtime, h: FakeHistory, c: Control) -> None:
    return None


def _mutate_rows(rt: Runtime, h: FakeHistory, c: Control) -> None:
    assert c.prepared is not None
    c.prepared.trigger[0]["parts"][0]["text"] = "changed"


def _add_reset(h: FakeHistory) -> None:
    h._write([{"kind": "reset", "role": "system", "parts": [], "reset": {"reason": "manual"}}])


def _on_cleanup(name: str, action: Callable[[Runtime, FakeHistory, Control], None]) -> Any:
    def setup(rt: Runtime, h: FakeHistory, c: Control) -> None:
        original = rt._cleanup

        def wrapped(n: str) -> Callable[[], None]:
            run = original(n)

            def go() -> None:
                run()
                if n == name:
                    action(rt, h, c)

            return go

        rt._cleanup = wrapped  # type: ignore[method-assign]

    return setup


def _set(attr: str, value: Any) -> Callable[[Runtime, FakeHistory, Control], None]:
    def f(rt: Runtime, h: FakeHistory, c: Control) -> None:
        setattr(c, attr, value)

    return f


def _fail_part(name: str) -> Callable[[Runtime, FakeHistory, Control], None]:
    def setup(rt: Runtime, h: FakeHistory, c: Control) -> None:
        if name == "memory":
            def bad_memory() -> Any:
                raise OSError("injected: memory load failed")

            rt.parts.memory = bad_memory
        elif name == "build":
            def bad_build(parts: Any) -> Any:
                raise RuntimeError("injected: build failed")

            rt.parts.build = bad_build
        elif name == "count":
            def bad_count(request: Any) -> Any:
                raise RuntimeError("injected: count failed")

            rt.parts.count = bad_count

    return setup


ALL_CLEARED = ["cache", "carryover", "sandbox"]

# id, before-prepare setup, after-prepare setup, expected error, appended, sent, cleared
MATRIX: list[tuple[str, Any, Any, type[BaseException] | None, bool, bool, list[str]]] = [
    ("T11-abort-during-prepare", _set("abort", True), _noop, RolloverCancelled, False, False, []),
    ("T2-memory-load-fails", _fail_part("memory"), _noop, OSError, False, False, []),
    ("T2-build-fails", _fail_part("build"), _noop, RuntimeError, False, False, []),
    ("T2-count-fails", _fail_part("count"), _noop, RuntimeError, False, False, []),
    ("T2-admission-history-access-denied", lambda rt, h, c: setattr(rt, "policy", NO_HISTORY),
     _noop, AdmissionRefused, False, False, []),
    ("T2-admission-suppressed-by-compaction", _noop,
     lambda rt, h, c: setattr(rt, "precedence", "manual_compaction"),
     AdmissionRefused, False, False, []),
    ("T2-admission-window-changed", _noop, lambda rt, h, c: _add_reset(h), AdmissionRefused,
     False, False, []),
    ("T2-admission-plugin-disposed", _noop, lambda rt, h, c: rt.registry.dispose("notes-plugin"),
     SnapshotRevoked, False, False, []),
    ("T2-admission-rows-mutated", _noop, _mutate_rows, AdmissionRefused, False, False, []),
    ("T3-cancel-before-cleanup", _noop, _set("cancel", True), RolloverCancelled, False, False,
     []),
    ("T5-cleanup-cache-fails", lambda rt, h, c: setattr(rt, "fail_cleanup", "cache"), _noop,
     CleanupFailed, False, False, []),
    ("T5-cleanup-carryover-fails", lambda rt, h, c: setattr(rt, "fail_cleanup", "carryover"),
     _noop, CleanupFailed, False, False, ["cache"]),
    ("T5-cleanup-sandbox-fails", lambda rt, h, c: setattr(rt, "fail_cleanup", "sandbox"), _noop,
     CleanupFailed, False, False, ["cache", "carryover"]),
    ("T6-cancel-after-cleanup", _on_cleanup("sandbox", _set("cancel", True)), _noop,
     RolloverCancelled, False, False, ALL_CLEARED),
    ("T6-plugin-mutated-after-cleanup",
     _on_cleanup("sandbox", lambda rt, h, c: rt.registry.bump_epoch("notes-plugin")), _noop,
     SnapshotRevoked, False, False, ALL_CLEARED),
    ("T6-history-access-removed-after-cleanup",
     _on_cleanup("sandbox", lambda rt, h, c: setattr(rt, "policy", NO_HISTORY)), _noop,
     AdmissionRefused, False, False, ALL_CLEARED),
    ("T6-compaction-started-after-cleanup",
     _on_cleanup("cache", lambda rt, h, c: setattr(rt, "precedence", "idle_compaction")), _noop,
     AdmissionRefused, False, False, ALL_CLEARED),
    ("T8-append-fails", lambda rt, h, c: setattr(h, "fault", "fail"), _noop, CommitFailed,
     False, False, ALL_CLEARED),
    ("T8-append-uncertain-published", lambda rt, h, c: setattr(h, "fault", "uncertain"), _noop,
     CommitUncertain, True, False, ALL_CLEARED),
    ("T8-window-changed-at-append",
     lambda rt, h, c: setattr(h, "on_append", lambda: _add_reset(h)), _noop, WindowChanged,
     False, False, ALL_CLEARED),
    ("T9-promote-fails-after-commit", lambda rt, h, c: setattr(rt, "fail_post", "promote"), _noop,
     PostCommitError, True, False, ALL_CLEARED),
    ("T9-notify-fails-after-commit", lambda rt, h, c: setattr(rt, "fail_post", "notify"), _noop,
     PostCommitError, True, False, ALL_CLEARED),
    ("T11-cancel-after-append-discards", _noop, _noop, None, True, False, ALL_CLEARED),
    ("T11-abort-after-prepare-ignored", _on_cleanup("cache", _set("abort", True)), _noop, None,
     True, True, ALL_CLEARED),
    ("T7-no-fault-persists-prepared-rows", _noop, _noop, None, True, True, ALL_CLEARED),
]


@pytest.mark.parametrize(
    ("before", "after", "error", "appended", "sent", "cleared"),
    [pytest.param(*row[1:], id=row[0]) for row in MATRIX],
)
def test_fault_injection(
    before: Any, after: Any, error: type[BaseException] | None, appended: bool, sent: bool,
    cleared: list[str], request: pytest.FixtureRequest,
) -> None:
    rt = Runtime()
    h = seeded_history()
    c = Control()
    before(rt, h, c)
    hooks = rt.hooks()
    rows = trigger()
    original = msgspec.json.encode(rows)
    stored_before = h.rows()
    discard_after_append = request.node.callspec.id == "T11-cancel-after-append-discards"
    if discard_after_append:
        hooks.notify_window = lambda w: setattr(c, "cancel", True)

    outcome: RolloverOutcome | None = None
    raised: BaseException | None = None
    try:
        c.prepared = prepare_rollover(h, rows, rt.parts, abort=lambda: c.abort)
        after(rt, h, c)
        admit_rollover(c.prepared, h, rt.parts)
        outcome = commit_rollover(c.prepared, h, rt.parts, hooks, cancelled=lambda: c.cancel,
                                  send=rt.send)
    except BaseException as exc:
        raised = exc
    if error is None:
        assert raised is None, raised
    else:
        assert isinstance(raised, error), raised

    batch = rollover_batch(h)
    assert bool(batch) is appended
    assert (len(rt.sent) == 1) is sent
    assert rt.cleared == cleared  # cleared state is never restored
    if not cleared:
        assert not any(e.startswith("cleanup:") and e != f"cleanup:{rt.fail_cleanup}"
                       for e in rt.events)
    if appended:
        # the persisted rows are the prepared rows, by identity and by bytes
        call = h.rollover_calls[-1]
        assert c.prepared is not None
        assert all(a is b for a, b in zip(call["rows"], c.prepared.rows, strict=True))
        assert [caller_view(r) for r in batch[2:]] == [caller_view(r) for r in rows]
        assert msgspec.json.encode(
            [{k: r[k] for k in t} for r, t in zip(batch[2:], rows, strict=True)]
        ) == original
        assert batch[1]["parts"][0]["text"] == c.prepared.lead_in_text
        assert len(h.boundaries()) == 1
    else:
        extra = 1 if "window-changed" in request.node.callspec.id else 0
        assert len(h.stored) == len(stored_before) + extra
        assert h.stored[: len(stored_before)] == stored_before
        assert rt.promoted == [] and rt.windows == []
    if sent:
        assert outcome is not None and outcome.response == "response"
        assert rt.sent[0] is c.prepared.request  # type: ignore[union-attr]
        assert rt.builds == 1 and rt.hook_calls == 1  # no second assembly
        assert rt.releases == 0
    else:
        assert rt.releases == rt.loads  # whatever was prepared is released
    if discard_after_append:
        assert outcome is not None and outcome.discarded and rt.sent == []


def test_T4_order_of_effects() -> None:
    rt = Runtime()
    h = seeded_history()
    appended_at: list[int] = []
    h.on_append = lambda: appended_at.append(len(rt.events))
    run_rollover(h, trigger(), rt.parts, rt.hooks(), send=rt.send)
    events = rt.events
    events.insert(appended_at[0], "append")
    assert events == [
        "hook", "memory", "build",
        "cleanup:cache", "cleanup:carryover", "cleanup:sandbox",
        "append", "promote", "branch", "notify", "send",
    ]


def test_T9_promotes_the_candidate_memory_and_notifies_new_window() -> None:
    rt = Runtime()
    h = seeded_history()
    out = run_rollover(h, trigger(), rt.parts, rt.hooks(), send=rt.send)
    assert rt.promoted == ["MEM1"] and rt.windows == [out.window] == [h.window]


def test_T2_admission_too_large_releases() -> None:
    rt = Runtime()
    h = seeded_history()
    p = prepare_rollover(h, [msg("z" * 2000, "user")], rt.parts)
    with pytest.raises(AdmissionRefused) as info:
        admit_rollover(p, h, rt.parts)
    assert info.value.reason == "too_large" and not info.value.cleared
    assert rt.releases == 1 and p.status == "released" and h.rollover_calls == []


def test_T2_nothing_to_seal_refused() -> None:
    rt = Runtime()
    h = FakeHistory()
    h.append_many([msg("internal only", "system")])
    p = prepare_rollover(h, trigger(), rt.parts)
    with pytest.raises(AdmissionRefused) as info:
        admit_rollover(p, h, rt.parts)
    assert info.value.reason == "nothing_to_seal"


def test_A5_history_access_blocks_with_clear_reason_and_no_summary() -> None:
    rt = Runtime(policy=ToolPolicy([ToolRule.enable("bash")]))  # omits session_history
    h = seeded_history()
    before = h.rows()
    with pytest.raises(AdmissionRefused, match="session_history") as info:
        run_rollover(h, trigger(), rt.parts, rt.hooks(), send=rt.send)
    assert info.value.reason == "history_access"
    assert h.rows() == before  # no boundary, and no summary row either
    assert rt.cleared == [] and rt.sent == []


def test_M4_unrestricted_middleware_blocks_rollover_before_anything_is_prepared() -> None:
    rt = Runtime()

    def restores_tools(request: dict[str, Any], mount: Any) -> dict[str, Any]:
        return {**request, "tools": list(TOOLS.values())}

    rt.registry.register(Registration.unrestricted("restorer", "p2", restores_tools))
    h = seeded_history()
    with pytest.raises(AdmissionRefused) as info:
        run_rollover(h, trigger(), rt.parts, rt.hooks(), send=rt.send)
    assert info.value.reason == "uncertified_middleware"
    assert rt.loads == 0 and rt.cleared == [] and h.rollover_calls == []


def test_M1_lazy_hooks_reconciled_at_admission() -> None:
    rt = Runtime()
    rt.registry.register_lazy(
        lambda: [Registration.unrestricted("lazy", "p3", lambda r, m: None)], workspaces=["ws"]
    )
    with pytest.raises(AdmissionRefused):
        prepare_rollover(seeded_history(), trigger(), rt.parts)


def test_M3_other_workspace_unrestricted_hook_does_not_block() -> None:
    rt = Runtime()
    rt.registry.register(
        Registration.unrestricted("elsewhere", "p4", lambda r, m: None, workspaces=["other"])
    )
    out = run_rollover(seeded_history(), trigger(), rt.parts, rt.hooks(), send=rt.send)
    assert out.response == "response"


# --- T10 / M6 / M7: one assembly serves every attempt ---------------------------------------


def test_M6_primary_fallback_thinking_and_retry_share_the_snapshot() -> None:
    rt = Runtime()
    h = seeded_history()
    out = run_rollover(h, trigger(), rt.parts, rt.hooks(), send=rt.send)
    p = out.prepared
    # registry changes after admission do not reach this rollover's requests
    rt.registry.register(Registration.context_only("late", "p5", lambda s, m: s + "+late"))
    rt.registry.unregister("ctx")
    fb = p.fallback("m2")
    think = p.rebuild(lambda msgs: tuple(m for m in msgs if m["kind"] != "reasoning"))
    again = p.retry()
    for r in (fb, think, again):
        assert r.system == p.request.system == "BASE+ctx"
        assert r.tools == p.request.tools
    assert fb.model == "m2" and again is p.request
    assert rt.builds == 1 and rt.hook_calls == 1
    # the snapshot is never serialized into history or send options
    assert all("snapshot" not in repr(r) for r in h.stored)
    with pytest.raises(TypeError):
        pickle.dumps({"send_options": {"snapshot": p.snapshot}})
    # later admissions see the change
    p2 = prepare_rollover(h, [msg("again", "user")], rt.parts)
    assert p2.request.system == "BASE+late"


def test_M9_revocation_stays_live_for_fallback_and_retry() -> None:
    rt = Runtime()
    out = run_rollover(seeded_history(), trigger(), rt.parts, rt.hooks(), send=rt.send)
    rt.registry.dispose("notes-plugin")
    with pytest.raises(SnapshotRevoked):
        out.prepared.fallback("m2")
    with pytest.raises(SnapshotRevoked):
        out.prepared.retry()


def test_M6_in_process_retry_reuses_the_admitted_snapshot() -> None:
    rt = Runtime()
    h = seeded_history()
    first = prepare_rollover(h, trigger(), rt.parts)
    first.release()
    rt.registry.register(Registration.unrestricted("late", "p6", lambda r, m: None))
    # a retry that passes the admitted snapshot does not consult the registry again
    again = prepare_rollover(h, trigger(), rt.parts, snapshot=first.snapshot)
    assert again.snapshot is first.snapshot and again.request.system == "BASE+ctx"


def test_T10_start_is_one_shot_and_needs_commit() -> None:
    rt = Runtime()
    h = seeded_history()
    p = prepare_rollover(h, trigger(), rt.parts)
    with pytest.raises(PreparedStateError):
        p.start(rt.send)
    out = commit_rollover(p, h, rt.parts, rt.hooks())
    assert rt.sent == [] and not out.discarded
    p.start(rt.send)
    with pytest.raises(PreparedStateError):
        p.start(rt.send)
    assert len(rt.sent) == 1 and rt.builds == 1
    with pytest.raises(PreparedStateError):
        commit_rollover(p, h, rt.parts, rt.hooks())


# --- T12: window adoption --------------------------------------------------------------------


def test_T12_caller_adopts_window_and_other_sends_see_window_changed() -> None:
    rt = Runtime()
    h = seeded_history()
    mine = RolloverState(h.window)
    other = RolloverState(h.window)
    epoch_before = h.epoch
    out = run_rollover(h, trigger(), rt.parts, rt.hooks(), send=rt.send)
    assert h.epoch == epoch_before  # a rollover is an append: the epoch is no signal
    mine = mine.observe(out.window)
    assert mine.window == h.window != other.window
    h.append_many([msg("answer", "assistant")], expect_window=mine.window)
    with pytest.raises(WindowChanged):
        h.append_many([msg("stale send", "user")], expect_window=other.window)


# --- F1 / F2: emergency retry file baselines ------------------------------------------------


def test_F1_emergency_retry_restores_only_the_copied_baseline_after_commit() -> None:
    rt = Runtime()
    h = seeded_history()
    rt.tracker.baselines.update({"a.py": "v1", "b.py": "w1", "old.py": "o1"})
    snap = FileSnapshot.copy(rt.tracker, ["a.py", "missing.py"])
    assert snap.baselines == (("a.py", "v1"),)
    # the tracker moves on before the retry commits
    rt.tracker.baselines.update({"a.py": "v2", "b.py": "w2", "old.py": "o2"})
    rt.tracker.log.clear()
    order: list[str] = []
    h.on_append = lambda: order.append("append")
    original_restore = rt.tracker.restore

    def restore(path: str, baseline: str) -> None:
        order.append("restore")
        original_restore(path, baseline)

    rt.tracker.restore = restore  # type: ignore[method-assign]
    out = run_rollover(h, trigger(), rt.parts, rt.hooks(tracker=True), send=rt.send,
                       file_snapshot=snap)
    assert out.restored_files == ("a.py",)
    assert rt.tracker.baselines == {"a.py": "v1", "b.py": "w2", "old.py": "o2"}
    assert order == ["append", "restore"]
    assert rt.tracker.log == [("restore", "a.py")]  # no reread, no newer baseline adopted


def test_F1_no_restore_when_owner_changed() -> None:
    rt = Runtime()
    rt.tracker.baselines["a.py"] = "v1"
    snap = FileSnapshot.copy(rt.tracker, ["a.py"])
    rt.tracker.baselines["a.py"] = "v2"
    rt.tracker.owner = object()  # a newer turn owns the tracker now
    out = run_rollover(seeded_history(), trigger(), rt.parts, rt.hooks(tracker=True),
                       send=rt.send, file_snapshot=snap)
    assert out.restored_files == () and rt.tracker.baselines["a.py"] == "v2"


def test_F1_no_restore_when_the_batch_does_not_commit() -> None:
    rt = Runtime()
    h = seeded_history()
    h.fault = "fail"
    rt.tracker.baselines["a.py"] = "v1"
    snap = FileSnapshot.copy(rt.tracker, ["a.py"])
    rt.tracker.baselines["a.py"] = "v2"
    with pytest.raises(CommitFailed):
        run_rollover(h, trigger(), rt.parts, rt.hooks(tracker=True), send=rt.send,
                     file_snapshot=snap)
    assert rt.tracker.baselines["a.py"] == "v2"


def test_F2_plain_rollover_never_touches_the_tracker() -> None:
    rt = Runtime()
    rt.tracker.baselines["a.py"] = "v1"
    run_rollover(seeded_history(), trigger(), rt.parts, rt.hooks(tracker=True), send=rt.send)
    assert rt.tracker.log == [] and rt.tracker.baselines == {"a.py": "v1"}


def test_B5_prepared_request_over_ceiling_is_refused_before_any_request() -> None:
    rt = Runtime(config=BudgetConfig(context_limit=1000, warn_fraction=0.3,
                                     rollover_fraction=0.4, hard_ceiling=500))
    h = seeded_history()
    with pytest.raises(AdmissionRefused) as info:
        run_rollover(h, [msg("q" * 600, "user")], rt.parts, rt.hooks(), send=rt.send)
    assert info.value.reason == "too_large" and rt.sent == [] and rt.cleared == []


def test_T11_disposal_after_append_discards_delivery() -> None:
    rt = Runtime()
    h = seeded_history()
    hooks = rt.hooks()
    hooks.notify_window = lambda w: rt.registry.dispose("notes-plugin")
    out = run_rollover(h, trigger(), rt.parts, hooks, send=rt.send)
    assert out.discarded and "disposed" in (out.discard_reason or "")
    assert rt.sent == [] and out.window == h.window and rollover_batch(h)
    assert rt.releases == 1


def test_T12_failed_delivery_still_names_the_new_window() -> None:
    rt = Runtime()
    h = seeded_history()

    def overflow(request: Any) -> Any:
        raise RuntimeError("provider: context length exceeded")

    with pytest.raises(DeliveryFailed) as info:
        run_rollover(h, trigger(), rt.parts, rt.hooks(), send=overflow)
    assert info.value.window == h.window != 0
    assert isinstance(info.value.__cause__, RuntimeError)
    assert len(rollover_batch(h)) == 3
