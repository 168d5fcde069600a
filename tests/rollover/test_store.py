"""The rollover engine against the real ``ledger.transcript.store.Store`` on disk:
persisted rows are the prepared rows, pressure comes from disk after a
restart, partial prefixes (1 and 2 rows) never cause a second boundary, and a
concurrent window change is caught."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest

from ledger.admission import AdmissionRefused
from ledger.core.errors import WindowChanged
from ledger.core.format import files as ffmt
from ledger.core.format import rows as fmt
from ledger.core.rows import stored_row
from ledger.policy import advertised_schemas
from ledger.rollover.engine import (
    Action,
    PinnedModel,
    ProviderRequest,
    RolloverState,
    check_step,
    lead_in_message,
    run_rollover,
    send_inputs,
    step,
)
from ledger.transcript.history import History
from ledger.transcript.store import Store
from tests.helpers import msg
from tests.helpers.rollover import ALL, CONFIG, TOOLS, Runtime, count, tool_call, tool_result

WS = "ws-1"


def open_history(root: Path) -> History:
    return Store(root, durability="off").history(WS)


def request_for(messages: Sequence[Any]) -> ProviderRequest:
    return ProviderRequest(
        "m1", "BASE+ctx", advertised_schemas(TOOLS, ALL), tuple(messages), "MEM1"
    )


def seed(h: History, n: int = 3, size: int = 120) -> None:
    for i in range(n):
        h.append_many([msg(f"u{i}" + "x" * size, "user"), msg(f"a{i}" + "y" * size, "assistant")])


def rows_on_disk(h: History) -> list[dict[str, Any]]:
    return [r.to_dict() for r in h.rows()]


def caller_fields(row: dict[str, Any]) -> dict[str, Any]:
    return {k: row[k] for k in ("id", "kind", "role", "parts", "meta", "x_extra") if k in row}


def test_T7_real_store_persists_the_prepared_rows(tmp_path: Path) -> None:
    h = open_history(tmp_path)
    seed(h)
    rt = Runtime(workspace=WS)
    trigger = [msg("the question", "user", id="t-1", meta={"k": [1, 2]}, x_extra={"z": "é"})]
    original = msgspec.json.encode(trigger)
    out = run_rollover(h, trigger, rt.parts, rt.hooks(), send=rt.send)
    p = out.prepared
    assert out.window == h.window == 7
    batch = [r for r in rows_on_disk(h) if r["seq"] >= out.window]
    assert [r["kind"] for r in batch] == ["reset", "lead_in", "message"]
    assert len({r["batch"]["id"] for r in batch}) == 1 and batch[0]["reset"]["reason"] == "rollover"
    assert [caller_fields(r) for r in batch[2:]] == [caller_fields(r) for r in p.rows]
    # by bytes: each caller field, in the caller's key order, encodes identically, and
    # the stored line on disk holds those exact bytes
    assert msgspec.json.encode([{k: r[k] for k in t} for r, t in zip(batch[2:], trigger,
                                                                       strict=True)]) == original
    raw = {row.seq: row.line for row in h.rows(after_seq=out.window)}
    line = raw[batch[2]["seq"]]
    for key, value in trigger[0].items():
        assert b'"' + key.encode() + b'":' + msgspec.json.encode(value) in line
    # what the model now sees in the new window is exactly the started request's messages
    view = [r.to_dict() for r in h.provider_view()]
    started = rt.sent[0]
    assert started is p.request
    assert [(m["kind"], m["role"], m["parts"]) for m in view] == [
        (m["kind"], m["role"], m["parts"]) for m in started.messages
    ]
    assert count(request_for(view)) == (p.count.tokens, p.count.exact)
    assert view[0]["meta"]["window"] == out.window  # the store names the window


def test_B9_pressure_is_recomputed_from_disk_after_restart(tmp_path: Path) -> None:
    h = open_history(tmp_path)
    seed(h, n=3, size=120)
    trigger = [msg("q" * 60, "user")]
    _, before = send_inputs(h, trigger, request_for=request_for, count=count,
                            history_access=True)
    # restart: a new Store over the same directory, no in-memory state
    h2 = open_history(tmp_path)
    window, after = send_inputs(h2, trigger, request_for=request_for, count=count,
                                history_access=True)
    assert after == before and window == 0
    decision, _ = step(RolloverState.after_restart(window), after, CONFIG)
    assert decision.action is Action.ROLLOVER
    rt = Runtime(workspace=WS)
    out = run_rollover(h2, trigger, rt.parts, rt.hooks(), send=rt.send)
    h3 = open_history(tmp_path)
    window, fresh = send_inputs(h3, [msg("small", "user")], request_for=request_for,
                                count=count, history_access=True)
    assert window == out.window
    d, _ = step(RolloverState.after_restart(window), fresh, CONFIG)
    assert d.action is Action.SEND


def write_prefix(root: Path, h: History, keep: int, trigger: dict[str, Any]) -> int:
    """Append the first ``keep`` rows of a rollover batch as raw lines, the way
    a legacy or externally modified history could hold them."""
    seq = h.snapshot().next_seq
    reset = {"kind": "reset", "role": "system", "parts": [], "reset": {"reason": "rollover"}}
    lead = {**lead_in_message(), "meta": {"window": seq, "session_history": True}}
    rows = [reset, lead, trigger]
    lines = b"".join(
        fmt.encode_line(stored_row(rows[i], seq + i, "b_prefix", len(rows), i, 1))
        for i in range(keep)
    )
    segments = sorted(n for n in os.listdir(root / WS) if ffmt.segment_number(n) is not None)
    with open(root / WS / segments[-1], "ab") as f:
        f.write(lines)
    return seq


@pytest.mark.parametrize("keep", [1, 2], ids=["P6-boundary-only-prefix", "P6-boundary-lead-in"])
def test_P6_restart_with_partial_prefix_never_adds_a_second_boundary(
    tmp_path: Path, keep: int
) -> None:
    h = open_history(tmp_path)
    seed(h, n=4, size=120)
    # the runtime had queued a continuation for this rollover when it died
    queued = msg("continue the task", "user", id="queued-continuation")
    state = RolloverState(h.window).queue([queued])
    assert state.continuation
    boundary = write_prefix(tmp_path, h, keep, queued)

    h2 = open_history(tmp_path)  # restart
    state = RolloverState.after_restart(h2.window)
    assert state.window == boundary and state.continuation is None  # P5: stays paused
    view = [r.to_dict() for r in h2.provider_view()]
    assert [r["kind"] for r in view] == ([] if keep == 1 else ["lead_in"])

    # the next message derives pressure from disk and sees the fresh window
    nxt = [msg("next message", "user", id="next-1")]
    window, inputs = send_inputs(h2, nxt, request_for=request_for, count=count,
                                 history_access=False)
    assert window == boundary and not inputs.has_context
    decision, state = step(state, inputs, CONFIG)
    assert decision.action is Action.SEND, decision.reason
    check_step(request_for([*view, *nxt]), PinnedModel.pin("m1", CONFIG), count)
    h2.append_many(nxt, expect_window=state.window)
    h2.append_many([msg("answer", "assistant")], expect_window=state.window)

    rows = rows_on_disk(open_history(tmp_path))
    assert [r["seq"] for r in rows if r["kind"] == "reset"] == [boundary]
    assert all(r.get("id") != "queued-continuation" for r in rows)


def test_T12_concurrent_sender_sees_window_changed(tmp_path: Path) -> None:
    h = open_history(tmp_path)
    seed(h)
    other = open_history(tmp_path)  # another send, another handle
    other_state = RolloverState(other.window)
    rt = Runtime(workspace=WS)
    out = run_rollover(h, [msg("mine", "user")], rt.parts, rt.hooks(), send=rt.send)
    mine = RolloverState(0).observe(out.window)
    h.append_many([msg("reply", "assistant")], expect_window=mine.window)
    with pytest.raises(WindowChanged):
        other.append_many([msg("stale", "user")], expect_window=other_state.window)
    assert other.window == out.window


def test_T6_concurrent_clear_during_cleanup_is_caught_before_append(tmp_path: Path) -> None:
    h = open_history(tmp_path)
    seed(h)
    rt = Runtime(workspace=WS)
    hooks = rt.hooks()
    hooks.cleanup = [*hooks.cleanup, ("concurrent", lambda: open_history(tmp_path).clear_soft())]
    with pytest.raises(AdmissionRefused) as info:
        run_rollover(h, [msg("q", "user")], rt.parts, hooks, send=rt.send)
    assert info.value.reason == "window_changed" and info.value.cleared
    kinds = [r["kind"] for r in rows_on_disk(h)]
    assert kinds.count("reset") == 1 and "lead_in" not in kinds  # only the manual clear
    assert rt.sent == []


def test_S2_completed_sibling_results_stay_durable_on_disk(tmp_path: Path) -> None:
    h = open_history(tmp_path)
    h.append_many([msg("go", "user"), tool_call("c1"), tool_call("c2")])
    h.append_many([tool_result("c1", "r" * 400)])
    h.append_many([tool_result("c2", "s" * 400)])
    before = rows_on_disk(h)
    view = [r.to_dict() for r in h.provider_view()]
    with pytest.raises(Exception) as info:
        check_step(request_for(view), PinnedModel("m1", 1000, 700), count)
    assert getattr(info.value, "emergency_rollover", None) is False
    assert rows_on_disk(open_history(tmp_path)) == before


def test_B7_disabled_settled_ceiling_stops_and_keeps_sibling_results(tmp_path: Path) -> None:
    from dataclasses import replace

    manual = replace(CONFIG, automatic=False)
    h = open_history(tmp_path)
    h.append_many([msg("go", "user"), tool_call("c1"), tool_call("c2")])
    h.append_many([tool_result("c1", "r" * 400)])
    h.append_many([tool_result("c2", "s" * 400)])  # both siblings completed: settled
    before = rows_on_disk(h)
    cont = [msg("continue", "user")]
    _, inputs = send_inputs(h, cont, request_for=request_for, count=count,
                            history_access=True, notes_writable=True)
    assert inputs.settled and inputs.current.tokens > manual.ceiling
    decision, state = step(RolloverState(h.window), inputs, manual)
    assert decision.action is Action.REJECT and decision.rule == "B7"
    assert (decision.notes, decision.quarantine, decision.continuation) == (None, False, False)
    assert not state.pending and not state.warned
    assert rows_on_disk(open_history(tmp_path)) == before


def test_T1_real_token_counter_counts_the_prepared_request(tmp_path: Path) -> None:
    from ledger.rollover.guards import request_counter

    real_count = request_counter()
    h = open_history(tmp_path)
    seed(h)
    rt = Runtime(workspace=WS)
    rt.parts.model = "gpt-4o"
    rt.parts.count = real_count
    out = run_rollover(h, [msg("what did we decide about the cache?", "user")], rt.parts,
                       rt.hooks(), send=rt.send)
    p = out.prepared
    assert 0 < p.count.tokens < CONFIG.ceiling  # schemas get a byte allowance: an estimate
    # recounting the window as persisted gives the same number: the exact rows
    view = [r.to_dict() for r in open_history(tmp_path).provider_view()]
    again = ProviderRequest("gpt-4o", p.request.system, p.request.tools, tuple(view),
                            p.request.memory)
    assert real_count(again) == (p.count.tokens, p.count.exact)
