"""``RolloverMiddleware`` in the modes production agents run (issue 29, cases
6 and 7): ``ainvoke``/``astream`` as LangGraph servers run agents, an agent
with its own system prompt and tools whose every model request must fit the
budget, and the budget warning placed where Anthropic's formatter accepts it.
A scripted chat model (no network) keeps every request it gets; each one is
counted with the reference rules over the OpenAI body LangChain would send."""

from __future__ import annotations

import asyncio
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
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    convert_to_openai_messages,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool

from ledger import Store
from ledger.core.errors import LedgerError
from ledger.integrations.langchain_middleware import RolloverMiddleware
from ledger.integrations.langgraph import LedgerSaver
from tests.helpers.cookbook import chat_body_tokens

FACT = "the launch code is ZEBRA-42"
WARNING = "Context budget warning:"


@tool
def lookup(topic: str) -> str:
    """Look a topic up in the operations handbook and return the section."""
    return f"handbook section on {topic}: " + " ".join(
        f"step {i} of the {topic} procedure is to check gauge {i}" for i in range(25))


@tool
def page_oncall(team: str, severity: int) -> str:
    """Page the on-call engineer of a team with a severity from 1 to 4."""
    return f"paged {team} at severity {severity}"


SEEN: list[list[BaseMessage]] = []
TOOLS: list[dict[str, Any]] = []
FORMATTED: list[Any] = []


class Recorder(BaseChatModel):
    """Answers from a script and keeps every request: its messages, the tool
    schemas bound, and what Anthropic's formatter made of it (or its error)."""

    @property
    def _llm_type(self) -> str:
        return "recorder"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Recorder:
        TOOLS[:] = [convert_to_openai_tool(t) for t in tools]
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        SEEN.append(list(messages))
        FORMATTED.append(_anthropic_format(messages))
        last = messages[-1]
        n = len(SEEN)
        if isinstance(last, ToolMessage) and last.name == "session_history":
            items = json.loads(str(last.content))["items"]
            reply = AIMessage("From the history: " + " | ".join(i["text"] for i in items))
        elif isinstance(last, ToolMessage):
            reply = AIMessage(f"done ({n})")
        elif "launch code" in str(last.content) and "?" in str(last.content):
            reply = AIMessage("", tool_calls=[{"name": "session_history", "id": f"call_{n}",
                                               "args": {"action": "search",
                                                        "query": "launch code is"}}])
        elif "look up" in str(last.content):
            reply = AIMessage("", tool_calls=[{"name": "lookup", "id": f"call_{n}",
                                               "args": {"topic": f"topic {n}"}}])
        else:
            reply = AIMessage(f"noted ({n})")
        return ChatResult(generations=[ChatGeneration(message=reply)])


def _anthropic_format(messages: list[BaseMessage]) -> Any:
    try:
        from langchain_anthropic.chat_models import _format_messages
    except ImportError:
        return None
    try:
        return _format_messages(messages, model="claude-sonnet-4-5")
    except Exception as exc:  # what the formatter refuses, kept for the assertion
        return exc


def _body(messages: list[BaseMessage], tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The Chat Completions body of one model call, as LangChain renders it."""
    return {"messages": convert_to_openai_messages(messages), "tools": tools}


def _agent(tmp_path: Path, middleware: RolloverMiddleware, system: str | None = None) -> Any:
    SEEN.clear()
    FORMATTED.clear()
    return create_agent(Recorder(), tools=[lookup, page_oncall], system_prompt=system,
                        middleware=[middleware],
                        checkpointer=LedgerSaver(store=Store(tmp_path / "graph",
                                                             durability="off")))


FILLER = " ".join(f"status line {i} of the nightly report is green" for i in range(30))


def _turns(n: int) -> list[str]:
    return [f"Please remember: {FACT}.",
            *[f"report {t}: {FILLER}" if t % 2 else f"look up the runbook {t}"
              for t in range(n)],
            "What was the launch code?"]


def _rollovers(store: Store, ws: str) -> int:
    return sum(1 for r in store.history(ws).rows()
               if r.kind == "reset" and r.data.get("reset", {}).get("reason") == "rollover")


def _check_requests(limit: int) -> None:
    """Every request the model got fits the budget, counted by the reference
    rules over LangChain's own OpenAI body; none has a system message past the
    first; Anthropic's formatter takes each and starts with a user message."""
    assert SEEN
    for messages, formatted in zip(SEEN, FORMATTED, strict=True):
        tokens = chat_body_tokens(_body(messages, TOOLS))
        assert tokens <= limit, (tokens, limit)
        assert not any(isinstance(m, SystemMessage) for m in messages[1:])
        if formatted is not None:
            assert not isinstance(formatted, Exception), formatted
            assert formatted[1][0]["role"] == "user"


def test_ainvoke_and_astream_roll_over_and_retrieve(tmp_path: Path) -> None:
    """Case 6: the async entry points run the same middleware (they raised
    NotImplementedError before the model was called)."""
    store = Store(tmp_path / "windows", durability="off")
    middleware = RolloverMiddleware(store=store, model="gpt-4o", context_limit=1800)
    agent = _agent(tmp_path, middleware)
    cfg = {"configurable": {"thread_id": "async-1"}}

    async def run() -> Any:
        out = None
        for i, text in enumerate(_turns(8)):
            if i % 2:
                out = await agent.ainvoke({"messages": [HumanMessage(text)]}, cfg)
            else:
                async for chunk in agent.astream({"messages": [HumanMessage(text)]}, cfg,
                                                 stream_mode="values"):
                    out = chunk
        return out

    out = asyncio.run(run())
    assert _rollovers(store, "async-1") >= 2
    assert FACT in str(out["messages"][-1].content)
    found = json.loads(str(next(m for m in out["messages"] if isinstance(m, ToolMessage)
                                and m.name == "session_history").content))["items"]
    assert any(FACT in i["text"] and i["window"] == 0 for i in found)
    _check_requests(1800)


def test_sync_and_async_runs_store_the_same_rows(tmp_path: Path) -> None:
    """One implementation: the same script through invoke and ainvoke stores
    the same rows and sends the model the same requests."""
    runs: dict[str, Any] = {}
    for mode in ("sync", "async"):
        store = Store(tmp_path / mode, durability="off")
        agent = _agent(tmp_path / f"g-{mode}", RolloverMiddleware(
            store=store, model="gpt-4o", context_limit=1800))
        cfg = {"configurable": {"thread_id": "t"}}
        for text in _turns(6):
            msg = {"messages": [HumanMessage(text)]}
            if mode == "sync":
                agent.invoke(msg, cfg)
            else:
                asyncio.run(agent.ainvoke(msg, cfg))
        rows = [(r.kind, r.role, [p.get("type") for p in r.parts])
                for r in store.history("t").rows()]
        runs[mode] = (rows, [[type(m).__name__ for m in s] for s in SEEN])
    assert runs["sync"] == runs["async"]


def test_the_agents_system_prompt_and_tools_are_counted(tmp_path: Path) -> None:
    """Case 7: a 1,657-token system prompt against a 4,000-token budget: the
    model got 4,366 tokens when only the messages were counted. Now every
    request, system prompt and tool schemas included, fits."""
    system = "You are the operations agent. " + " ".join(
        f"Rule {i}: confirm the change window before touching host h{i}." for i in range(118))
    assert 1600 < chat_body_tokens({"messages": [{"role": "system", "content": system}]}) < 1700
    store = Store(tmp_path / "windows", durability="off")
    middleware = RolloverMiddleware(store=store, model="gpt-4o", context_limit=4000)
    agent = _agent(tmp_path, middleware, system=system)
    cfg = {"configurable": {"thread_id": "sys-1"}}
    for text in _turns(10):
        agent.invoke({"messages": [HumanMessage(text)]}, cfg)
    assert _rollovers(store, "sys-1") >= 1
    assert all(isinstance(s[0], SystemMessage) and s[0].text.startswith(system)
               for s in SEEN)
    _check_requests(4000)
    # the ledger's count of the request is the reference count (within 2%)
    conv = middleware.conversation("sys-1")
    request = conv.request()
    assert request.exact


def test_a_first_call_over_the_budget_is_refused_not_sent(tmp_path: Path) -> None:
    """Case 7's first call (2,163 tokens against context_limit=2000, the
    system prompt and tools uncounted): refused before the model is called."""
    system = "You are the operations agent. " + " ".join(
        f"Rule {i}: confirm the change window before touching host h{i}." for i in range(40))
    store = Store(tmp_path / "windows", durability="off")
    agent = _agent(tmp_path, RolloverMiddleware(store=store, model="gpt-4o",
                                                context_limit=2000), system=system)
    big = " ".join(f"log line {i}: service s{i} restarted cleanly" for i in range(120))
    messages = [{"role": "system", "content": system}, {"role": "user", "content": big}]
    alone = chat_body_tokens({"messages": messages[1:]})
    whole = chat_body_tokens({"messages": messages, "tools": TOOLS})
    assert alone < 2000 * 0.95 < whole  # fits only when the system prompt is left out
    with pytest.raises(LedgerError, match="fresh window"):
        agent.invoke({"messages": [HumanMessage(big)]}, {"configurable": {"thread_id": "f"}})
    assert SEEN == []


def test_the_budget_warning_reaches_the_model_in_the_system_prompt(tmp_path: Path) -> None:
    """Case 7: the warning is appended to the system prompt of that call, never
    a system message in the middle of the list; Anthropic's formatter takes
    every request (it refused 2 of 4 with "multiple non-consecutive system
    messages")."""
    pytest.importorskip("langchain_anthropic", reason="langchain-anthropic is not installed")
    store = Store(tmp_path / "windows", durability="off")
    middleware = RolloverMiddleware(store=store, model="gpt-4o", context_limit=2500)
    agent = _agent(tmp_path, middleware, system="You are terse.")
    cfg = {"configurable": {"thread_id": "warn-1"}}
    for text in _turns(10):
        agent.invoke({"messages": [HumanMessage(text)]}, cfg)
    warned = [s for s in SEEN if WARNING in s[0].text]
    assert warned, "the budget warning was never sent"
    assert all(s[0].text.startswith("You are terse.") for s in warned)
    assert not any(WARNING in str(m.content) for s in SEEN for m in s[1:])
    assert _rollovers(store, "warn-1") >= 1
    # a rollover at a tool step: the carried call follows the lead-in, sent first
    carried = [s for s in SEEN if len(s) > 2 and isinstance(s[2], AIMessage)
               and s[2].tool_calls and isinstance(s[1], HumanMessage)
               and "session_history" in str(s[1].content)]
    assert carried, "no rollover at a tool step was exercised"
    _check_requests(2500)
