"""The Agents SDK under a token budget: ``LedgerSession(..., context_limit=N)``
with ``session.run_config()``, driven by real ``Runner.run`` calls, a scripted
model object and real files.

Every model input is counted here with the project's tokenizer
(``ledger.budget.check_request``: the input items as canonical rows, the
system instructions and the advertised tool schemas), independently of the
session's own accounting.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents", reason="the agents extra is not installed "
                    "(pip install 'transcript-ledger[agents]')")

from agents import Agent, Runner, function_tool
from agents_script import ScriptedModel, call, message
from core_helpers import PYTHON, subprocess_env

from ledger import LedgerError, Store
from ledger.adapters import openai_responses
from ledger.budget import check_request
from ledger.integrations.openai_agents import LedgerSession, session_history_tool

MODEL = "gpt-4o"


def _tokens(model: ScriptedModel, i: int) -> int:
    """The ``i``-th model input as the model received it, counted."""
    rows = openai_responses.from_input(model.inputs[i])
    return check_request(MODEL, rows=rows, system=model.instructions[i] or "",
                         tools=model.tools[i] or None).tokens


def _is_lead_in(item: dict[str, Any]) -> bool:
    return item.get("role") == "system" and "session_history" in json.dumps(item)


def _unpaired(items: list[dict[str, Any]]) -> tuple[set[str], set[str]]:
    """Call ids without a result, and result ids without a call, in one input."""
    calls = {i["call_id"] for i in items if i.get("type") == "function_call"}
    outputs = {i["call_id"] for i in items if i.get("type") == "function_call_output"}
    return calls - outputs, outputs - calls


def _check_clean(root: Path, workspace: str) -> dict[str, Any]:
    out = subprocess.run(
        [PYTHON, "-m", "ledger", "--root", str(root), "check", workspace, "--json"],
        capture_output=True, text=True, env=subprocess_env(), timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    assert report["ok"] and report["damage"] == 0 and report["notices"] == 0, report
    return report


def _log_part(part: int) -> str:
    return f"build log part {part}: " + " ".join(
        f"step-{part}-{k} compiled module m{part}x{k} in {k % 7 + 1} ms;" for k in range(20))


@function_tool
def read_log(part: int) -> str:
    """One part of the build log."""
    return _log_part(part)


def _agent(model: ScriptedModel, *tools: Any) -> Agent[Any]:
    return Agent(name="builder", instructions="Read what you are asked to read. Be brief.",
                 model=model, tools=list(tools))


def _session(tmp_path: Path, sid: str, limit: int) -> LedgerSession:
    return LedgerSession(sid, store=Store(tmp_path, durability="off"), context_limit=limit,
                         model=MODEL)


# --- a 25-step tool run under context_limit=3000 -------------------------------------------


def test_a_25_step_tool_run_stays_within_the_limit_and_rolls_over_while_it_runs(
        tmp_path: Path) -> None:
    session = _session(tmp_path, "build", 3000)
    steps = 25
    model = ScriptedModel(
        [[call("read_log", json.dumps({"part": i}), f"call_{i}")] for i in range(steps)]
        + [[message("The build log is clean.", "msg_done")]])
    agent = _agent(model, read_log, session_history_tool(session))
    result = asyncio.run(Runner.run(agent, "Read all 25 parts of the build log.",
                                    session=session, run_config=session.run_config(),
                                    max_turns=steps + 5))
    assert result.final_output == "The build log is clean."
    assert len(model.inputs) == steps + 1
    # Without rollover the last input would hold every part: several times the limit.
    parts = [{"role": "user", "parts": [{"type": "text", "text": _log_part(i)}]}
             for i in range(steps)]
    assert check_request(MODEL, rows=parts).tokens > 2 * 3000

    counts = [_tokens(model, i) for i in range(len(model.inputs))]
    assert max(counts) <= 3000, counts
    # It rolled over while the run was going on, more than once: inputs after the
    # first start with the lead-in of a fresh window.
    fresh = [i for i, inp in enumerate(model.inputs) if inp and _is_lead_in(inp[0])]
    assert fresh and fresh[0] > 0 and len(fresh) >= 2, fresh
    assert session.history.window >= 2
    for i in range(1, len(model.inputs)):
        items = model.inputs[i]
        # The model always gets the result it just asked for, with its call.
        last_output = [x for x in items if x.get("type") == "function_call_output"][-1]
        assert last_output["call_id"] == f"call_{i - 1}"
        assert last_output["output"] == _log_part(i - 1)
        assert _unpaired(items) == (set(), set()), i

    # What the model received is what the session stores: the last input is the
    # current window, which then got the final answer.
    stored = asyncio.run(session.get_items())
    assert stored[:-1] == model.inputs[-1]
    assert stored[-1]["id"] == "msg_done"
    # Every result was stored (once per call, plus copies a rollover carries).
    rows = list(session.history.rows())
    outputs = {r.meta["openai_agents"]["call_id"] for r in rows
               if r.meta.get("openai_agents", {}).get("type") == "function_call_output"}
    assert outputs == {f"call_{i}" for i in range(steps)}
    # The once-per-window warning: at most one per window, and the model saw one.
    warned: dict[int, int] = {}
    window = 0
    for r in rows:
        if r.kind == "lead_in":
            window += 1
        if r.kind == "warning":
            warned[window] = warned.get(window, 0) + 1
    assert warned and max(warned.values()) == 1, warned
    assert any("Context budget warning" in json.dumps(inp) for inp in model.inputs)
    _check_clean(tmp_path, "build")


def test_get_items_reads_without_writing(tmp_path: Path) -> None:
    session = _session(tmp_path, "reads", 3000)
    big = [{"role": "user", "content": _log_part(i)} for i in range(12)]
    asyncio.run(session.add_items(big))
    before = [r.to_dict() for r in session.history.rows()]
    epoch = session.history.epoch
    for _ in range(2):
        assert asyncio.run(session.get_items()) == big
    assert [r.to_dict() for r in session.history.rows()] == before
    assert session.history.epoch == epoch and session.history.window == 0


# --- hard preflight ------------------------------------------------------------------------


def test_an_input_that_cannot_fit_a_fresh_window_never_reaches_the_model(
        tmp_path: Path) -> None:
    session = _session(tmp_path, "huge", 8000)
    huge = " ".join(f"entry {i} of the pasted export;" for i in range(3500))
    assert check_request(MODEL, rows=[{"role": "user", "parts": [
        {"type": "text", "text": huge}]}]).tokens >= 20_000
    model = ScriptedModel([[message("Hello again.", "msg_after")]])
    agent = _agent(model, read_log)
    asyncio.run(session.add_items([{"role": "user", "content": "earlier question"}]))
    with pytest.raises(LedgerError, match="fresh"):
        asyncio.run(Runner.run(agent, huge, session=session, run_config=session.run_config()))
    assert model.inputs == []  # the model was never called
    # Quarantined: kept on disk as a rejected record, out of the session's view.
    assert asyncio.run(session.get_items()) == [{"role": "user", "content": "earlier question"}]
    rows = list(session.history.rows())
    holders = [r for r in rows if huge in json.dumps(r.to_dict())]
    assert len(holders) == 1
    (record,) = holders
    assert record.parts == [] and "quarantine" in record.meta
    assert huge not in json.dumps([r.to_dict() for r in session.history.provider_view()])
    # The conversation goes on; the model never sees the refused input.
    result = asyncio.run(Runner.run(agent, "Hello?", session=session,
                                    run_config=session.run_config()))
    assert result.final_output == "Hello again."
    assert huge not in json.dumps(model.inputs)
    assert [i.get("content") for i in model.inputs[0]] == ["earlier question", "Hello?"]
    _check_clean(tmp_path, "huge")


# --- an approval that waits while the user talks -----------------------------------------

DEPLOYS: list[str] = []


@function_tool(needs_approval=True)
def deploy(build: int, env: str) -> str:
    """Deploy a build to an environment (needs approval)."""
    DEPLOYS.append(f"{build}->{env}")
    return f"deployed build {build} to {env}: healthy"


def test_an_approved_tool_result_reaches_the_model_after_the_user_spoke_meanwhile(
        tmp_path: Path) -> None:
    DEPLOYS.clear()
    session = _session(tmp_path, "deploys", 3000)
    model = ScriptedModel([
        [call("deploy", '{"build": 42, "env": "prod"}', "call_deploy")],
        [message("Noted; the deploy still waits for your approval.", "msg_wait")],
        [message("Deploy done: build 42 is healthy in prod.", "msg_done")],
    ])
    agent = _agent(model, deploy, session_history_tool(session))
    config = session.run_config()
    first = asyncio.run(Runner.run(agent, "Deploy build 42 to prod.", session=session,
                                   run_config=config))
    (approval,) = first.interruptions
    assert DEPLOYS == []
    # The user talks while the approval waits: enough text that the window's budget
    # wants a rollover (above 85% of the limit) with the deploy call still open.
    note = " ".join(f"release note {i}: fixed issue {i * 7} in the scheduler;"
                    for i in range(170))
    asyncio.run(Runner.run(agent, note, session=session, run_config=config))
    assert DEPLOYS == []
    state = first.to_state()
    state.approve(approval)
    final = asyncio.run(Runner.run(agent, state, session=session, run_config=config))
    assert final.final_output == "Deploy done: build 42 is healthy in prod."
    assert DEPLOYS == ["42->prod"]

    for i in range(len(model.inputs)):
        assert _tokens(model, i) <= 3000
    last = model.inputs[-1]
    # The model learns that the deploy ran: its call and its result, together.
    outputs = [x for x in last if x.get("type") == "function_call_output"]
    assert [o["output"] for o in outputs] == ["deployed build 42 to prod: healthy"]
    assert any(x.get("type") == "function_call" and x["call_id"] == "call_deploy"
               for x in last)
    assert _unpaired(last) == (set(), set())
    # The request never carried the open call without its result.
    for inp in model.inputs:
        assert _unpaired(inp)[1] == set()
    # The session shows the result too, in the window the model was sent.
    stored = asyncio.run(session.get_items())
    assert stored[:-1] == last
    assert any(x.get("type") == "function_call_output" for x in stored)
    _check_clean(tmp_path, "deploys")


# --- run_compaction: a rollover that deletes nothing --------------------------------------


def test_run_compaction_rolls_over_and_deletes_nothing(tmp_path: Path) -> None:
    session = _session(tmp_path, "compact", 3000)
    items = [{"role": "user", "content": "the code word is heron"},
             {"role": "assistant", "type": "message", "id": "m1",
              "content": [{"type": "output_text", "text": "Noted.", "annotations": []}]}]
    asyncio.run(session.add_items(items))
    before = [r.to_dict() for r in session.history.rows()]
    asyncio.run(session.run_compaction({"response_id": "resp_1", "force": False}))
    assert session.history.window == 0  # within budget: nothing to do
    asyncio.run(session.run_compaction())
    assert session.history.window == 1
    after = [r.to_dict() for r in session.history.rows()]
    assert after[: len(before)] == before  # nothing deleted or rewritten
    view = asyncio.run(session.get_items())
    assert _is_lead_in(view[0]) and "heron" not in json.dumps(view)
    found = session.history.session_history().search("heron")
    assert [i["text"] for i in found["items"]] == ["the code word is heron"]


def test_the_sdk_calls_run_compaction_and_a_run_goes_on(tmp_path: Path) -> None:
    from agents.memory import is_openai_responses_compaction_aware_session

    session = _session(tmp_path, "auto", 3000)
    assert is_openai_responses_compaction_aware_session(session)
    model = ScriptedModel([[message("One.", "m1")], [message("Two.", "m2")]],
                          response_id=True)
    agent = _agent(model)
    for text in ("first", "second"):
        asyncio.run(Runner.run(agent, text, session=session, run_config=session.run_config()))
    assert session.history.window == 0  # automatic, unforced calls roll over only by budget
    assert [i.get("content") for i in model.inputs[1][:1]] == ["first"]


def test_rollover_tokens_is_refused_with_a_message_naming_context_limit(
        tmp_path: Path) -> None:
    with pytest.raises(LedgerError, match="context_limit"):
        LedgerSession("old", store=Store(tmp_path), rollover_tokens=1500)  # type: ignore[call-arg]
