"""The LangChain chat history (extra ``langchain``): round trips of every
message type, the behaviours of ``BaseChatMessageHistory`` checked against
LangChain's own ``InMemoryChatMessageHistory``, a ``RunnableWithMessageHistory``
chain with a fake chat model, and langchain-tests' standard tool tests for
``session_history``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain_core", reason="the langchain extra is not installed "
                    "(pip install 'transcript-ledger[langchain]')")

from langchain_core.chat_history import InMemoryChatMessageHistory
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import RunnableLambda
from langchain_core.runnables.history import RunnableWithMessageHistory

from ledger import InvalidWorkspace, Store
from ledger.integrations.langchain import (
    LedgerChatMessageHistory,
    message_copy,
    session_history_tool,
)

# LangChain 1.6.4 deprecated its chat-history classes and RunnableWithMessageHistory in
# favour of LangGraph persistence; they still ship and are what the issue asks for.
pytestmark = pytest.mark.filterwarnings("ignore::langchain_core._api.LangChainDeprecationWarning")


def _history(root: Path, sid: str = "chat-1") -> LedgerChatMessageHistory:
    return LedgerChatMessageHistory(sid, store=Store(root, durability="off"))


def _conversation() -> list[BaseMessage]:
    return [
        SystemMessage("You are terse.", id="sys-1", additional_kwargs={"cache": "x"}),
        HumanMessage("Weather in Paris?", id="h-1", name="ana",
                     additional_kwargs={"attachments": [1, "two", {"3": None}]}),
        AIMessage("", id="ai-1", tool_calls=[
            {"name": "get_weather", "args": {"city": "Paris", "days": [1, 2]}, "id": "call-1"}],
            response_metadata={"model_name": "fake", "finish_reason": "tool_calls"},
            usage_metadata={"input_tokens": 5, "output_tokens": 2, "total_tokens": 7}),
        ToolMessage("sunny", tool_call_id="call-1", id="t-1", name="get_weather",
                    artifact={"raw": [1]}, status="success"),
        ToolMessage([{"type": "text", "text": "no data for Lyon"}], tool_call_id="call-2",
                    id="t-2", status="error"),
        AIMessage([{"type": "text", "text": "Sunny."},
                   {"type": "image_url", "image_url": {"url": "https://example.invalid/a"}}],
                  id="ai-2", additional_kwargs={"refusal": None}),
        HumanMessage("é \u2028 \"quoted\" \\ back"),
    ]


def test_messages_round_trip_with_ids_kwargs_and_tool_calls(tmp_path: Path) -> None:
    msgs = _conversation()
    _history(tmp_path).add_messages(msgs)
    back = _history(tmp_path).messages  # a fresh store reads it from disk
    assert back == msgs
    assert [type(m) for m in back] == [type(m) for m in msgs]
    assert back[2].tool_calls[0]["args"] == {"city": "Paris", "days": [1, 2]}
    assert back[4].status == "error" and back[3].artifact == {"raw": [1]}


def _script(history: Any) -> list[Any]:
    seen: list[Any] = [list(history.messages)]
    history.add_user_message("hi")
    history.add_ai_message("hello")
    history.add_messages([HumanMessage("a", id="1"), AIMessage("b", id="2")])
    history.add_message(SystemMessage("s"))
    seen.append(list(history.messages))
    seen.append(str(history))
    history.clear()
    seen.append(list(history.messages))
    history.add_messages([HumanMessage("after")])
    seen.append(list(asyncio.run(history.aget_messages())))
    asyncio.run(history.aadd_messages([AIMessage("async")]))
    seen.append(list(history.messages))
    asyncio.run(history.aclear())
    seen.append(list(history.messages))
    return seen


def test_behaviours_match_langchains_in_memory_history(tmp_path: Path) -> None:
    expected = _script(InMemoryChatMessageHistory())
    assert len(expected[1]) == 5 and expected[3] == []  # the oracle is not vacuous
    assert _script(_history(tmp_path)) == expected


def test_add_messages_is_one_batch_and_clear_is_a_privacy_floor(tmp_path: Path) -> None:
    h = _history(tmp_path)
    h.add_messages([HumanMessage("my pin is 4711"), AIMessage("noted")])
    rows = list(h.history.rows())
    assert [r.batch["n"] for r in rows] == [2, 2] and len({r.batch["id"] for r in rows}) == 1
    h.clear()
    assert h.messages == []
    tool = session_history_tool(h)
    assert json.loads(tool.invoke({"action": "search", "query": "4711"}))["items"] == []
    assert any("4711" in json.dumps(r.to_dict()) for r in h.history.rows())  # retained
    assert h.delete() is True and h.messages == []


def test_a_rolled_over_window_starts_with_its_lead_in(tmp_path: Path) -> None:
    h = _history(tmp_path)
    h.add_messages([HumanMessage("the code word is heron")])
    h.history.rollover([{"role": "user", "parts": [{"type": "text", "text": "go on"}]}])
    first, second = h.messages
    assert isinstance(first, SystemMessage) and "session_history" in first.content
    assert isinstance(second, HumanMessage) and second.content == "go on"
    found = json.loads(session_history_tool(h).invoke({"action": "search", "query": "heron"}))
    assert [i["text"] for i in found["items"]] == ["the code word is heron"]
    # several phrasings reach the tool as a list (ranked, fused)
    fused = json.loads(session_history_tool(h).invoke(
        {"action": "search", "query": ["the code word", "which bird"]}))
    assert [i["text"] for i in fused["items"]] == ["the code word is heron"]


def test_runnable_with_message_history_over_several_turns(tmp_path: Path) -> None:
    store = Store(tmp_path, durability="off")
    prompts: list[list[BaseMessage]] = []

    def record(value: Any) -> Any:
        prompts.append(value.to_messages())
        return value

    prompt = ChatPromptTemplate.from_messages([
        ("system", "Be brief."), MessagesPlaceholder("history"), ("human", "{input}")])
    model = FakeListChatModel(responses=["Paris is sunny.", "Rome is cloudy.", "You asked twice."])
    chain = RunnableWithMessageHistory(
        prompt | RunnableLambda(record) | model,
        lambda sid: LedgerChatMessageHistory(sid, store=store),
        input_messages_key="input", history_messages_key="history",
    )
    config = {"configurable": {"session_id": "lc-1"}}
    answers = [chain.invoke({"input": q}, config=config).content
               for q in ("Paris?", "Rome?", "How many questions?")]
    assert answers == ["Paris is sunny.", "Rome is cloudy.", "You asked twice."]
    assert [m.content for m in prompts[2]] == [
        "Be brief.", "Paris?", "Paris is sunny.", "Rome?", "Rome is cloudy.",
        "How many questions?"]
    stored = LedgerChatMessageHistory("lc-1", store=Store(tmp_path)).messages
    assert [(m.type, m.content) for m in stored] == [
        ("human", "Paris?"), ("ai", "Paris is sunny."), ("human", "Rome?"),
        ("ai", "Rome is cloudy."), ("human", "How many questions?"),
        ("ai", "You asked twice.")]


def test_bad_session_id_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidWorkspace):
        _history(tmp_path, "../escape")


try:
    from langchain_tests.unit_tests import ToolsUnitTests
except ImportError:  # langchain-tests is a test tool, not part of the extra
    ToolsUnitTests = None


if ToolsUnitTests is not None:

    class TestSessionHistoryToolStandard(ToolsUnitTests):
        """langchain-tests' own unit tests for a tool, run on session_history."""

        @pytest.fixture(autouse=True)
        def _root(self, tmp_path: Path) -> None:
            type(self).root = tmp_path

        @property
        def tool_constructor(self) -> Any:
            h = LedgerChatMessageHistory("tools", store=Store(self.root, durability="off"))
            h.add_messages([HumanMessage("a searchable line")])
            return session_history_tool(h)

        @property
        def tool_invoke_params_example(self) -> dict[str, Any]:
            return {"action": "search", "query": "searchable"}


def test_a_row_rewritten_in_place_is_rebuilt_and_reads_hand_out_copies(tmp_path: Path) -> None:
    """The messages kept between reads are served again only for the very
    line they were built from: after a truncation and a new message at the
    same place, and after a reject that moves every later row, each read
    holds what is stored now. A message changed by the caller leaves the next
    read as stored."""
    history = LedgerChatMessageHistory("s", store=Store(tmp_path))
    for text in ("first", "second", "third"):
        history.add_messages([HumanMessage(text)])
    assert [m.content for m in history.messages] == ["first", "second", "third"]
    rows = history.history.window_rows()
    history.history.truncate_after(rows[0].seq)
    history.add_messages([AIMessage("replaced")])
    assert [(m.type, m.content) for m in history.messages] == [("human", "first"),
                                                                ("ai", "replaced")]
    history.add_messages([HumanMessage("fourth")])
    history.history.reject(history.history.window_rows()[0].seq)
    got = history.messages
    assert [(m.type, m.content) for m in got] == [("ai", "replaced"), ("human", "fourth")]
    got[0].content = "changed by the caller"
    assert [m.content for m in history.messages] == ["replaced", "fourth"]


class _WithPrivate(HumanMessage):
    _note: str = "kept"


@pytest.mark.parametrize("message", [
    HumanMessage("hi", id="h1", name="ann"),
    AIMessage("", tool_calls=[{"name": "bash", "args": {"cmd": "ls"}, "id": "c1"}],
              response_metadata={"model": "m"}, additional_kwargs={"k": [1, 2]}),
    ToolMessage("out", tool_call_id="c1", status="error", artifact={"a": 1}),
    SystemMessage("sys", extra_field="kept as extra"),
    _WithPrivate("private"),
], ids=["human", "ai-call", "tool", "system-extra", "private"])
def test_message_copy_is_model_copy_and_its_own(message: BaseMessage) -> None:
    """The copies a read hands out equal pydantic's own shallow copy (type,
    fields, fields set, extras, private attributes), and what a caller
    reassigns or adds on one leaves the kept message as it was."""
    copy, expected = message_copy(message), message.model_copy()
    assert copy is not message and type(copy) is type(message)
    assert copy == expected and copy.model_dump() == message.model_dump()
    assert copy.model_fields_set == expected.model_fields_set
    assert copy.__pydantic_extra__ == expected.__pydantic_extra__
    assert copy.__pydantic_private__ == expected.__pydantic_private__
    before, fields_set = message.model_dump(), set(message.model_fields_set)
    copy.content = "changed by the caller"
    copy.id = "other"
    if copy.__pydantic_extra__ is not None:
        copy.added_by_caller = 1
    assert message.model_dump() == before
    assert message.model_fields_set == fields_set
    assert message.__pydantic_extra__ is None or "added_by_caller" not in message.__pydantic_extra__
