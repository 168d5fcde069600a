"""The OpenAI Agents SDK session (extra ``agents``): real ``Runner.run`` turns
with a scripted local model, a second process continuing the conversation,
and the SDK's own session behaviours checked against its ``SQLiteSession``."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents", reason="the agents extra is not installed "
                    "(pip install 'transcript-ledger[agents]')")

from agents import Runner, SQLiteSession

from ledger import CursorExpired, InvalidWorkspace, LedgerError, Store
from ledger.integrations import MissingExtra, require
from ledger.integrations.openai_agents import (
    LedgerSession,
    session_history_tool,
)
from ledger.tokens.models import resolve
from tests.helpers import PYTHON, subprocess_env
from tests.helpers.agents_script import ScriptedModel, agent, call, message

SCRIPT = str(Path(__file__).resolve().parents[1] / "helpers" / "agents_script.py")


def _session(tmp_path: Path, sid: str = "chat-1") -> LedgerSession:
    return LedgerSession(sid, store=Store(tmp_path, durability="off"))


def _shape(item: dict[str, Any]) -> str:
    return str(item.get("type") or "message") + (
        f":{item['role']}" if "role" in item else "")


def _two_turns(session: LedgerSession) -> ScriptedModel:
    model = ScriptedModel([
        [call("get_weather", '{"city": "Paris"}', "call_1")],
        [message("It is sunny in Paris.", "msg_1")],
        [message("Rome: ask me tomorrow.", "msg_2")],
    ])
    first = asyncio.run(Runner.run(agent(model), "Weather in Paris?", session=session))
    assert first.final_output == "It is sunny in Paris."
    second = asyncio.run(Runner.run(agent(model), "And Rome?", session=session))
    assert second.final_output == "Rome: ask me tomorrow."
    return model


def test_runner_turns_keep_the_items_the_sdk_expects_in_order(tmp_path: Path) -> None:
    session = _session(tmp_path)
    model = _two_turns(session)
    items = asyncio.run(session.get_items())
    assert [_shape(i) for i in items] == [
        "message:user", "function_call", "function_call_output", "message:assistant",
        "message:user", "message:assistant",
    ]
    assert items[1]["call_id"] == items[2]["call_id"] == "call_1"
    assert items[2]["output"] == "sunny in Paris"
    assert items[3]["id"] == "msg_1"
    # The model's third call saw the whole first turn, from the session, in order.
    assert [_shape(i) for i in model.inputs[2]] == [_shape(i) for i in items[:5]]
    assert model.inputs[2][:4] == items[:4]


def test_a_second_process_reopens_the_workspace_and_continues(tmp_path: Path) -> None:
    session = _session(tmp_path)
    _two_turns(session)
    before = asyncio.run(session.get_items())
    out = subprocess.run(
        [PYTHON, SCRIPT, str(tmp_path), "chat-1", "What did I ask first?", "About Paris."],
        capture_output=True, text=True, env=subprocess_env(), timeout=120, check=True,
    )
    child = json.loads(out.stdout)
    assert child["final"] == "About Paris."
    assert child["input"][: len(before)] == before
    assert child["input"][-1]["content"] == "What did I ask first?"
    after = asyncio.run(_session(tmp_path).get_items())
    assert after[: len(before)] == before
    assert [_shape(i) for i in after[len(before):]] == ["message:user", "message:assistant"]
    assert after[-1]["id"] == "msg_child"


async def _script(session: Any) -> list[Any]:
    """The behaviours the SDK documents for its sessions, as one script."""
    seen: list[Any] = [await session.get_items(), await session.pop_item()]
    await session.add_items([{"role": "user", "content": "one"}])
    await session.add_items([])
    await session.add_items([
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}",
         "id": "fc_1"},
        {"type": "function_call_output", "call_id": "c1", "output": "done"},
        {"role": "assistant", "type": "message", "id": "m1",
         "content": [{"type": "output_text", "text": "two", "annotations": []}]},
    ])
    for limit in (None, 1, 2, 3, 10):
        seen.append(await session.get_items(limit))
    seen.append(await session.pop_item())
    seen.append(await session.get_items())
    seen.append(await session.get_items(2))
    await session.clear_session()
    seen.append(await session.get_items())
    seen.append(await session.pop_item())
    await session.add_items([{"role": "user", "content": "three"}])
    seen.append(await session.get_items())
    return seen


def test_sdk_session_behaviours_match_sqlite_session(tmp_path: Path) -> None:
    peer = SQLiteSession("chat-1", tmp_path / "peer.db")
    try:
        expected = asyncio.run(_script(peer))
    finally:
        peer.close()
    assert expected[-1] == [{"role": "user", "content": "three"}]  # the oracle is not vacuous
    assert asyncio.run(_script(_session(tmp_path))) == expected


def test_add_items_is_one_batch(tmp_path: Path) -> None:
    session = _session(tmp_path)
    items = [{"role": "user", "content": str(i)} for i in range(3)]
    asyncio.run(session.add_items(items))
    rows = list(session.history.rows())
    assert {r.batch["id"] for r in rows} == {rows[0].batch["id"]}
    assert [r.batch["n"] for r in rows] == [3, 3, 3]


def test_items_round_trip_byte_faithfully(tmp_path: Path) -> None:
    session = _session(tmp_path)
    items = [
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "t"}],
         "encrypted_content": "gAAA=="},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "é \u2028 \"q\""},
            {"type": "input_image", "image_url": "https://example.invalid/a.png",
             "detail": "low"}]},
        {"type": "web_search_call", "id": "ws_1", "status": "completed",
         "action": {"type": "search", "query": "x"}},
        {"role": "assistant", "content": [], "type": "message", "id": "m_empty"},
    ]
    asyncio.run(session.add_items(items))
    assert asyncio.run(_session(tmp_path).get_items()) == items


def test_pop_is_a_marked_rewrite_that_expires_cursors(tmp_path: Path) -> None:
    session = _session(tmp_path)
    asyncio.run(session.add_items([{"role": "user", "content": f"note {i}"} for i in range(30)]))
    tool = session.history.session_history()
    first = tool.search("note")
    assert first["cursor"] is not None
    epoch = session.history.epoch
    popped = asyncio.run(session.pop_item())
    assert popped == {"role": "user", "content": "note 29"}
    assert session.history.epoch != epoch
    with pytest.raises(CursorExpired):
        tool.search("note", cursor=first["cursor"])
    last = list(session.history.rows())[-1]
    assert last.parts == [] and last.meta["quarantine"]["row"]["meta"]["openai_agents"] == popped
    assert asyncio.run(session.get_items(1)) == [{"role": "user", "content": "note 28"}]


def test_clear_is_a_privacy_floor_and_delete_removes_the_workspace(tmp_path: Path) -> None:
    session = _session(tmp_path)
    asyncio.run(session.add_items([{"role": "user", "content": "my password is tulip"}]))
    asyncio.run(session.clear_session())
    assert asyncio.run(session.get_items()) == []
    assert json.loads(session.history.session_history().call(
        {"action": "search", "query": "tulip"}))["items"] == []
    assert any("tulip" in json.dumps(r.to_dict()) for r in session.history.rows())  # retained
    assert asyncio.run(session.delete_session()) is True
    assert not session.history.exists()
    assert asyncio.run(session.get_items()) == []


def test_rolled_over_window_starts_with_the_lead_in_and_offers_the_tool(tmp_path: Path) -> None:
    session = _session(tmp_path)
    asyncio.run(session.add_items([{"role": "user", "content": "the code word is heron"}]))
    session.history.rollover([])
    with pytest.raises(LedgerError, match="lead-in"):
        asyncio.run(session.pop_item())
    model = ScriptedModel([
        [call("session_history", '{"action": "search", "query": "code word"}', "call_h")],
        [message("It was heron.", "msg_h")],
    ])
    history_agent = agent(model)
    history_agent.tools.append(session_history_tool(session))
    result = asyncio.run(Runner.run(history_agent, "What was the code word?", session=session))
    assert result.final_output == "It was heron."
    first_input = model.inputs[0]
    assert first_input[0]["role"] == "system" and "session_history" in json.dumps(first_input[0])
    assert "heron" not in json.dumps(first_input)  # the old window is not in the view
    output = next(i for i in model.inputs[1] if i.get("type") == "function_call_output")
    assert "the code word is heron" in json.dumps(output)


def test_bad_session_ids_and_missing_extras_are_clear_errors(tmp_path: Path) -> None:
    for bad in ("../x", "a/b", ".hidden", ""):
        with pytest.raises(InvalidWorkspace):
            _session(tmp_path, bad)
    with pytest.raises(MissingExtra, match=r"transcript-ledger\[agents\]"):
        require("agents_not_installed_here", "agents")


def test_opening_a_session_writes_nothing_and_its_budget_is_checked(tmp_path: Path) -> None:
    store = Store(tmp_path / "s", durability="off")
    session = LedgerSession("fresh", store=store, context_limit=3000)
    assert session.context_limit == 3000
    assert asyncio.run(session.get_items()) == [] and not session.history.exists()
    spec = resolve("gpt-4o")  # by default: what the model takes as input
    assert LedgerSession("default", store=store).context_limit == (
        spec.context_limit - spec.output_reserve)
    assert not (tmp_path / "s").exists() or not any((tmp_path / "s").iterdir())
    with pytest.raises(LedgerError, match="context_limit"):
        LedgerSession("bad", store=store, context_limit=0)
    with pytest.raises(LedgerError, match="context_limit"):
        LedgerSession("old", store=store, rollover_tokens=1500)


def _settled(session: Any) -> list[str]:
    """The call ids this session settled for the user (MOVED_ON outputs), in order."""
    return [r.meta["openai_agents"]["call_id"] for r in session.history.rows()
            if r.meta.get("openai_agents", {}).get("type") == "function_call_output"
            and "before the user went on" in r.meta["openai_agents"]["output"]]


def test_a_batch_that_settles_nothing_still_sees_other_writers(tmp_path: Path) -> None:
    """A batch without a user message starts from the state of the session's
    own last batch instead of reading it. What another writer did in between
    is still seen: a call it opened and an output its rewrite took away (a
    new epoch, the next seq unchanged) are settled by the next user message,
    and a clear moves the batch into the new window."""
    from ledger.integrations.openai_agents import item_row

    session = _session(tmp_path)
    other = Store(tmp_path, durability="off").history("chat-1")

    def add(*items: dict[str, Any]) -> None:
        asyncio.run(session.add_items(list(items)))

    add({"role": "user", "content": "hello"})  # the first write: a new epoch
    add({"role": "user", "content": "again"})  # the session knows the state after it
    other.append(item_row({"type": "function_call", "call_id": "c_x", "name": "f",
                           "arguments": "{}"}))  # another writer opens a call
    add({"role": "assistant", "content": "thinking"})
    add({"role": "user", "content": "next"})
    assert _settled(session) == ["c_x"]
    add({"type": "function_call", "call_id": "c_a", "name": "f", "arguments": "{}"})
    add({"type": "function_call_output", "call_id": "c_a", "output": "done"})
    output = next(r.seq for r in session.history.rows()
                  if r.meta.get("openai_agents", {}).get("output") == "done")
    other.reject(output)  # a rewrite elsewhere reopens c_a
    add({"role": "assistant", "content": "still thinking"})
    add({"role": "user", "content": "after c_a"})
    assert _settled(session) == ["c_x", "c_a"]
    assert session.open_calls() == []
    other.clear_soft()  # a new window, opened elsewhere
    add({"role": "assistant", "content": "after the clear"})
    assert session.items() == [{"role": "assistant", "content": "after the clear"}]
    add({"role": "user", "content": "last"})
    assert _settled(session) == ["c_x", "c_a"]


def test_a_user_message_reads_no_state_yet_settles_what_others_opened(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch holding a user message starts from the state of the session's
    own last batch too, without reading it, and is conditional on all of it
    (next seq, window, epoch): a call another writer opened, or reopened by a
    rewrite (a new epoch, the next seq and window unchanged), just before the
    message is still settled by it -- the first try is refused before
    anything is written and the next one reads the window."""
    from ledger.integrations.openai_agents import item_row

    session = _session(tmp_path)
    other = Store(tmp_path, durability="off").history("chat-1")
    reads: list[int] = []
    snapshot = type(session.history).snapshot

    def counted(self: Any) -> Any:
        reads.append(1)
        return snapshot(self)

    monkeypatch.setattr(type(session.history), "snapshot", counted)

    def add(*items: dict[str, Any]) -> None:
        asyncio.run(session.add_items(list(items)))

    add({"role": "user", "content": "hello"})  # the first write: a new epoch
    add({"role": "user", "content": "again"})  # the session knows the state after it
    reads.clear()
    add({"role": "user", "content": "third"})
    assert reads == []  # nothing written since its own batch: no state read
    other.append(item_row({"type": "function_call", "call_id": "c_x", "name": "f",
                           "arguments": "{}"}))
    add({"role": "user", "content": "next"})  # right after the other writer's call
    assert _settled(session) == ["c_x"]
    add({"type": "function_call", "call_id": "c_a", "name": "f", "arguments": "{}"})
    add({"type": "function_call_output", "call_id": "c_a", "output": "done"})
    output = next(r.seq for r in session.history.rows()
                  if r.meta.get("openai_agents", {}).get("output") == "done")
    other.reject(output)  # reopens c_a: new epoch, same next seq and window
    add({"role": "user", "content": "after c_a"})
    assert _settled(session) == ["c_x", "c_a"]
    assert session.open_calls() == []
    users = [r.meta["openai_agents"].get("content") for r in session.history.provider_view()
             if r.meta.get("openai_agents", {}).get("role") == "user"]
    assert users == ["hello", "again", "third", "next", "after c_a"]  # each stored once
