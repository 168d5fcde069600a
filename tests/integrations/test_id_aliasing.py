"""Framework ids cannot alias (issue 30, case 2): whoever knows a private id
and computes the workspace name it is stored under, then uses that name as an
id of their own (in the same framework or another one), reaches nothing of
the first: no read, no write, no delete."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.base", reason="the langgraph extra is not installed")
pytest.importorskip("claude_agent_sdk", reason="the claude extra is not installed")
pytest.importorskip("agents", reason="the agents extra is not installed")

from langgraph.checkpoint.base import empty_checkpoint

from ledger import Store
from ledger.core.errors import InvalidWorkspace
from ledger.core.ids import is_encoded
from ledger.integrations.claude import LedgerSessionStore, session_workspace
from ledger.integrations.langchain import LedgerChatMessageHistory
from ledger.integrations.langgraph import LedgerSaver, thread_workspace
from ledger.integrations.openai_agents import LedgerSession

PRIVATE = "user:alice/private chat"


def _put(saver: LedgerSaver, tid: str, marker: str) -> None:
    cp = empty_checkpoint()
    cp["channel_values"] = {"note": marker}
    cp["channel_versions"] = {"note": 1}
    saver.put({"configurable": {"thread_id": tid, "checkpoint_ns": ""}}, cp,
              {"source": "input", "step": -1}, {"note": 1})


def _note(saver: LedgerSaver, tid: str) -> Any:
    tup = saver.get_tuple({"configurable": {"thread_id": tid}})
    return None if tup is None else tup.checkpoint["channel_values"].get("note")


@pytest.mark.parametrize("attack", ["hashed name", "claude name"])
def test_a_thread_id_that_is_another_threads_name_reaches_nothing_of_it(
    tmp_path: Path, attack: str,
) -> None:
    store = Store(tmp_path, durability="off")
    saver = LedgerSaver(store=store)
    if attack == "hashed name":
        victim = PRIVATE
        _put(saver, victim, "alice's secret")
        alias = thread_workspace(victim)
        assert alias.startswith("lg-") and is_encoded(alias)
        read_victim = lambda: _note(saver, victim)  # noqa: E731
    else:  # a Claude session's workspace name, used as a LangGraph thread id
        cc = LedgerSessionStore(store=store)
        key = {"project_key": "/home/alice/proj", "session_id": "s-1"}
        asyncio.run(cc.append(key, [{"type": "user", "uuid": "u1", "sessionId": "s-1",
                                     "message": {"role": "user", "content": "alice's secret"}}]))
        alias = session_workspace(key)
        read_victim = lambda: asyncio.run(cc.load(key))  # noqa: E731
    before = read_victim()
    assert before
    # the attacker's id is the victim's workspace name: it lands elsewhere
    assert thread_workspace(alias) != alias
    assert _note(saver, alias) is None
    assert list(saver.list({"configurable": {"thread_id": alias}})) == []
    _put(saver, alias, "mallory was here")
    assert _note(saver, alias) == "mallory was here"
    saver.delete_thread(alias)
    assert _note(saver, alias) is None
    assert read_victim() == before  # read, written and deleted: untouched


def test_a_claude_session_id_that_is_another_sessions_hashed_name(tmp_path: Path) -> None:
    cc = LedgerSessionStore(store=Store(tmp_path, durability="off"))
    project = "/home/alice/proj"
    victim = {"project_key": project, "session_id": PRIVATE}  # cannot name a workspace
    entry = {"type": "user", "uuid": "u1", "sessionId": PRIVATE,
             "message": {"role": "user", "content": "alice's secret"}}
    asyncio.run(cc.append(victim, [entry]))
    hashed = session_workspace(victim).rsplit("-", 1)[1]
    assert hashed.startswith("h") and len(hashed) == 33
    attacker = {"project_key": project, "session_id": hashed}
    assert session_workspace(attacker) != session_workspace(victim)
    assert asyncio.run(cc.load(attacker)) is None
    mallory = {**entry, "uuid": "m1", "sessionId": hashed,
               "message": {"role": "user", "content": "mallory"}}
    asyncio.run(cc.append(attacker, [mallory]))
    asyncio.run(cc.delete(attacker))
    assert asyncio.run(cc.load(victim)) == [entry]


def test_session_ids_of_the_encoded_forms_are_refused(tmp_path: Path) -> None:
    """The Agents SDK and LangChain name a workspace by the session id as
    given: ids of the encoded forms would reach a LangGraph thread or a Claude
    session, so they are refused before anything is read or written."""
    store = Store(tmp_path, durability="off")
    saver = LedgerSaver(store=store)
    _put(saver, PRIVATE, "alice's secret")
    claude = session_workspace({"project_key": "p", "session_id": "s"})
    for alias in (thread_workspace(PRIVATE), claude):
        with pytest.raises(InvalidWorkspace, match="reserved"):
            LedgerSession(alias, store=store)
        with pytest.raises(InvalidWorkspace, match="reserved"):
            LedgerChatMessageHistory(alias, store=store)
    assert _note(saver, PRIVATE) == "alice's secret"
    # ids of every other form keep naming their workspace as in 0.2
    for sid in ("chat-42", "lg-notahash", "cc-short", "h" + "0" * 32):
        assert LedgerSession(sid, store=store).session_id == sid
        assert thread_workspace(sid) == sid


# --- and should two ids ever share a hashed name ----------------------------------------
# The names hold hashes (64 bits of the Claude project key, 128 of a LangGraph
# thread id or Claude session id that cannot name a workspace); a collision is
# simulated by patching the name function, as no test can afford to find one.


def test_a_colliding_thread_name_reaches_nothing_of_the_owner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ledger.integrations.langgraph as lg
    from ledger.core.errors import LedgerError

    saver = LedgerSaver(store=Store(tmp_path, durability="off"))
    _put(saver, PRIVATE, "alice's secret")
    victim_ws = thread_workspace(PRIVATE)
    monkeypatch.setattr(lg, "thread_workspace", lambda tid: victim_ws)
    for attempt in (lambda: _note(saver, "mallory"),
                    lambda: list(saver.list({"configurable": {"thread_id": "mallory"}})),
                    lambda: _put(saver, "mallory", "overwrite"),
                    lambda: saver.put_writes({"configurable": {
                        "thread_id": "mallory", "checkpoint_ns": "", "checkpoint_id": "x"}},
                        [("note", "w")], "task"),
                    lambda: saver.delete_thread("mallory"),
                    lambda: saver.prune(["mallory"])):
        with pytest.raises(LedgerError, match="another thread's checkpoints"):
            attempt()
    monkeypatch.undo()
    assert _note(saver, PRIVATE) == "alice's secret"


def test_a_colliding_claude_project_reaches_nothing_of_the_owner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ledger.integrations.claude as cl
    from ledger.core.errors import LedgerError

    monkeypatch.setattr(cl, "_h64", lambda text: "0123456789abcdef")  # every key collides
    cc = LedgerSessionStore(store=Store(tmp_path, durability="off"))
    victim = {"project_key": "/home/alice/proj", "session_id": "s-1"}
    attacker = {"project_key": "/home/mallory/x", "session_id": "s-1"}
    assert session_workspace(victim) == session_workspace(attacker)
    entry = {"type": "user", "uuid": "u1", "sessionId": "s-1",
             "message": {"role": "user", "content": "alice's secret"}}
    asyncio.run(cc.append(victim, [entry]))
    asyncio.run(cc.append({**victim, "subpath": "agent-1"}, [{**entry, "uuid": "u2"}]))
    for attempt in (lambda: asyncio.run(cc.load(attacker)),
                    lambda: asyncio.run(cc.append(attacker, [{**entry, "uuid": "m1"}])),
                    lambda: asyncio.run(cc.delete(attacker))):
        with pytest.raises(LedgerError, match="another session key"):
            attempt()
    assert asyncio.run(cc.list_sessions("/home/mallory/x")) == []
    assert asyncio.run(cc.list_subkeys(attacker)) == []
    assert asyncio.run(cc.load(victim)) == [entry]
    assert asyncio.run(cc.list_subkeys(victim)) == ["agent-1"]
