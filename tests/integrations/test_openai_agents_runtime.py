"""The Agents SDK session off the happy path (issue 29): two runs on one
session from two processes, and a refused run that keeps no input. Real
``Runner.run`` calls, a scripted model, real files. (The SDK itself refuses
a model that reuses a call id, ``ModelBehaviorError``; reused ids are
covered through ``Conversation`` in ``tests/rollover/test_no_wedge_property.py``.)"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents", reason="the agents extra is not installed "
                    "(pip install 'transcript-ledger[agents]')")

from agents import Agent, Runner

from ledger import LedgerError, Store
from ledger.integrations.openai_agents import LedgerSession, _tool_schemas, session_history_tool
from ledger.rollover.conversation import SendRefused
from tests.helpers import PYTHON, subprocess_env
from tests.helpers.agents_script import ScriptedModel, message

REPO = str(Path(__file__).resolve().parents[2])

RUNNER = r"""
import asyncio, json, sys
sys.path.insert(0, {repo!r})
from agents import Agent, Runner
from ledger import Store
from ledger.integrations.openai_agents import LedgerSession, session_history_tool
from tests.helpers.agents_script import ScriptedModel, message
tag = sys.argv[1]
session = LedgerSession("shared", store=Store({root!r}, durability="off"), context_limit=1500)
model = ScriptedModel([[message(f"answer {{tag}}-{{i}}: " + "ok " * 60, f"m_{{tag}}_{{i}}")]
                       for i in range(15)])
agent = Agent(name="a", instructions="Be brief.", model=model,
              tools=[session_history_tool(session)])
done, missed = [], []
for i in range(15):
    result = asyncio.run(Runner.run(agent, f"question {{tag}}-{{i}}: " + "why " * 60,
                                    session=session, run_config=session.run_config()))
    done.append(result.final_output.split(":")[0])
    if f"question {{tag}}-{{i}}:" not in json.dumps(model.inputs[-1]):
        missed.append(i)  # the model was called without the run's question
print(json.dumps([done, missed]))
"""


def test_two_runs_on_one_session_from_two_processes_serialise(tmp_path: Path) -> None:
    code = RUNNER.format(repo=REPO, root=str(tmp_path))
    procs = [subprocess.Popen([PYTHON, "-c", code, tag], env=subprocess_env(), text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for tag in ("A", "B")]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]  # no run failed
        done, missed = json.loads(out)
        assert missed == []  # every model call held its run's question
        outs.append(done)
    assert sorted(outs[0] + outs[1]) == sorted(
        [f"answer {t}-{i}" for t in "AB" for i in range(15)])
    store = Store(tmp_path)
    h = store.history("shared")
    rows = [r.to_dict() for r in h.rows()]
    text = json.dumps(rows)
    for t in "AB":
        for i in range(15):  # every question and answer stored, none lost
            assert f"question {t}-{i}:" in text and f"answer {t}-{i}:" in text
    assert [r["kind"] for r in rows].count("lead_in") >= 2  # it rolled over meanwhile
    out = subprocess.run([PYTHON, "-m", "ledger", "--root", str(tmp_path), "check", "shared",
                          "--json"], capture_output=True, text=True, env=subprocess_env(),
                         timeout=120)
    assert out.returncode == 0 and json.loads(out.stdout)["damage"] == 0, out.stdout


def test_a_refused_run_keeps_no_input_in_the_window(tmp_path: Path) -> None:
    """Rule A5: the agent has no ``session_history``, so a window that must
    roll over cannot; the run is refused and its input leaves the window (a
    rejected record), so the next, smaller run is not refused for it."""
    session = LedgerSession("a5", store=Store(tmp_path, durability="off"), context_limit=3000)
    model = ScriptedModel([[message("Noted.", "m1")], [message("Fine.", "m2")]])
    agent = Agent(name="a", instructions="Be brief.", model=model)  # no session_history
    notes = " ".join(f"ops note {i}: queue q{i} drained after {i % 9 + 2} minutes;"
                     for i in range(120))
    asyncio.run(Runner.run(agent, notes, session=session, run_config=session.run_config()))
    big = " ".join(f"release note {i}: fixed issue {i * 7};" for i in range(160))
    with pytest.raises(LedgerError, match="A5"):
        asyncio.run(Runner.run(agent, big, session=session, run_config=session.run_config()))
    assert big not in json.dumps(asyncio.run(session.get_items()))
    assert sum(big in json.dumps(r.to_dict()) for r in session.history.rows()) == 1  # kept aside
    result = asyncio.run(Runner.run(agent, "and now?", session=session,
                                    run_config=session.run_config()))
    assert result.final_output == "Fine." and big not in json.dumps(model.inputs[-1])


def test_a_run_whose_input_another_run_answered_after_still_gets_the_budget(
        tmp_path: Path) -> None:
    """Two sessions on one workspace, interleaved as two processes may be: A
    stores its question, B then runs a whole turn (its question and its
    model's answer land after A's), then A's model call is prepared. A's
    question is still its trigger: the budget decides (a rollover when the
    window is full, carrying A's question) instead of sending the window as
    it stands, which another run filled past the hard ceiling (it was
    refused with StepBudgetExceeded)."""
    store = Store(tmp_path, durability="off")
    sessions = {t: LedgerSession("shared", store=store, context_limit=1500) for t in "AB"}
    agents = {}
    for t, session in sessions.items():
        # B's answers are long: B's budget decides before its answer exists,
        # so an answer can take the window past the hard ceiling.
        words = 60 if t == "A" else 400
        model = ScriptedModel([[message(f"answer {t}-{i}: " + "ok " * words, f"m_{t}_{i}")]
                               for i in range(15)])
        agents[t] = Agent(name="a", instructions="Be brief.", model=model,
                          tools=[session_history_tool(session)])
    a = sessions["A"]
    for i in range(15):
        question = {"role": "user", "content": f"question A-{i}: " + "why " * 60}
        asyncio.run(a.add_items([question]))
        asyncio.run(Runner.run(agents["B"], f"question B-{i}: " + "why " * 60,
                               session=sessions["B"], run_config=sessions["B"].run_config()))
        items = a.request_items("Be brief.", _tool_schemas(agents["A"]), [question])
        assert f"question A-{i}:" in json.dumps(items)  # A's model sees its question
        answer = message(f"answer A-{i}: " + "ok " * 60, f"m_A_{i}").model_dump()
        asyncio.run(a.add_items([answer]))
    rows = [r.to_dict() for r in a.history.rows()]
    assert [r["kind"] for r in rows].count("lead_in") >= 2  # the budget rolled over


def _sealed_by_another_run(tmp_path: Path) -> tuple[dict[str, LedgerSession], dict[str, Any]]:
    """Two sessions on one workspace whose window is close to its rollover
    threshold; A has stored its question and not yet called its model."""
    store = Store(tmp_path, durability="off")
    sessions = {t: LedgerSession("shared", store=store, context_limit=1500) for t in "AB"}
    a = sessions["A"]
    for i in range(7):
        asyncio.run(a.add_items([{"role": "user", "content": f"old question {i}: " + "why " * 60}]))
        asyncio.run(a.add_items([message(f"old answer {i}: " + "ok " * 60, f"o{i}").model_dump()]))
    question = {"role": "user", "content": "question A: " + "why " * 60}
    asyncio.run(a.add_items([question]))
    return sessions, question


def _agent(session: LedgerSession, model: ScriptedModel) -> Agent[Any]:
    return Agent(name="a", instructions="Be brief.", model=model,
                 tools=[session_history_tool(session)])


@pytest.mark.parametrize("answered", [True, False], ids=["b-answered", "b-model-running"])
def test_a_question_sealed_by_another_runs_rollover_is_carried_to_the_model(
        tmp_path: Path, answered: bool) -> None:
    """The second shape of the two-run race: A stores its question; before
    A's model call reads the window, B's send rolls over with B's question
    as its trigger and seals A's question in the old window. A's model call
    carries A's question into the new window (a copy marked
    ``meta.carried_from``, the original stays sealed) instead of sending the
    new window without it -- where the model answered B's question, or no
    question at all."""
    sessions, question = _sealed_by_another_run(tmp_path)
    a, b = sessions["A"], sessions["B"]
    asked = a.history.next_seq - 1
    model_b = ScriptedModel([[message("answer B: " + "ok " * 20, "m_B")]])
    if answered:
        asyncio.run(Runner.run(_agent(b, model_b), "question B: " + "why " * 60, session=b,
                               run_config=b.run_config()))
    else:
        question_b = {"role": "user", "content": "question B: " + "why " * 60}
        asyncio.run(b.add_items([question_b]))
        b.request_items("Be brief.", _tool_schemas(_agent(b, model_b)), [question_b])
    assert a.history.window > asked  # B's rollover sealed A's question
    items = a.request_items("Be brief.", _tool_schemas(_agent(a, ScriptedModel([]))),
                            [question])
    text = json.dumps(items)
    assert text.count("question A:") == 1 and text.rindex("question A:") > text.rindex(
        "question B:")  # A's model gets its question, the newest item
    view = a.history.provider_view()
    assert view[-1].meta["carried_from"] == asked
    asyncio.run(a.add_items([message("answer A: ok", "m_A").model_dump()]))
    assert [r.role for r in a.history.provider_view()][-2:] == ["user", "assistant"]
    assert a.history.get(asked) is not None and "question A:" in json.dumps(
        a.history.get(asked).to_dict())  # the original stays, sealed


def test_a_question_another_runs_rollover_carried_is_not_carried_twice(tmp_path: Path) -> None:
    """B's rollover took A's question into its trigger (B is a session opened
    on the stored window, whose trigger is everything since the model last
    spoke): A's model call finds the copy and does not add a second one."""
    sessions, question = _sealed_by_another_run(tmp_path)
    a = sessions["A"]
    b = LedgerSession("shared", store=a.store, context_limit=1500)
    asyncio.run(b.add_items([{"role": "user", "content": "question B: " + "why " * 60}]))
    b2 = LedgerSession("shared", store=a.store, context_limit=1500)  # no batch of its own
    b2.request_items("Be brief.", _tool_schemas(_agent(b2, ScriptedModel([]))), [])
    assert a.history.window > question_seq(a, "question A:")
    before = a.history.next_seq
    items = a.request_items("Be brief.", _tool_schemas(_agent(a, ScriptedModel([]))),
                            [question])
    assert json.dumps(items).count("question A:") == 1
    assert a.history.next_seq == before  # nothing appended: the copy was there


def question_seq(session: LedgerSession, text: str) -> int:
    return next(r.seq for r in session.history.rows() if text in json.dumps(r.to_dict()))


def test_a_question_behind_another_runs_clear_is_refused_not_sent(tmp_path: Path) -> None:
    """A clear (a privacy floor) between A's stored question and A's model
    call: the question is not carried across the floor, and the model is not
    called with a window that lacks it -- the send is refused."""
    sessions, question = _sealed_by_another_run(tmp_path)
    a, b = sessions["A"], sessions["B"]
    asyncio.run(b.clear_session())
    with pytest.raises(SendRefused, match="clear") as refused:
        a.request_items("Be brief.", _tool_schemas(_agent(a, ScriptedModel([]))), [question])
    assert refused.value.decision.rule == "cleared"
    assert a.history.provider_view() == []  # nothing crossed the floor


@pytest.mark.parametrize("other", ["rollover", "clear"])
def test_a_window_sealed_between_the_read_and_the_send_is_read_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, other: str) -> None:
    """The same race one step later: A's model call has read the window
    (its question in it) and picked the question as the trigger when B's
    rollover (or clear) seals it. The send of that trigger is refused
    (``sealed``), not built from B's rows, and A reads the window again:
    the question is carried into the new window -- or, behind a clear,
    refused."""
    sessions, question = _sealed_by_another_run(tmp_path)
    a, b = sessions["A"], sessions["B"]
    model_b = ScriptedModel([[message("answer B: " + "ok " * 20, "m_B")]])
    start = LedgerSession._trigger_start
    moved = []

    def then_b_moves(self: LedgerSession, view: Any) -> int | None:
        first = start(self, view)
        if not moved:
            moved.append(first)
            if other == "rollover":
                asyncio.run(Runner.run(_agent(b, model_b), "question B: " + "why " * 60,
                                       session=b, run_config=b.run_config()))
            else:
                asyncio.run(b.clear_session())
        return first

    monkeypatch.setattr(LedgerSession, "_trigger_start", then_b_moves)
    tools = _tool_schemas(_agent(a, ScriptedModel([])))
    if other == "clear":
        with pytest.raises(SendRefused, match="clear"):
            a.request_items("Be brief.", tools, [question])
        assert a.history.provider_view() == []
        return
    items = a.request_items("Be brief.", tools, [question])
    assert a.history.window > moved[0]  # B's rollover sealed the trigger A had picked
    text = json.dumps(items)
    assert text.count("question A:") == 1 and text.rindex("question A:") > text.rindex(
        "answer B:")
