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

import pytest

pytest.importorskip("agents", reason="the agents extra is not installed "
                    "(pip install 'transcript-ledger[agents]')")

from agents import Agent, Runner

from ledger import LedgerError, Store
from ledger.integrations.openai_agents import LedgerSession, _tool_schemas, session_history_tool
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
done = []
for i in range(15):
    result = asyncio.run(Runner.run(agent, f"question {{tag}}-{{i}}: " + "why " * 60,
                                    session=session, run_config=session.run_config()))
    done.append(result.final_output.split(":")[0])
print(json.dumps(done))
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
        outs.append(json.loads(out))
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
