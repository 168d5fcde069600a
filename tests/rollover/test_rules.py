"""Table-driven tests of the pure rollover rules: budget decisions, state,
per-step checks, the overflow backstop, admission snapshots and context notes.

Every test id starts with the rule id of ``ledger.rollover.engine``'s rule table;
``test_every_rule_has_a_test`` keeps the table and the tests in step.
"""

from __future__ import annotations

import copy
import itertools
import pickle
import re
from pathlib import Path
from typing import Any

import pytest

from ledger.admission import (
    AdmissionRefused,
    HookContractError,
    MiddlewareRegistry,
    NotSerializable,
    Registration,
    SnapshotRevoked,
    apply_live,
    capture,
)
from ledger.core.errors import BudgetExceeded, LedgerError
from ledger.notes import (
    NOTES_MAX_BYTES,
    NOTES_MAX_TOKENS,
    NOTES_PATH,
    MemoryEntry,
    NotesError,
    check_notes_write,
    render_notes,
    select_with_notes,
)
from ledger.rollover import engine as rollover
from ledger.rollover.engine import (
    LEAD_IN_TEXT,
    Action,
    BudgetConfig,
    BudgetConfigError,
    Count,
    OverflowAction,
    PinnedModel,
    ProviderRequest,
    RolloverState,
    SendInputs,
    StepBudgetExceeded,
    budget_warned,
    check_step,
    decide,
    has_sealable_context,
    is_settled,
    on_context_overflow,
    step,
    warning_row,
)
from tests.helpers import msg
from tests.helpers.rollover import CONFIG, count, text_tokens, tool_call, tool_result

# --- B/S/P/A: the send decision -------------------------------------------------------


def inputs(
    cur: int,
    *,
    fresh: int = 100,
    ctx: bool = True,
    settled: bool = True,
    access: bool = True,
    warned: bool = False,
    notes: bool = False,
    precedence: str | None = None,
    pending: bool = False,
    exact: bool = True,
) -> SendInputs:
    return SendInputs(
        current=Count(cur, exact),
        fresh=Count(fresh, exact),
        has_context=ctx,
        settled=settled,
        history_access=access,
        warned=warned,
        notes_writable=notes,
        precedence=precedence,
        pending=pending,
    )


MANUAL = BudgetConfig(
    context_limit=1000, warn_fraction=0.6, rollover_fraction=0.8, hard_ceiling=900,
    automatic=False,
)

# id, inputs, config, expected action, expected fields
DECISIONS: list[tuple[str, SendInputs, BudgetConfig, Action, dict[str, Any]]] = [
    ("B1-below-thresholds", inputs(100), CONFIG, Action.SEND, {"rule": "B1"}),
    ("B1-at-warn-threshold-is-below", inputs(600), CONFIG, Action.SEND, {"rule": "B1"}),
    ("B2-warn-above-threshold", inputs(700), CONFIG, Action.WARN, {"notes": None}),
    ("B2-warn-only-once-per-window", inputs(700, warned=True), CONFIG, Action.SEND, {}),
    ("B2-no-warning-at-unsettled-step", inputs(700, settled=False), CONFIG, Action.SEND, {}),
    ("B3-warning-offers-notes-when-writable", inputs(700, notes=True), CONFIG, Action.WARN,
     {"notes": rollover.NotesOffer(NOTES_PATH, 8192)}),
    ("B4-rollover-above-threshold", inputs(850), CONFIG, Action.ROLLOVER, {"rule": "B4"}),
    ("B4-rollover-on-estimate", inputs(850, exact=False), CONFIG, Action.ROLLOVER,
     {"exact": False}),
    ("S3-builder-preflight-over-ceiling-is-recoverable", inputs(950), CONFIG, Action.ROLLOVER,
     {"continuation": True}),
    ("B5-fresh-window-too-large", inputs(850, fresh=901), CONFIG, Action.REJECT,
     {"quarantine": True, "continuation": False}),
    ("B5-empty-window-too-large", inputs(950, ctx=False, access=False), CONFIG, Action.REJECT,
     {"quarantine": True}),
    ("B6-disabled-no-rollover", inputs(850), MANUAL, Action.SEND, {"rule": "B6"}),
    ("B6-disabled-no-warning", inputs(700, notes=True), MANUAL, Action.SEND, {"notes": None}),
    ("B6-disabled-preflight-still-blocks", inputs(901), MANUAL, Action.REJECT, {}),
    ("B7-disabled-settled-ceiling-stops-plainly", inputs(950, notes=True), MANUAL, Action.REJECT,
     {"rule": "B7", "quarantine": False, "continuation": False, "notes": None,
      "pending": False}),
    ("P1-pending-rollover-handled-on-next-send", inputs(300, pending=True), CONFIG,
     Action.ROLLOVER, {"rule": "P1"}),
    ("P2-unsettled-waits-pending", inputs(850, settled=False), CONFIG, Action.SEND,
     {"pending": True}),
    ("P2-unsettled-over-ceiling-rejects", inputs(950, settled=False), CONFIG, Action.REJECT,
     {"pending": True, "quarantine": False}),
    ("P4-precedence-suppresses-rollover", inputs(850, precedence="manual_compaction"), CONFIG,
     Action.SEND, {"suppressed_by": "manual_compaction"}),
    ("P4-precedence-suppresses-warning", inputs(700, precedence="idle_compaction"), CONFIG,
     Action.SEND, {"notes": None}),
    ("P4-precedence-suppresses-pending", inputs(300, pending=True, precedence="rlm"), CONFIG,
     Action.SEND, {"suppressed_by": "rlm"}),
    ("P4-precedence-preflight-still-blocks", inputs(950, precedence="continuous_compaction"),
     CONFIG, Action.REJECT, {}),
    ("A5-no-history-access-blocks-rollover", inputs(850, access=False), CONFIG, Action.SEND,
     {"rule": "A5"}),
    ("A5-no-history-access-over-ceiling-rejects", inputs(950, access=False), CONFIG,
     Action.REJECT, {"rule": "A5", "quarantine": False}),
    ("A6-empty-window-first-request-needs-no-access", inputs(850, ctx=False, access=False),
     CONFIG, Action.SEND, {"rule": "A6"}),
]


@pytest.mark.parametrize(
    ("given", "config", "action", "fields"),
    [pytest.param(i, c, a, f, id=rid) for rid, i, c, a, f in DECISIONS],
)
def test_decide(
    given: SendInputs, config: BudgetConfig, action: Action, fields: dict[str, Any]
) -> None:
    d = decide(given, config)
    assert d.action is action, d.reason
    for key, value in fields.items():
        assert getattr(d, key) == value, (key, d)
    assert d.tokens == given.current.tokens and d.ceiling == config.ceiling
    if action is Action.REJECT:
        assert not d.continuation and d.reason
    if d.rule == "A5":
        assert d.blocked is not None and "session_history" in d.blocked
        assert "summary" in d.blocked  # says that no summary replaces the rollover
    if not config.automatic:
        assert d.action in (Action.SEND, Action.REJECT) and d.notes is None


def test_B5_reason_says_fresh_window() -> None:
    d = decide(inputs(850, fresh=2000), CONFIG)
    assert "fresh window" in d.reason and "2000" in d.reason


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        pytest.param({"context_limit": 1000, "hard_ceiling": 1000}, "below the context limit",
                     id="B8-ceiling-must-be-below-limit"),
        pytest.param({"context_limit": 1000, "warn_fraction": 0.9, "rollover_fraction": 0.8},
                     "warn_fraction < rollover_fraction", id="B8-warn-below-rollover"),
        pytest.param({"context_limit": 1000, "rollover_fraction": 0.9, "hard_ceiling": 850},
                     "above the hard ceiling", id="B8-rollover-not-above-ceiling"),
        pytest.param({"context_limit": 0}, "positive", id="B8-limit-positive"),
    ],
)
def test_config_validation(kwargs: dict[str, Any], error: str) -> None:
    with pytest.raises(BudgetConfigError, match=error):
        BudgetConfig(**kwargs)


def test_B8_thresholds_derive_from_limit() -> None:
    c = BudgetConfig(context_limit=200_000)
    assert (c.warn_at, c.rollover_at, c.ceiling) == (140_000, 170_000, 190_000)
    assert c.ceiling < c.context_limit


# --- state: warnings, pending, restart ---------------------------------------------------


def test_B2_step_warns_once_per_window_then_again_in_next_window() -> None:
    s = RolloverState(0)
    d1, s = step(s, inputs(700), CONFIG)
    d2, s = step(s, inputs(700), CONFIG)
    assert (d1.action, d2.action) == (Action.WARN, Action.SEND)
    s = s.observe(42)
    d3, s = step(s, inputs(700), CONFIG)
    assert d3.action is Action.WARN


def test_B2_persisted_warning_counts_after_restart() -> None:
    d = decide(inputs(700, warned=True), CONFIG)
    assert d.action is Action.SEND
    row = warning_row(decide(inputs(700, notes=True), CONFIG))
    assert budget_warned([msg("x", "user"), row])
    assert not budget_warned([msg("x", "user")])
    assert NOTES_PATH in row["parts"][0]["text"] and row["meta"]["notes"]["max_bytes"] == 8192


def test_P1_at_most_one_pending_rollover() -> None:
    first = [msg("continue A", "user")]
    s = RolloverState(0).queue(first).queue([msg("continue B", "user")])
    assert s.pending and s.continuation == tuple(first)
    d, s = step(s, inputs(300), CONFIG)
    assert d.action is Action.ROLLOVER and d.rule == "P1"


def test_P2_unsettled_step_queues_then_next_send_rolls_over() -> None:
    s = RolloverState(0)
    d1, s = step(s, inputs(850, settled=False), CONFIG)
    assert d1.action is Action.SEND and s.pending
    d2, s = step(s, inputs(850), CONFIG)
    assert d2.action is Action.ROLLOVER


def test_P2_settledness_from_rows() -> None:
    assert is_settled([tool_call("c1"), tool_result("c1")])
    assert not is_settled([tool_call("c1"), tool_call("c2"), tool_result("c1")])


def test_P4_precedence_drops_pending() -> None:
    s = RolloverState(0).queue()
    d, s = step(s, inputs(300, precedence="manual_compaction"), CONFIG)
    assert d.action is Action.SEND and not s.pending and s.continuation is None


def test_P5_restart_is_paused() -> None:
    before = RolloverState(7, warned=True).queue([msg("go on", "user")])
    after = RolloverState.after_restart(7)
    assert before.pending and before.continuation
    assert not after.pending and after.continuation is None and not after.warned
    cont, _ = after.take_continuation()
    assert cont is None
    # the next message decides from persisted pressure alone
    d, _ = step(after, inputs(100), CONFIG)
    assert d.action is Action.SEND


@pytest.mark.parametrize(
    ("rows", "sealable"),
    [
        pytest.param([], False, id="A6-empty-window"),
        pytest.param([rollover.lead_in_message()], False, id="A6-lead-in-only-is-internal"),
        pytest.param([rollover.lead_in_message(), warning_row(decide(inputs(700), CONFIG))],
                     False, id="A6-lead-in-and-warning-are-internal"),
        pytest.param([msg("sys", "system")], False, id="A6-system-row-is-internal"),
        pytest.param([msg("x", "user", meta={"internal": True})], False,
                     id="A6-meta-internal"),
        pytest.param([msg("hello", "user")], True, id="A5-user-message-is-context"),
        pytest.param([tool_call("c"), tool_result("c")], True, id="A5-tool-pair-is-context"),
    ],
)
def test_sealable_context(rows: list[dict[str, Any]], sealable: bool) -> None:
    assert has_sealable_context(rows) is sealable


# --- S: provider steps and the backstop ------------------------------------------------


def req(text: str, tools: tuple[dict[str, Any], ...] = ()) -> ProviderRequest:
    return ProviderRequest("m1", "", tools, (msg(text, "user"),))


def test_S1_step_counts_newly_activated_schemas() -> None:
    pinned = PinnedModel.pin("m1", CONFIG)
    r = req("x" * 800)
    assert check_step(r, pinned, count).tokens == 802
    big = {"name": "search", "description": "d" * 150}
    with pytest.raises(StepBudgetExceeded) as info:
        check_step(r, pinned, count, activated_schemas=[big])
    assert info.value.ceiling == 900 and info.value.tokens > 900
    # a schema already advertised is not counted twice
    r2 = req("x" * 700, tools=(big,))
    assert check_step(r2, pinned, count, activated_schemas=[big]).tokens == count(r2)[0]


def test_S1_step_uses_pinned_limit_after_transforms() -> None:
    pinned = PinnedModel.pin("m1", CONFIG)
    later = BudgetConfig(context_limit=500, warn_fraction=0.5, rollover_fraction=0.6)
    r = req("x" * 600)
    assert later.ceiling < count(r)[0] < pinned.hard_ceiling
    check_step(r, pinned, count)  # the attempt's pinned ceiling (900), not the later config
    # a media transform that adds allowance is checked after it is applied
    media = ProviderRequest("m1", "", (), (*r.messages, {"role": "user", "parts": [
        {"type": "media", "mime": "image/png", "data": "AA=="}] * 3}))
    with pytest.raises(StepBudgetExceeded):
        check_step(media, pinned, count)


def test_S2_step_failure_blocks_without_emergency_rollover() -> None:
    from tests.helpers.rollover import FakeHistory

    h = FakeHistory()
    h.append_many([msg("go", "user"), tool_call("c1"), tool_call("c2")])
    h.append_many([tool_result("c1", "r" * 300)])
    h.append_many([tool_result("c2", "s" * 300)])
    before = h.rows()
    view = h.provider_view()
    request = ProviderRequest("m1", "", (), tuple(view))
    with pytest.raises(StepBudgetExceeded) as info:
        check_step(request, PinnedModel("m1", 1000, 500), count)
    assert info.value.emergency_rollover is False
    assert isinstance(info.value, BudgetExceeded) and isinstance(info.value, LedgerError)
    assert h.rows() == before and h.boundaries() == []


FLAGS = ("exact", "automatic", "history_access", "has_context", "settled", "retried")


@pytest.mark.parametrize(
    "values",
    [pytest.param(v, id="S4-" + "".join("1" if b else "0" for b in v))
     for v in itertools.product([False, True], repeat=len(FLAGS))],
)
def test_S4_overflow_maps_to_retry_or_reject(values: tuple[bool, ...]) -> None:
    kw = dict(zip(FLAGS, values, strict=True))
    verdict = on_context_overflow(**kw)
    assert verdict.action in (OverflowAction.RETRY, OverflowAction.REJECT)
    allowed = (kw["automatic"] and kw["history_access"] and kw["has_context"] and kw["settled"]
               and not kw["retried"])
    assert (verdict.action is OverflowAction.RETRY) is allowed
    assert verdict.reason and "overflow" in verdict.reason


def test_S4_precedence_mode_rejects_overflow_retry() -> None:
    v = on_context_overflow(exact=False, automatic=True, history_access=True, has_context=True,
                            settled=True, retried=False, precedence="rlm")
    assert v.action is OverflowAction.REJECT and "rlm" in v.reason


# --- M: admission snapshots ----------------------------------------------------------


def ctx_hook(tag: str, seen: list[Any] | None = None) -> Any:
    def hook(system: str, mount: Any) -> str:
        if seen is not None:
            seen.append(mount)
        return f"{system}|{tag}"

    return hook


def identity_request_hook(request: dict[str, Any], mount: Any) -> None:
    return None


def test_M1_capture_reconciles_lazy_hooks_first() -> None:
    reg = MiddlewareRegistry()
    calls = []

    def loader() -> list[Registration]:
        calls.append(1)
        return [Registration.context_only("lazy", "p", ctx_hook("lazy"))]

    reg.register_lazy(loader, workspaces=["ws"])
    assert reg.applicable("ws") == ()
    snap = capture(reg, "ws")
    assert [r.id for r in snap.registrations] == ["lazy"]
    capture(reg, "ws")
    assert calls == [1]  # reconciled once


def test_M1_lazy_unrestricted_hook_blocks_after_reconcile() -> None:
    reg = MiddlewareRegistry()
    reg.register_lazy(lambda: [Registration.unrestricted("u", "p", identity_request_hook)])
    with pytest.raises(AdmissionRefused) as info:
        capture(reg, "ws").certify()
    assert info.value.reason == "uncertified_middleware"


def test_M2_snapshot_is_ordered_and_immutable() -> None:
    reg = MiddlewareRegistry()
    reg.register(Registration.context_only("b", "p", ctx_hook("b"), order=2))
    reg.register(Registration.context_only("a", "p", ctx_hook("a"), order=1))
    reg.register(Registration.context_only("c", "p", ctx_hook("c"), order=1))
    snap = capture(reg, "ws")
    assert [r.id for r in snap.registrations] == ["a", "c", "b"]
    assert snap.system_text("S") == "S|a|c|b"
    with pytest.raises(AttributeError):
        snap._registrations = ()  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del snap._workspace
    assert isinstance(snap.registrations, tuple)


def test_M3_other_workspace_registrations_do_not_block() -> None:
    reg = MiddlewareRegistry()
    reg.register(Registration.unrestricted("u", "p", identity_request_hook, workspaces=["other"]))
    reg.register(Registration.context_only("c", "p", ctx_hook("c"), workspaces=["ws"]))
    snap = capture(reg, "ws")
    assert snap.certified and [r.id for r in snap.registrations] == ["c"]
    with pytest.raises(AdmissionRefused):
        capture(reg, "other").certify()


def test_M4_benign_unrestricted_middleware_blocks_even_with_full_grant() -> None:
    reg = MiddlewareRegistry()
    reg.register(Registration.unrestricted("benign", "p", identity_request_hook))
    snap = capture(reg, "ws")
    assert not snap.certified
    with pytest.raises(AdmissionRefused, match="benign") as info:
        snap.system_text("S")
    assert info.value.reason == "uncertified_middleware"


def test_M5_context_only_hook_gets_text_not_tools_and_must_return_text() -> None:
    reg = MiddlewareRegistry(mount=lambda plugin: f"mount:{plugin}")
    got: list[tuple[Any, ...]] = []

    def hook(*args: Any) -> str:
        got.append(args)
        return "out"

    reg.register(Registration.context_only("c", "p", hook))
    assert capture(reg, "ws").system_text("in") == "out"
    assert got == [("in", "mount:p")]
    reg2 = MiddlewareRegistry()
    reg2.register(Registration.context_only("bad", "p", lambda s, m: {"tools": []}))
    with pytest.raises(HookContractError, match="bad"):
        capture(reg2, "ws").system_text("in")


def test_M6_snapshot_is_never_serialized() -> None:
    reg = MiddlewareRegistry()
    reg.register(Registration.context_only("c", "p", ctx_hook("c")))
    snap = capture(reg, "ws")
    with pytest.raises(NotSerializable):
        pickle.dumps(snap)
    with pytest.raises(TypeError):
        pickle.dumps({"options": snap})
    assert copy.deepcopy({"s": snap})["s"] is snap


def test_M7_registry_changes_only_affect_later_admissions() -> None:
    reg = MiddlewareRegistry()
    reg.register(Registration.context_only("a", "p", ctx_hook("a")))
    snap = capture(reg, "ws")
    reg.register(Registration.unrestricted("u", "q", identity_request_hook))
    reg.unregister("a")
    assert snap.certified and snap.system_text("S") == "S|a"
    later = capture(reg, "ws")
    assert [r.id for r in later.registrations] == ["u"] and not later.certified


def test_M8_ordinary_requests_filter_through_live_registry() -> None:
    reg = MiddlewareRegistry()
    request = {"system": "S", "tools": [{"name": "bash"}, {"name": "session_history"}],
               "messages": []}
    assert apply_live(reg, "ws", request)["tools"] == request["tools"]

    def drop_history(r: dict[str, Any], mount: Any) -> dict[str, Any]:
        return {**r, "tools": [t for t in r["tools"] if t["name"] != "session_history"]}

    reg.register(Registration.unrestricted("filter", "p", drop_history))
    reg.register(Registration.context_only("c", "p", ctx_hook("c")))
    out = apply_live(reg, "ws", request)
    assert out["tools"] == [{"name": "bash"}] and out["system"] == "S|c"
    reg.unregister("filter")
    assert len(apply_live(reg, "ws", request)["tools"]) == 2


@pytest.mark.parametrize("revoke", ["dispose", "bump_epoch"])
def test_M9_disposal_and_mutation_epochs_stay_live(revoke: str) -> None:
    reg = MiddlewareRegistry()
    reg.register(Registration.context_only("c", "p", ctx_hook("c")))
    snap = capture(reg, "ws")
    snap.check_live()
    getattr(reg, revoke)("p")
    with pytest.raises(SnapshotRevoked) as info:
        snap.system_text("S")
    assert info.value.reason == "revoked"


def test_M9_hook_execution_reacquires_mounts() -> None:
    counter = itertools.count(1)
    reg = MiddlewareRegistry(mount=lambda plugin: next(counter))
    seen: list[Any] = []
    reg.register(Registration.context_only("c", "p", ctx_hook("c", seen)))
    snap = capture(reg, "ws")
    snap.system_text("S")
    snap.system_text("S")
    assert seen == [1, 2]


# --- N / B3: context notes -------------------------------------------------------------

ORDINARY = [MemoryEntry(f"mem/{i}.md", f"entry {i}") for i in range(8)]


@pytest.mark.parametrize(
    ("ordinary", "notes", "mode", "hot", "expected_len", "ninth"),
    [
        pytest.param(ORDINARY, "keep this", True, True, 9, True, id="N1-ninth-entry-after-eight"),
        pytest.param(ORDINARY[:3], "keep this", True, True, 4, True,
                     id="N1-appended-after-short-selection"),
        pytest.param([*ORDINARY[:7], MemoryEntry("./workspace/context-notes.md", "sel")],
                     "keep this", True, True, 8, False, id="N3-not-duplicated"),
        pytest.param(ORDINARY, "keep this", False, True, 8, False, id="N4-mode-inactive"),
        pytest.param(ORDINARY, "keep this", True, False, 8, False, id="N4-hot-set-required"),
        pytest.param(ORDINARY, None, True, True, 8, False, id="N1-no-notes-file"),
    ],
)
def test_notes_selection(
    ordinary: list[MemoryEntry], notes: str | None, mode: bool, hot: bool,
    expected_len: int, ninth: bool,
) -> None:
    out = select_with_notes(ordinary, notes, token_budget_mode=mode, hot_set_enabled=hot,
                            count_text=text_tokens)
    assert len(out) == expected_len
    assert out[: len(ordinary)] == tuple(ordinary)  # the ordinary selection is unchanged
    if ninth:
        assert out[-1].path == NOTES_PATH and out[-1].text == render_notes("keep this")


@pytest.mark.parametrize(
    ("text", "counter"),
    [
        pytest.param("é" * 6000, lambda s: 0, id="N2-byte-allowance-includes-formatting"),
        pytest.param("w" * 5000, text_tokens, id="N2-token-allowance-includes-formatting"),
        pytest.param("😀" * 3000, lambda s: len(s) // 4, id="N2-cut-on-code-points"),
    ],
)
def test_N2_notes_allowance(text: str, counter: Any) -> None:
    out = select_with_notes(ORDINARY, text, token_budget_mode=True, hot_set_enabled=True,
                            count_text=counter)
    excerpt = out[-1].text
    assert len(excerpt.encode("utf-8")) <= NOTES_MAX_BYTES
    assert counter(excerpt) <= NOTES_MAX_TOKENS
    assert excerpt.startswith(render_notes(""))
    assert excerpt.endswith("[context notes truncated]")
    body = excerpt[len(render_notes("")) : -len("\n[context notes truncated]")]
    assert text.startswith(body) and len(body) > 0
    # maximal: one more code point would not fit
    longer = render_notes(text[: len(body) + 1]) + "\n[context notes truncated]"
    assert (len(longer.encode("utf-8")) > NOTES_MAX_BYTES or counter(longer) > NOTES_MAX_TOKENS)


def test_N1_notes_more_than_eight_ordinary_refused() -> None:
    with pytest.raises(NotesError):
        select_with_notes([*ORDINARY, ORDINARY[0]], "x", token_budget_mode=True,
                          hot_set_enabled=True, count_text=text_tokens)


@pytest.mark.parametrize(
    ("content", "writable", "ok"),
    [
        pytest.param("a" * 8192, True, True, id="B3-notes-write-at-8-KiB"),
        pytest.param("a" * 8193, True, False, id="B3-notes-write-above-8-KiB"),
        pytest.param("é" * 4097, True, False, id="B3-notes-write-counts-utf8-bytes"),
        pytest.param("short", False, False, id="B3-notes-write-only-if-writable"),
    ],
)
def test_notes_write(content: str, writable: bool, ok: bool) -> None:
    if ok:
        assert check_notes_write(content, writable=writable) == content.encode()
    else:
        with pytest.raises(NotesError):
            check_notes_write(content, writable=writable)


# --- L1 and the rule table --------------------------------------------------------------


def test_L1_lead_in_offers_history_and_summarises_nothing() -> None:
    lead = rollover.lead_in_message()
    assert lead["kind"] == "lead_in" and lead["role"] == "system"
    assert "session_history" in LEAD_IN_TEXT and "new context window" in LEAD_IN_TEXT
    assert "not instructions" in LEAD_IN_TEXT


def test_every_rule_has_a_test() -> None:
    doc = rollover.__doc__ or ""
    table_ids = re.findall(r"^([A-Z]\d+)\s", doc, flags=re.M)
    assert tuple(table_ids) == rollover.RULE_IDS
    here = Path(__file__).resolve().parent  # tests/rollover: the engine's tests and the policy's
    text = "".join(
        p.read_text(encoding="utf-8")
        for p in [
            *(here / f"test_{name}.py" for name in
              ("property", "rules", "store", "transaction", "policy")),
            here.parent / "helpers" / "rollover.py",
        ]
    )
    missing = [
        rid for rid in rollover.RULE_IDS
        if not re.search(rf"[\"'_ ]{rid}[-_]", text)
    ]
    assert missing == [], f"rules without a test row: {missing}"
