"""Issue 29, cases 1 and 4 with real processes: a process killed with SIGKILL
while a tool call is open (then a restart, and the conversation goes on), and
``LedgerSession.pop_item`` from two processes at once."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from ledger import Store
from ledger.rollover.conversation import Conversation
from tests.helpers import PYTHON, subprocess_env
from tests.rollover.test_conversation import BASH, assert_paired, user, words

CHILD = r"""
import os, signal, sys
sys.path.insert(0, {repo!r})
from ledger import Store
from ledger.rollover.conversation import Conversation
from tests.rollover.test_conversation import BASH, calls, says, user, words
conv = Conversation.open(Store({root!r}, durability="off"), "crash", model="gpt-4o",
                         context_limit=2000, system="agent", tools={{"bash": BASH}})
for turn in range(4):
    conv.send(user(f"turn {{turn}} " + words(90, "w")))
    conv.record(says(words(40, "s")))
conv.send(user("now run the long job"))
conv.record(calls("job-1"))
os.kill(os.getpid(), signal.SIGKILL)  # the tool kills the process: no result is ever stored
"""


def test_a_process_killed_with_a_call_open_does_not_wedge_the_conversation(
        tmp_path: Path) -> None:
    repo = str(Path(__file__).resolve().parents[2])
    child = subprocess.run([PYTHON, "-c", CHILD.format(repo=repo, root=str(tmp_path))],
                           env=subprocess_env(), capture_output=True, timeout=120)
    assert child.returncode == -9, child.stderr
    # check names the call left open, as a notice (exit 0), not damage
    out = subprocess.run([PYTHON, "-m", "ledger", "--root", str(tmp_path), "check", "crash",
                          "--json"], env=subprocess_env(), capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert [(f["code"], f["severity"]) for f in report["findings"]] == [
        ("open_tool_call", "notice")]
    assert "'job-1'" in report["findings"][0]["message"]
    # the restart: a new object on the same store; the window is past the ceiling
    conv = Conversation.open(Store(tmp_path, durability="off"), "crash", model="gpt-4o",
                             context_limit=2000, system="agent", tools={"bash": BASH})
    assert [c.id for c in conv.open_calls()] == ["job-1"]
    req = conv.send(user("where were we? " + words(200, "q")))
    assert req.rolled_over and req.tokens <= req.ceiling
    assert_paired(req.messages)
    assert conv.open_calls() == []
    for turn in range(3):  # and it goes on
        req = conv.send(user(f"again {turn}"))
        assert req.tokens <= req.ceiling
    after = subprocess.run([PYTHON, "-m", "ledger", "--root", str(tmp_path), "check", "crash",
                            "--json"], env=subprocess_env(), capture_output=True, text=True,
                           timeout=120)
    assert json.loads(after.stdout)["findings"] == []


POPPER = r"""
import asyncio, json, sys
sys.path.insert(0, {repo!r})
from ledger import Store
from ledger.integrations.openai_agents import LedgerSession
session = LedgerSession("pops", store=Store({root!r}, durability="off"))
got = [asyncio.run(session.pop_item()) for _ in range(30)]
print(json.dumps([g["content"] for g in got if g is not None]))
"""


def test_pop_item_from_two_processes_gives_each_item_once(tmp_path: Path) -> None:
    pytest.importorskip("agents", reason="the agents extra is not installed")
    import asyncio

    from ledger.integrations.openai_agents import LedgerSession

    session = LedgerSession("pops", store=Store(tmp_path, durability="off"))
    asyncio.run(session.add_items([{"role": "user", "content": f"item {i}"} for i in range(100)]))
    repo = str(Path(__file__).resolve().parents[2])
    code = POPPER.format(repo=repo, root=str(tmp_path))
    procs = [subprocess.Popen([PYTHON, "-c", code], env=subprocess_env(), text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    popped = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        popped += json.loads(out)
    assert len(popped) == 60 and len(set(popped)) == 60
    left = asyncio.run(session.get_items())
    assert len(left) == 40
    assert not set(popped) & {i["content"] for i in left}


@pytest.mark.parametrize("engine", ["files", "memory", "postgres"])
def test_check_lists_calls_left_open_as_notices_on_every_engine(
        engine: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    root = {"files": lambda: str(tmp_path), "memory": lambda: f"memory://{tmp_path.name}",
            "postgres": lambda: request.getfixturevalue("pg_root")}[engine]()
    h = Store(root, durability="off").history("tail")
    h.append(user("go"))
    h.append({"role": "assistant", "parts": [
        {"type": "tool_call", "id": i, "name": "bash", "input": {}} for i in ("a", "b")]})
    h.append({"role": "tool", "parts": [{"type": "tool_result", "id": "b", "output": "ok"}]})
    report = h.engine.verify()
    assert report.ok  # a notice, not damage
    found = [(f.severity, f.code) for f in report.findings]
    assert found == [("notice", "open_tool_call")] and "'a'" in report.findings[0].message
    h.append({"role": "tool", "parts": [{"type": "tool_result", "id": "a", "output": "ok"}]})
    assert h.engine.verify().findings == []


def test_send_retries_when_another_writer_moves_the_window_and_raises_only_send_refused(
        tmp_path: Path) -> None:
    """Another writer appends while a rollover commits (here from a cleanup
    hook, between preparation and the conditional append): the send is run
    again on the new window. When that happens on every try, ``SendConflict``
    (a ``SendRefused``) says so, and nothing of the send is stored."""
    from ledger.rollover.conversation import SendConflict, SendRefused
    from ledger.rollover.engine import RolloverHooks

    store = Store(tmp_path, durability="off")
    other = store.history("busy")
    writes = {"left": 1}

    def interfere() -> None:
        if writes["left"]:
            writes["left"] -= 1
            other.append(user("another run's message"))

    conv = Conversation.open(store, "busy", model="gpt-4o", context_limit=2000, system="agent",
                             tools={"bash": BASH}, hooks=RolloverHooks(
                                 cleanup=[("interfere", interfere)]))
    req = None
    for turn in range(12):
        req = conv.send(user(f"turn {turn} " + words(120, "w")))
        if req.rolled_over:
            break
    assert req is not None and req.rolled_over and writes["left"] == 0
    assert req.tokens <= req.ceiling
    texts = [str(r.to_dict()) for r in conv.history.rows()]
    assert sum("another run's message" in t for t in texts) == 1
    assert sum(f"turn {turn} " in t for t in texts) == 1  # stored once, not per try

    writes["left"] = 10**6  # a writer that never stops
    for turn in range(12, 30):
        before = conv.history.next_seq
        try:
            conv.send(user(f"turn {turn} " + words(120, "w")))
        except SendRefused as exc:
            assert isinstance(exc, SendConflict) and "tries" in str(exc)
            rows = [r.to_dict() for r in conv.history.rows(after_seq=before - 1)]
            assert not any(f"turn {turn} " in str(r) for r in rows)
            break
    else:
        raise AssertionError("no rollover was due: the writer never interfered")
