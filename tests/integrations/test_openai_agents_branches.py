"""The ``AdvancedSQLiteSession`` branch API on ``LedgerSession`` (forks), on
the file, memory and PostgreSQL engines: the same script of branch calls
gives what the SDK's own ``AdvancedSQLiteSession`` gives, ``Runner.run``
turns on a branch see only the branch, the privacy floor is carried into a
branch, and branch names never reach another session."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("agents", reason="the agents extra is not installed "
                    "(pip install 'transcript-ledger[agents]')")

from agents import Runner
from agents.extensions.memory import AdvancedSQLiteSession

from ledger import InvalidWorkspace, LedgerError, Store
from ledger.integrations.openai_agents import LedgerSession
from ledger.integrations.openai_agents_branches import (
    BranchError,
    branch_name,
    branch_prefix,
    branch_workspace,
)
from tests.helpers.agents_script import ScriptedModel, agent, call, message


@pytest.fixture(params=["files", "memory", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "files":
        return Store(tmp_path / "store", durability="off")
    if request.param == "memory":
        return Store(f"memory://branches-{uuid.uuid4().hex}")
    return Store(request.getfixturevalue("pg_root"))


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _answer(text: str, mid: str) -> dict[str, Any]:
    return {"role": "assistant", "type": "message", "id": mid,
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


async def _outcome(coro: Any) -> Any:
    try:
        return await coro
    except ValueError as exc:  # BranchError is one, as the SDK's are
        return ("ValueError", str(exc).split("'")[0])


def _branches(listed: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """The listed branches that hold items (the SDK lists no empty branch;
    ours lists a branch made from turn 1 with ``message_count`` 0)."""
    return sorted((b["branch_id"], b["message_count"], b["user_turns"], b["is_current"])
                  for b in listed if b["message_count"])


async def _script(session: Any) -> list[Any]:
    """Branch calls as the SDK documents them, with what each returns."""
    await session.add_items([_user("one")])
    await session.add_items([_answer("1", "m1")])
    await session.add_items([_user("two")])
    await session.add_items([
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}",
         "id": "fc_1"},
        {"type": "function_call_output", "call_id": "c1", "output": "done"},
        _answer("2", "m2")])
    await session.add_items([_user("three"), _answer("3", "m3")])
    seen: list[Any] = []
    seen.append([(t["turn"], t["content"]) for t in await session.get_conversation_turns()])
    seen.append(await session.create_branch_from_turn(2, "retry"))
    seen.append(await session.get_items())
    seen.append(_branches(await session.list_branches()))
    await session.add_items([_user("two, again")])
    await session.add_items([_answer("2b", "m2b")])
    seen.append(await session.get_items())
    seen.append(await session.get_items(2, branch_id="main"))
    seen.append(await session.pop_item())
    seen.append(await session.get_items())
    await session.switch_to_branch("main")
    seen.append(await session.get_items())
    seen.append(await session.create_branch_from_content("THREE", "from-three"))
    seen.append(await session.get_items())
    seen.append([t["turn"] for t in await session.find_turns_by_content("T")])
    seen.append(await session.get_items(branch_id="retry"))
    for bad in (session.create_branch_from_turn(9, "x"),
                session.create_branch_from_turn(1, "retry"),
                session.create_branch_from_turn(1, "  "),
                session.create_branch_from_content("absent", "y"),
                session.switch_to_branch("nope"),
                session.delete_branch("main"),
                session.delete_branch("from-three"),
                session.delete_branch("nope")):
        seen.append(await _outcome(bad))
    seen.append(_branches(await session.list_branches()))
    await session.delete_branch("from-three", force=True)
    seen.append(_branches(await session.list_branches()))
    seen.append(await session.get_items())
    await session.delete_branch("retry")
    seen.append(_branches(await session.list_branches()))
    return seen


def test_branch_calls_match_the_sdks_advanced_sqlite_session(store: Store,
                                                              tmp_path: Path) -> None:
    peer = AdvancedSQLiteSession(session_id="chat-1", db_path=tmp_path / "peer.db",
                                 create_tables=True)
    try:
        expected = asyncio.run(_script(peer))
    finally:
        peer.close()
    assert expected[1] == "retry" and expected[2] == [_user("one"), _answer("1", "m1")]
    got = asyncio.run(_script(LedgerSession("chat-1", store=store)))
    assert got == expected


def _run(session: LedgerSession, model: ScriptedModel, text: str) -> Any:
    return asyncio.run(Runner.run(agent(model), text, session=session)).final_output


def test_runner_turns_on_a_branch_see_only_the_branch(store: Store) -> None:
    session = LedgerSession("trip", store=store)
    model = ScriptedModel([
        [call("get_weather", '{"city": "Paris"}', "call_1")],
        [message("Sunny in Paris.", "msg_1")],
        [message("Rome is rainy.", "msg_2")],
        [message("Oslo is cold.", "msg_3")],
        [message("Still sunny.", "msg_4")],
    ])
    assert _run(session, model, "Weather in Paris?") == "Sunny in Paris."
    assert _run(session, model, "And Rome?") == "Rome is rainy."
    main_items = asyncio.run(session.get_items())
    branch = asyncio.run(session.create_branch_from_turn(2))
    assert branch.startswith("branch_from_turn_2_")
    assert _run(session, model, "And Oslo?") == "Oslo is cold."
    sent = json.dumps(model.inputs[3])
    assert "Paris" in sent and "Rome" not in sent  # turn 1 and the new question only
    assert [i.get("content") for i in model.inputs[3] if i.get("role") == "user"] == [
        "Weather in Paris?", "And Oslo?"]
    # main did not move; a new session object starts on main and continues it
    again = LedgerSession("trip", store=store)
    assert asyncio.run(again.get_items()) == main_items
    assert _run(again, model, "Paris again?") == "Still sunny."
    assert "Oslo" not in json.dumps(model.inputs[4]) and "Rome" in json.dumps(model.inputs[4])
    listed = {b["branch_id"]: b for b in asyncio.run(again.list_branches())}
    assert set(listed) == {"main", branch}
    assert listed["main"]["is_current"] and not listed[branch]["is_current"]
    assert listed[branch]["user_turns"] == 2 and listed["main"]["user_turns"] == 3
    # the branch is a fork of main: Store.branches names it, with where it came from
    forks = store.branches("trip")
    assert [f.workspace for f in forks] == [branch_workspace("trip", branch)]
    assert forks[0].source == "trip"


def test_the_first_turn_and_the_turn_after_a_clear_branch_to_an_empty_window(
        store: Store) -> None:
    session = LedgerSession("fresh", store=store)
    asyncio.run(session.add_items([_user("hello"), _answer("hi", "m1")]))
    asyncio.run(session.add_items([_user("more")]))
    assert asyncio.run(session.create_branch_from_turn(1, "over")) == "over"
    assert asyncio.run(session.get_items()) == []
    asyncio.run(session.add_items([_user("hello again")]))
    assert asyncio.run(session.get_items()) == [_user("hello again")]
    assert asyncio.run(session.get_items(branch_id="main"))[-1] == _user("more")
    # after a manual reset: the rows before it stay out of the branch's reach
    asyncio.run(session.switch_to_branch("main"))
    asyncio.run(session.add_items([_user("my pin is 4711")]))
    asyncio.run(session.clear_session())
    asyncio.run(session.add_items([_user("new topic"), _answer("ok", "m2")]))
    asyncio.run(session.create_branch_from_turn(1, "after-clear"))
    assert asyncio.run(session.get_items()) == []
    found = session.history.session_history().call({"action": "search", "query": "4711"})
    assert json.loads(found)["items"] == []
    export = json.dumps([r.to_dict() for r in session.history.rows()])
    assert "new topic" in export  # the hidden turn stays for audit


def test_branch_names_round_trip_and_never_reach_another_session(store: Store) -> None:
    session = LedgerSession("alpha", store=store)
    asyncio.run(session.add_items([_user("a"), _answer("b", "m1")]))
    for name in ("with space", "ünï/code", "plain-1.2"):
        asyncio.run(session.switch_to_branch("main"))
        assert asyncio.run(session.create_branch_from_turn(1, name)) == name
        ws = branch_workspace("alpha", name)
        assert branch_name("alpha", ws) == name and branch_name("beta", ws) is None
        with pytest.raises(InvalidWorkspace):
            LedgerSession(ws, store=store)  # a branch's name is no session id
    with pytest.raises(BranchError, match="too long"):
        branch_workspace("alpha", "n" * 200)
    other = LedgerSession("beta", store=store)
    assert asyncio.run(other.list_branches()) == []
    with pytest.raises(ValueError):
        asyncio.run(other.switch_to_branch("with space"))
    assert sorted(b["branch_id"] for b in asyncio.run(session.list_branches())) == [
        "main", "plain-1.2", "with space", "ünï/code"]
    assert all(ws == "alpha" or not ws.startswith(branch_prefix("beta"))
               for ws in store.workspaces())


def test_delete_session_deletes_every_branch(store: Store) -> None:
    session = LedgerSession("gone", store=store)
    asyncio.run(session.add_items([_user("a"), _answer("b", "m1")]))
    asyncio.run(session.add_items([_user("c")]))
    asyncio.run(session.create_branch_from_turn(2, "b1"))
    asyncio.run(session.create_branch_from_turn(1, "b2"))
    assert len(store.workspaces()) == 3
    assert asyncio.run(session.delete_session()) is True
    assert store.workspaces() == []
    assert asyncio.run(session.list_branches()) == []


def test_a_branch_survives_its_source_being_deleted(store: Store) -> None:
    session = LedgerSession("src", store=store)
    asyncio.run(session.add_items([_user("keep me"), _answer("kept", "m1")]))
    asyncio.run(session.add_items([_user("second")]))
    asyncio.run(session.create_branch_from_turn(2, "b"))
    assert store.delete("src")
    assert asyncio.run(session.get_items()) == [_user("keep me"), _answer("kept", "m1")]
    with pytest.raises(LedgerError):
        asyncio.run(session.delete_branch("main"))


def test_turns_are_the_current_windows_and_a_branch_keeps_the_window_structure(
        store: Store) -> None:
    session = LedgerSession("rolled", store=store)
    asyncio.run(session.add_items([_user("the code word is heron"), _answer("noted", "m1")]))
    session.history.rollover([{"role": "user", "parts": [{"type": "text", "text": "go on"}]}])
    asyncio.run(session.add_items([_answer("going", "m2")]))
    asyncio.run(session.add_items([_user("next"), _answer("ok", "m3")]))
    window = asyncio.run(session.get_items())
    assert window[0]["role"] == "system"  # the lead-in
    turns = asyncio.run(session.get_conversation_turns())
    assert [(t["turn"], t["full_content"]) for t in turns] == [
        (1, [{"type": "input_text", "text": "go on"}]), (2, "next")]
    asyncio.run(session.create_branch_from_turn(2, "second"))
    assert asyncio.run(session.get_items()) == window[:-2]
    assert session.history.window == store.history("rolled").window  # same boundary
    # turn 1 is the rollover's copied trigger, inside the rollover's batch
    asyncio.run(session.switch_to_branch("main"))
    asyncio.run(session.create_branch_from_turn(1, "first"))
    assert asyncio.run(session.get_items()) == window[:1]  # the lead-in only
    found = session.history.session_history().call({"action": "search", "query": "heron"})
    assert json.loads(found)["items"]  # the sealed window is still reachable, as on main


def test_one_name_two_creators_and_a_branch_deleted_under_a_session(store: Store) -> None:
    from concurrent.futures import ThreadPoolExecutor

    first = LedgerSession("race", store=store)
    asyncio.run(first.add_items([_user("a"), _answer("b", "m1")]))
    asyncio.run(first.add_items([_user("c")]))
    sessions = [LedgerSession("race", store=store) for _ in range(4)]

    def create(s: LedgerSession) -> str:
        try:
            return s.branch_from_turn(2, "same")
        except BranchError as exc:
            return f"refused: {exc}"

    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(create, sessions))
    assert got.count("same") == 1, got
    assert all("already been used" in g for g in got if g != "same")
    winner = sessions[got.index("same")]
    asyncio.run(first.delete_branch("same"))
    with pytest.raises(BranchError, match="does not exist"):
        asyncio.run(winner.add_items([_user("lost?")]))
    assert not store.history(branch_workspace("race", "same")).exists()


def test_the_session_history_tool_follows_the_current_branch(store: Store) -> None:
    from ledger.integrations.openai_agents import session_history_tool

    session = LedgerSession("tool", store=store)
    tool = session_history_tool(session)  # made on main, before any branch

    def search(query: str) -> list[Any]:
        args = json.dumps({"action": "search", "query": query})
        return list(json.loads(asyncio.run(tool.on_invoke_tool(None, args)))["items"])

    asyncio.run(session.add_items([_user("about owls"), _answer("owls hoot", "m1")]))
    asyncio.run(session.add_items([_user("about herons"), _answer("herons wade", "m2")]))
    assert search("herons")
    asyncio.run(session.create_branch_from_turn(2, "no-herons"))
    assert search("herons") == [] and search("owls")
    asyncio.run(session.switch_to_branch("main"))
    assert search("herons")


_OPS = st.lists(st.one_of(
    st.tuples(st.just("user"), st.sampled_from(["alpha", "beta", "gamma"])),
    st.tuples(st.just("answer"), st.sampled_from(["one", "two"])),
    st.tuples(st.just("turn"), st.sampled_from(["x", "y"])),  # a user message and its answer
    st.tuples(st.just("branch"), st.integers(2, 5)),
    st.tuples(st.just("content"), st.sampled_from(["ALPHA", "gam", "zzz"])),
    st.tuples(st.just("switch"), st.integers(0, 4)),
    st.tuples(st.just("pop"), st.just(0)),
), max_size=14)


async def _random_script(session: Any, ops: list[tuple[str, Any]]) -> list[Any]:
    seen: list[Any] = []
    made: list[str] = ["main"]
    start = [("turn", "alpha"), ("user", "beta"), ("answer", "one"), ("turn", "gamma")]
    for n, (op, arg) in enumerate([*start, *ops]):
        if op == "user":
            await session.add_items([_user(f"{arg} {n}")])
        elif op == "answer":
            await session.add_items([_answer(f"{arg} {n}", f"m{n}")])
        elif op == "turn":
            await session.add_items([_user(f"{arg} {n}"), _answer(f"re {arg}", f"t{n}")])
        elif op == "branch":
            seen.append(await _outcome(session.create_branch_from_turn(arg, f"b{n}")))
            if seen[-1] == f"b{n}":
                made.append(f"b{n}")
        elif op == "content":
            got = await _outcome(session.create_branch_from_content(arg, f"c{n}"))
            seen.append(got)
            if got == f"c{n}":
                made.append(f"c{n}")
        elif op == "switch":
            target = made[arg % len(made)]
            if await session.get_items(branch_id=target):  # the SDK has no empty branches
                await session.switch_to_branch(target)
        else:
            seen.append(await session.pop_item())
        seen.append(await session.get_items())
    seen.append(_branches(await session.list_branches()))
    return seen


@given(ops=_OPS)
def test_random_branch_scripts_match_the_sdk(ops: list[tuple[str, Any]]) -> None:
    """Any script of adds, pops, branches and switches gives what the SDK's
    ``AdvancedSQLiteSession`` gives (memory engine, in-memory SQLite)."""
    peer = AdvancedSQLiteSession(session_id="s", create_tables=True)
    try:
        expected = asyncio.run(_random_script(peer, ops))
    finally:
        peer.close()
    ours = LedgerSession("s", store=Store(f"memory://rand-{uuid.uuid4().hex}"))
    assert asyncio.run(_random_script(ours, ops)) == expected
