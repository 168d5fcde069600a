"""``RolloverMiddleware`` in a real ``langchain.agents.create_agent`` run with a
fake chat model (no network): the window rolls over several times instead of
being summarised, the model never sees the old windows, and it gets a fact
from window 1 back through the ``session_history`` tool."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain.agents", reason="the langchain extra is not installed "
                    "(pip install 'transcript-ledger[langchain]')")
pytest.importorskip("langgraph.checkpoint.base", reason="the langgraph extra is not installed")

from langchain.agents import create_agent
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from ledger import Store
from ledger.integrations.langchain_middleware import RolloverMiddleware
from ledger.integrations.langgraph import LedgerSaver

FACT = "the launch code is ZEBRA-42"


WARNING = "Context budget warning:"


def _last_turn(messages: Sequence[BaseMessage]) -> BaseMessage:
    """The message the model answers: the last one, past the ledger's budget
    warning (appended after the turn that crossed the warning threshold)."""
    turns = [m for m in messages if not str(m.content).startswith(WARNING)]
    return turns[-1]


class ScriptedModel(BaseChatModel):
    """Answers each user message; asked about the code, it searches the
    history, and it answers from what the tool returned. Keeps every request."""

    seen: list[list[BaseMessage]] = []  # noqa: RUF012 (pydantic field default)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedModel:
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        self.seen.append(list(messages))
        last = _last_turn(messages)
        if isinstance(last, ToolMessage):
            items = json.loads(str(last.content))["items"]
            reply = AIMessage("From the history: " + " | ".join(i["text"] for i in items))
        elif "launch code" in str(last.content) and "?" in str(last.content):
            reply = AIMessage("", tool_calls=[{
                "name": "session_history", "id": f"call-{len(self.seen)}",
                "args": {"action": "search", "query": "launch code is"}}])
        else:
            reply = AIMessage(f"noted ({len(self.seen)})")
        return ChatResult(generations=[ChatGeneration(message=reply)])


def test_create_agent_rolls_over_and_retrieves_window_1(tmp_path: Path) -> None:
    store = Store(tmp_path / "windows", durability="off")
    model = ScriptedModel()
    middleware = RolloverMiddleware(store=store, model="gpt-4o", context_limit=1500)
    agent = create_agent(model, tools=[], middleware=[middleware],
                         checkpointer=LedgerSaver(store=Store(tmp_path / "graph",
                                                              durability="off")))
    # (the graph's state in a store of its own: the middleware's holds the windows)
    cfg = {"configurable": {"thread_id": "ops-1"}}
    agent.invoke({"messages": [HumanMessage(f"Please remember: {FACT}.")]}, cfg)
    filler = " ".join(f"status line {i} of the nightly report is green" for i in range(30))
    for turn in range(8):
        agent.invoke({"messages": [HumanMessage(f"report {turn}: {filler}")]}, cfg)
    out = agent.invoke({"messages": [HumanMessage("What was the launch code?")]}, cfg)

    h = store.history("ops-1")
    rollovers = [r for r in h.rows() if r.kind == "reset"
                 and r.data.get("reset", {}).get("reason") == "rollover"]
    assert len(rollovers) >= 3
    # The model was never sent the first window again ...
    asked = model.seen[-2]
    question = _last_turn(asked)
    assert isinstance(question, HumanMessage) and "launch code?" in str(question.content)
    assert all(str(m.content).startswith(WARNING) for m in asked[asked.index(question) + 1:])
    assert not any("ZEBRA-42" in str(m.content) for m in asked)
    assert len(asked) < 8
    # ... yet it got the fact back through session_history, from window 0.
    tool_result = next(m for m in out["messages"] if isinstance(m, ToolMessage))
    found = json.loads(str(tool_result.content))["items"]
    assert any(FACT in i["text"] and i["window"] == 0 for i in found)
    assert FACT in str(out["messages"][-1].content)
    # The agent's own state still holds every message; the store, each once.
    assert len(out["messages"]) == 2 * 10 + 2
    texts = [r.parts[0].get("text") for r in h.rows() if r.kind == "message" and r.parts]
    assert texts.count(f"Please remember: {FACT}.") == 1


def test_middleware_without_a_thread_or_workspace_says_so(tmp_path: Path) -> None:
    agent = create_agent(ScriptedModel(), tools=[],
                         middleware=[RolloverMiddleware(store=Store(tmp_path))])
    with pytest.raises(Exception, match="thread_id"):
        agent.invoke({"messages": [HumanMessage("hi")]})
