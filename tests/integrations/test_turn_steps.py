"""What a turn stores, and when, through the integrations made cheaper for
issue 31: the Agents SDK session's remembered open calls follow every other
writer, the LangChain history's kept messages never leak between reads or
survive a rewrite, and the middleware's answer rides with the next durable
step of the run (the user's input and tool results stored before the model
sees them, the final answer by ``after_agent``)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents", reason="the agents extra is not installed")
pytest.importorskip("langchain.agents", reason="the langchain extra is not installed")

from langchain.agents import create_agent
from langchain.agents.middleware import ModelRequest
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from ledger import Store
from ledger.integrations.langchain import LedgerChatMessageHistory
from ledger.integrations.langchain_middleware import RolloverMiddleware
from ledger.integrations.openai_agents import LedgerSession
from ledger.rollover.conversation import MOVED_ON


def _call(cid: str) -> dict[str, Any]:
    return {"type": "function_call", "call_id": cid, "name": "lookup", "arguments": "{}",
            "id": f"fc_{cid}"}


def _output(cid: str, out: str = "ok") -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": cid, "output": out}


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _outputs(session: LedgerSession) -> list[tuple[str, str]]:
    items = asyncio.run(session.get_items())
    return [(i["call_id"], i["output"]) for i in items
            if i.get("type") == "function_call_output"]


def test_agents_session_settles_a_call_another_writer_left_open(tmp_path: Path) -> None:
    store = Store(tmp_path, durability="off")
    mine, other = LedgerSession("s", store=store), LedgerSession("s", store=store)
    asyncio.run(mine.add_items([_user("hi"), _call("a"), _output("a")]))
    assert asyncio.run(mine.get_items())  # mine now knows the window (no open call)
    asyncio.run(other.add_items([_call("b")]))  # written behind mine's back
    asyncio.run(mine.add_items([_user("next")]))
    assert _outputs(mine) == [("a", "ok"), ("b", MOVED_ON)]


def test_agents_session_does_not_settle_a_call_another_writer_answered(
        tmp_path: Path) -> None:
    store = Store(tmp_path, durability="off")
    mine, other = LedgerSession("s", store=store), LedgerSession("s", store=store)
    asyncio.run(mine.add_items([_user("hi"), _call("a")]))  # mine knows "a" is open
    asyncio.run(other.add_items([_output("a", "done elsewhere")]))
    asyncio.run(mine.add_items([_user("next")]))
    assert _outputs(mine) == [("a", "done elsewhere")]


def test_agents_session_follows_a_rewrite_of_the_window(tmp_path: Path) -> None:
    store = Store(tmp_path, durability="off")
    session = LedgerSession("s", store=store)
    asyncio.run(session.add_items([_user("hi"), _call("a"), _output("a")]))
    asyncio.run(session.get_items())
    asyncio.run(session.pop_item())  # the output leaves the view: "a" is open again
    asyncio.run(session.add_items([_user("next")]))
    assert _outputs(session) == [("a", MOVED_ON)]


def test_own_batches_keep_open_calls_known_across_turns(tmp_path: Path) -> None:
    session = LedgerSession("s", store=Store(tmp_path, durability="off"))
    asyncio.run(session.add_items([_user("one"), _call("a")]))
    asyncio.run(session.add_items([_call("b"), _output("b")]))  # no user: nothing settled
    asyncio.run(session.add_items([_user("two")]))
    asyncio.run(session.add_items([_user("three")]))  # nothing is open any more
    assert _outputs(session) == [("b", "ok"), ("a", MOVED_ON)]


def test_langchain_history_hands_out_new_messages_each_read(tmp_path: Path) -> None:
    store = Store(tmp_path, durability="off")
    history = LedgerChatMessageHistory("lc", store=store)
    history.add_messages([HumanMessage("hello", id="h1"), AIMessage("hi there", id="a1")])
    first = history.messages
    first[0].content = "changed by the caller"
    again = history.messages
    assert [m.content for m in again] == ["hello", "hi there"]
    assert again[0] is not first[0]
    # A rewrite elsewhere changes the row's stored line: never served from memory.
    store.history("lc").reject(store.history("lc").provider_view()[-1].seq)
    assert [m.content for m in history.messages] == ["hello"]
    assert [m.content for m in LedgerChatMessageHistory("lc", store=store).messages] == [
        "hello"]


def _batches(store: Store, ws: str) -> list[list[str]]:
    """The batches of ``ws`` as lists of the roles of their rows."""
    out: dict[str, list[str]] = {}
    for row in store.history(ws).rows():
        out.setdefault(row.batch["id"], []).append(row.role)
    return list(out.values())


@tool
def lookup(query: str) -> str:
    """Look something up."""
    return f"found {query}"


def test_middleware_answer_rides_with_the_next_step_and_the_end_stores_the_rest(
        tmp_path: Path) -> None:
    store = Store(tmp_path / "w", durability="off")
    middleware = RolloverMiddleware(store=store, workspace="m", context_limit=8000)

    class Local(FakeMessagesListChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Local:
            return self

    model = Local(responses=[
        AIMessage("", tool_calls=[{"name": "lookup", "args": {"query": "x"}, "id": "c1"}]),
        AIMessage("It is x."),
    ])
    agent = create_agent(model, tools=[lookup], middleware=[middleware])
    out = agent.invoke({"messages": [HumanMessage("what is x?")]})
    assert out["messages"][-1].content == "It is x."
    # The user's message before the first call; the call with its result before
    # the second (one batch, where the answer used to be a batch of its own);
    # the final answer when the agent ended.
    assert _batches(store, "m") == [["user"], ["assistant", "tool"], ["assistant"]]
    view = store.history("m").provider_view()
    assert [r.role for r in view] == ["user", "assistant", "tool", "assistant"]
    # The next run stores nothing twice.
    model.responses = [AIMessage("Still x.")]
    model.i = 0
    agent.invoke({"messages": [*out["messages"], HumanMessage("sure?")]})
    assert [r.role for r in store.history("m").provider_view()] == [
        "user", "assistant", "tool", "assistant", "user", "assistant"]


def test_middleware_stores_an_unflushed_answer_with_the_next_call(tmp_path: Path) -> None:
    """A run that stopped before after_agent (an interrupt, a crash): the
    answer is in the agent's state, and the next model call stores it before
    the new input, in order."""
    store = Store(tmp_path, durability="off")
    middleware = RolloverMiddleware(store=store, workspace="m", context_limit=8000)
    first = [HumanMessage("hello")]
    answer = AIMessage("hi")
    middleware.wrap_model_call(ModelRequest(model=None, messages=list(first)),  # type: ignore[arg-type]
                               lambda r: answer)
    assert [r.role for r in store.history("m").provider_view()] == ["user"]
    later = [*first, answer, HumanMessage("again")]
    middleware.wrap_model_call(ModelRequest(model=None, messages=later),  # type: ignore[arg-type]
                               lambda r: AIMessage("yes"))
    assert [r.role for r in store.history("m").provider_view()] == [
        "user", "assistant", "user"]
    assert _batches(store, "m") == [["user"], ["assistant", "user"]]


def test_middleware_tool_result_is_stored_before_the_model_sees_it(tmp_path: Path) -> None:
    store = Store(tmp_path, durability="off")
    middleware = RolloverMiddleware(store=store, workspace="m", context_limit=8000)
    call = AIMessage("", tool_calls=[{"name": "lookup", "args": {}, "id": "c1"}])
    seen: list[list[str]] = []

    def model(request: Any) -> AIMessage:
        seen.append([r.role for r in store.history("m").provider_view()])
        return AIMessage("done")

    messages = [HumanMessage("go"), call, ToolMessage("out", tool_call_id="c1")]
    middleware.wrap_model_call(ModelRequest(model=None, messages=messages),  # type: ignore[arg-type]
                               model)
    assert seen == [["user", "assistant", "tool"]]
