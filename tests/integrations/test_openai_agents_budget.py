"""The Agents SDK under a token budget: ``LedgerSession(..., context_limit=N)``
with ``session.run_config()``, driven by real ``Runner.run`` calls, a scripted
model object and real files.

Every model input is counted here with the project's tokenizer
(``ledger.rollover.guards.check_request``: the input items as canonical rows, the
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

from ledger import LedgerError, Store
from ledger.adapters import openai_responses
from ledger.integrations.openai_agents import LedgerSession, session_history_tool
from ledger.rollover.guards import check_request
from tests.helpers import PYTHON, subprocess_env
from tests.helpers.agents_script import ScriptedModel, StreamingModel, call, message

MODEL = "gpt-4o"
SCRIPT = str(Path(__file__).resolve().parents[1] / "helpers" / "agents_script.py")


def _tokens(model: ScriptedModel, i: int) -> int:
    """The ``i``-th model input as the model received it, counted."""
    rows = openai_responses.from_input(model.inputs[i])
    return check_request(MODEL, rows=rows, system=model.instructions[i] or "",
                         tools=model.tools[i] or None).tokens


def _is_lead_in(item: dict[str, Any]) -> bool:
    return item.get("role") == "system" and "session_history" in json.dumps(item)


def _unpaired(items: list[dict[str, Any]]) -> tuple[set[str], set[str]]:
    """Call ids without a result, and result ids without a call, in one input
    (each call and each result at most once)."""
    calls = [i["call_id"] for i in items if i.get("type") == "function_call"]
    outputs = [i["call_id"] for i in items if i.get("type") == "function_call_output"]
    assert len(set(calls)) == len(calls) and len(set(outputs)) == len(outputs), items
    return set(calls) - set(outputs), set(outputs) - set(calls)


def _check_clean(root: Path, workspace: str, notices: tuple[str, ...] = ()) -> dict[str, Any]:
    out = subprocess.run(
        [PYTHON, "-m", "ledger", "--root", str(root), "check", workspace, "--json"],
        capture_output=True, text=True, env=subprocess_env(), timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    assert report["ok"] and report["damage"] == 0, report
    assert [f["code"] for f in report["findings"]] == list(notices), report
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
    # It rolled over while the run was going on, more than once: from some input on,
    # each starts with the lead-in of its window, which names the window.
    lead_ins = [json.dumps(inp[0]) for inp in model.inputs if _is_lead_in(inp[0])]
    assert not _is_lead_in(model.inputs[0][0])
    windows = list(dict.fromkeys(lead_ins))
    assert len(windows) >= 3, windows
    assert [r.kind for r in session.history.rows()].count("lead_in") == len(windows)
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


@function_tool
def export_table() -> str:
    """Export the whole table."""
    return " ".join(f"row {i} of the exported table;" for i in range(3500))


def test_a_tool_output_that_cannot_fit_is_refused_and_its_call_settled(tmp_path: Path) -> None:
    session = _session(tmp_path, "export", 8000)
    model = ScriptedModel([[call("export_table", "{}", "call_x")],
                           [message("The export was too large.", "msg_x")]])
    agent = _agent(model, export_table, session_history_tool(session))
    with pytest.raises(LedgerError, match="fresh"):
        asyncio.run(Runner.run(agent, "Export the table.", session=session,
                               run_config=session.run_config()))
    assert len(model.inputs) == 1  # the call was made; the output never reached the model
    rows = list(session.history.rows())
    assert sum("row 7 of the exported table" in json.dumps(r.to_dict()) for r in rows) == 1
    # The call is answered by an error result, so the step is settled: the next run
    # shows the model what happened, and nothing blocks a later rollover.
    result = asyncio.run(Runner.run(agent, "What happened?", session=session,
                                    run_config=session.run_config()))
    assert result.final_output == "The export was too large."
    sent = model.inputs[1]
    assert _unpaired(sent) == (set(), set())
    (output,) = [i for i in sent if i.get("type") == "function_call_output"]
    assert output["call_id"] == "call_x" and "refused and quarantined" in output["output"]
    assert "row 7 of the exported table" not in json.dumps(sent)
    _check_clean(tmp_path, "export")


# --- an approval that waits while the user talks -----------------------------------------

DEPLOYS: list[str] = []


@function_tool(needs_approval=True)
def deploy(build: int, env: str) -> str:
    """Deploy a build to an environment (needs approval)."""
    DEPLOYS.append(f"{build}->{env}")
    return f"deployed build {build} to {env}: healthy"


def test_the_user_moving_on_settles_a_waiting_approval_and_nothing_wedges(
        tmp_path: Path) -> None:
    DEPLOYS.clear()
    limit = 4000  # warn above 2,800 tokens, roll over above 3,400, never send above 3,800
    session = _session(tmp_path, "deploys", limit)
    model = ScriptedModel([
        [message("Summary: the scheduler is stable.", "msg_summary")],
        [call("deploy", '{"build": 42, "env": "prod"}', "call_deploy")],
        [message("Noted; the deploy was not run.", "msg_wait")],
        [message("Deploy done: build 42 is healthy in prod.", "msg_done")],
    ])
    agent = _agent(model, deploy, session_history_tool(session))
    config = session.run_config()
    notes = " ".join(f"ops note {i}: queue q{i} drained after {i % 9 + 2} minutes;"
                     for i in range(150))
    asyncio.run(Runner.run(agent, f"Summarise these notes: {notes}", session=session,
                           run_config=config))
    first = asyncio.run(Runner.run(agent, "Deploy build 42 to prod.", session=session,
                                   run_config=config))
    (approval,) = first.interruptions
    assert session.open_calls() == ["call_deploy"]
    # The user goes on while the approval waits, and the window is past the rollover
    # threshold: the message settles the call (an error output in its batch), so the
    # rollover goes ahead instead of waiting for a step that may never settle.
    release = " ".join(f"release note {i}: fixed issue {i * 7} in the scheduler;"
                       for i in range(75))
    asyncio.run(Runner.run(agent, release, session=session, run_config=config))
    assert session.open_calls() == [] and session.history.window > 0
    settled = [r for r in session.history.rows()
               if r.meta.get("openai_agents", {}).get("type") == "function_call_output"]
    assert [r.meta["openai_agents"]["call_id"] for r in settled] == ["call_deploy"]
    assert "before the user went on" in settled[0].meta["openai_agents"]["output"]
    user_row = next(r for r in session.history.rows() if release in json.dumps(r.to_dict()))
    assert settled[0].batch["id"] == user_row.batch["id"]  # one batch with the message
    assert _is_lead_in(model.inputs[2][0]) and "release note 3:" in json.dumps(model.inputs[2])
    assert DEPLOYS == []
    # The approval comes after all: the deploy runs, its output is stored and the
    # model gets it as text (its call was settled), never as a second output.
    state = first.to_state()
    state.approve(approval)
    final = asyncio.run(Runner.run(agent, state, session=session, run_config=config))
    assert final.final_output == "Deploy done: build 42 is healthy in prod."
    assert DEPLOYS == ["42->prod"]
    counts = [_tokens(model, i) for i in range(len(model.inputs))]
    assert max(counts) <= 0.95 * limit, counts
    assert "deployed build 42 to prod: healthy" in json.dumps(model.inputs[-1])
    for inp in model.inputs:  # no input ever held a call without its output, or the reverse
        assert _unpaired(inp) == (set(), set())
    # The late output sits in a later window than its call: a notice, nothing lost.
    _check_clean(tmp_path, "deploys", ("tool_pair_split",))


def read_log_part_text(part: int) -> str:
    return f"deploy log part {part}: all green; " + " ".join(
        f"check {i} passed in {i % 5 + 1} ms;" for i in range(110))


@function_tool
def read_log_part(part: int) -> str:
    """One part of the deploy log."""
    return read_log_part_text(part)


def test_an_approval_with_a_parallel_call_carries_the_whole_step(tmp_path: Path) -> None:
    """deploy (needs approval) and read_log in one step: read_log runs, deploy
    waits; after the approval the settling step rolls over and carries both
    calls with both outputs (issue 29, case 2)."""
    DEPLOYS.clear()
    limit = 4000
    session = _session(tmp_path, "parallel", limit)
    model = ScriptedModel([
        [message("Summary: the scheduler is stable.", "msg_summary")],
        [call("deploy", '{"build": 7, "env": "prod"}', "call_deploy"),
         call("read_log_part", '{"part": 3}', "call_log")],
        [message("Deployed, and the log is green.", "msg_done")],
    ])
    agent = _agent(model, deploy, read_log_part, session_history_tool(session))
    config = session.run_config()
    notes = " ".join(f"ops note {i}: queue q{i} drained after {i % 9 + 2} minutes;"
                     for i in range(170))
    asyncio.run(Runner.run(agent, f"Summarise these notes: {notes}", session=session,
                           run_config=config))
    first = asyncio.run(Runner.run(agent, "Deploy build 7 and read log part 3.",
                                   session=session, run_config=config))
    (approval,) = first.interruptions
    assert session.history.window == 0
    state = first.to_state()
    state.approve(approval)
    final = asyncio.run(Runner.run(agent, state, session=session, run_config=config))
    assert final.final_output == "Deployed, and the log is green."
    assert session.history.window > 0  # the settling step rolled over
    last = model.inputs[-1]
    assert _is_lead_in(last[0]) and "ops note 7:" not in json.dumps(last)
    calls = {x["call_id"] for x in last if x.get("type") == "function_call"}
    outputs = {x["call_id"]: x["output"] for x in last if x.get("type") == "function_call_output"}
    assert calls == {"call_deploy", "call_log"}
    assert outputs == {"call_deploy": "deployed build 7 to prod: healthy",
                       "call_log": read_log_part_text(3)}
    for inp in model.inputs:
        assert _unpaired(inp) == (set(), set())
    _check_clean(tmp_path, "parallel")


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
    assert session.history.window != 0
    assert [r.kind for r in session.history.rows()].count("lead_in") == 1
    after = [r.to_dict() for r in session.history.rows()]
    assert after[: len(before)] == before  # nothing deleted or rewritten
    view = asyncio.run(session.get_items())
    assert _is_lead_in(view[0]) and "heron" not in json.dumps(view)
    found = session.history.session_history().search("heron")
    assert [i["text"] for i in found["items"]] == ["the code word is heron"]


def test_the_sdk_calls_run_compaction_after_a_turn_and_the_budget_decides(
        tmp_path: Path) -> None:
    from agents.memory import is_openai_responses_compaction_aware_session

    session = _session(tmp_path, "auto", 3000)
    assert is_openai_responses_compaction_aware_session(session)
    facts = " ".join(f"fact {i}: the value of k{i} is {i * 3};" for i in range(130))
    answer = " ".join(f"k{i} is {i * 3}." for i in range(130))
    model = ScriptedModel([[message("One.", "m1")], [message(answer, "m2")],
                           [message("Three.", "m3")]], response_id=True)
    agent = _agent(model, session_history_tool(session))
    config = session.run_config()
    asyncio.run(Runner.run(agent, "first", session=session, run_config=config))
    assert session.history.window == 0  # within budget: the SDK's call changed nothing
    asyncio.run(Runner.run(agent, facts, session=session, run_config=config))
    assert _tokens(model, 1) < 0.85 * 3000  # the send itself did not need a rollover
    # The long answer took the window past the threshold. The SDK called
    # run_compaction after the turn (its model gave response ids): the window
    # rolled over at this settled point, before the next message; nothing was
    # deleted.
    assert session.history.window != 0
    kinds = [r.kind for r in session.history.rows()]
    assert kinds[-2:] == ["reset", "lead_in"] and kinds.count("lead_in") == 1
    assert facts in json.dumps([r.to_dict() for r in session.history.rows()])
    asyncio.run(Runner.run(agent, "third", session=session, run_config=config))
    assert _is_lead_in(model.inputs[2][0]) and facts not in json.dumps(model.inputs[2])
    assert [i.get("content") for i in model.inputs[2][1:]] == ["third"]


def test_run_config_without_the_session_is_a_clear_error(tmp_path: Path) -> None:
    session = _session(tmp_path, "alone", 3000)
    asyncio.run(session.add_items([{"role": "user", "content": "stored earlier"}]))
    model = ScriptedModel([[message("Hi.", "m1")]])
    with pytest.raises(LedgerError, match="session="):
        asyncio.run(Runner.run(_agent(model), "hello", run_config=session.run_config()))
    assert model.inputs == []
    with pytest.raises(LedgerError, match="call_model_input_filter"):
        session.run_config(call_model_input_filter=lambda data: data.model_data)


def _streamed(session: LedgerSession, model: ScriptedModel, text: str) -> Any:
    async def run() -> Any:
        result = Runner.run_streamed(_agent(model, read_log), text, session=session,
                                     run_config=session.run_config())
        async for _event in result.stream_events():
            pass
        return result
    return asyncio.run(run())


def test_a_streamed_run_gets_the_same_budget(tmp_path: Path) -> None:
    """A streamed run stores its input after the filter: the filter stores it
    (quarantined when it cannot fit) and the SDK's own write adds nothing twice."""
    session = _session(tmp_path, "stream", 8000)
    huge = " ".join(f"entry {i} of the pasted export;" for i in range(3500))
    model = StreamingModel([
        [message("Hi.", "m1")],
        [call("read_log", '{"part": 1}', "call_1")], [message("Read.", "m2")],
    ])
    with pytest.raises(LedgerError, match="fresh"):
        _streamed(session, model, huge)
    assert model.inputs == [] and asyncio.run(session.get_items()) == []
    assert _streamed(session, model, "hello").final_output == "Hi."
    assert _streamed(session, model, "read part 1").final_output == "Read."
    stored = asyncio.run(session.get_items())
    assert [_shape(i) for i in stored] == ["user", "assistant", "user", "function_call",
                                          "function_call_output", "assistant"]
    assert model.inputs[0] == stored[:1] and model.inputs[2] == stored[:5]
    assert sum(huge in json.dumps(r.to_dict()) for r in session.history.rows()) == 1
    _check_clean(tmp_path, "stream")


def _shape(item: dict[str, Any]) -> str:
    return str(item.get("role") or item.get("type"))


def test_a_handoff_changes_the_agent_and_the_budget_follows(tmp_path: Path) -> None:
    session = _session(tmp_path, "handoff", 3000)
    model = ScriptedModel([[call("transfer_to_billing", "{}", "call_h")],
                           [message("Billing here.", "msg_b")]])
    billing = Agent(name="billing", instructions="You do billing.", model=model,
                    tools=[session_history_tool(session)])
    triage = Agent(name="triage", instructions="Route.", model=model, handoffs=[billing],
                   tools=[session_history_tool(session)])
    result = asyncio.run(Runner.run(triage, "I need a refund", session=session,
                                    run_config=session.run_config()))
    assert result.final_output == "Billing here." and result.last_agent.name == "billing"
    assert model.instructions == ["Route.", "You do billing."]
    second = model.inputs[1]
    assert _unpaired(second) == (set(), set()) and len(second) == 3
    assert asyncio.run(session.get_items())[:-1] == second


def test_a_fresh_process_takes_the_budget_from_disk(tmp_path: Path) -> None:
    """The window's pressure is derived from what is stored: a second process
    with a new session object rolls over when the stored window needs it."""
    session = _session(tmp_path, "restart", 3000)
    model = ScriptedModel([[message("Noted.", "msg_1")]])
    notes = " ".join(f"ops note {i}: queue q{i} drained after {i % 9 + 2} minutes;"
                     for i in range(175))
    asyncio.run(Runner.run(_agent(model, session_history_tool(session)), notes,
                           session=session, run_config=session.run_config()))
    assert session.history.window == 0
    out = subprocess.run(
        [PYTHON, SCRIPT, str(tmp_path), "restart", "What was q7's time?", "Ask history.",
         "3000"],
        capture_output=True, text=True, env=subprocess_env(), timeout=120, check=True,
    )
    child = json.loads(out.stdout)
    assert child["final"] == "Ask history."
    sent = child["input"]
    assert _is_lead_in(sent[0]) and "ops note 7:" not in json.dumps(sent)
    assert [i.get("content") for i in sent[1:]] == ["What was q7's time?"]
    assert session.history.window != 0
    assert asyncio.run(session.get_items())[:-1] == sent
