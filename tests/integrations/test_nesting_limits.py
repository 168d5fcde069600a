"""A tool output nested 100,000 deep (issue 30, case 10) is refused with a
``LedgerError`` (``InvalidRow``) by every runtime entry point, never a bare
``RecursionError``, and nothing is stored: ``Conversation``, the Agents SDK
session, the LangChain history and middleware. The engines' appends refuse it
the same way (tests/contract/inputs.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents", reason="the agents extra is not installed")
pytest.importorskip("langchain.agents", reason="the langchain extra is not installed")

from langchain.agents.middleware.types import ModelRequest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from ledger import InvalidRow, LedgerError, Store
from ledger.integrations.langchain import LedgerChatMessageHistory
from ledger.integrations.langchain_middleware import RolloverMiddleware
from ledger.integrations.openai_agents import LedgerSession
from ledger.rollover.conversation import Conversation
from tests.helpers import msg

DEPTH = 100_000
DEEP_MESSAGE = "nested deeper than 256 levels of arrays and objects"


def _deep() -> Any:
    value: Any = "bottom"
    for _ in range(DEPTH):
        value = [value]
    return value


def _refused(fn: Any) -> InvalidRow:
    try:
        fn()
    except RecursionError as exc:  # pragma: no cover - the failure this test is about
        raise AssertionError("a bare RecursionError escaped") from exc
    except LedgerError as exc:
        assert isinstance(exc, InvalidRow) and DEEP_MESSAGE in str(exc), exc
        return exc
    raise AssertionError("accepted")


@pytest.mark.parametrize("root", ["files", "memory://"])
def test_conversation_refuses_it_on_record_and_send(tmp_path: Path, root: str) -> None:
    store = Store(str(tmp_path) if root == "files" else root, durability="off")
    conv = Conversation.open(store, "c1", model="gpt-4o")
    tool = {"role": "tool", "parts": [{"type": "tool_result", "id": "c1", "output": _deep()}]}
    err = _refused(lambda: conv.record(tool))
    assert err.index == 0
    err = _refused(lambda: conv.send([msg("run the tool"), tool]))
    assert err.index == 1
    assert "c1" not in store.workspaces()
    conv.send(msg("still usable"))
    assert [r.seq for r in conv.history.rows()] != []


def test_the_agents_session_refuses_it(tmp_path: Path) -> None:
    store = Store(tmp_path, durability="off")
    session = LedgerSession("a1", store=store)
    item = {"type": "function_call_output", "call_id": "c1", "output": _deep()}
    _refused(lambda: asyncio.run(session.add_items([{"role": "user", "content": "hi"}, item])))
    _refused(lambda: session.request_items("", {}, [{"role": "user", "content": "hi"}, item]))
    assert "a1" not in store.workspaces()


def test_the_langchain_history_and_middleware_refuse_it(tmp_path: Path) -> None:
    store = Store(tmp_path, durability="off")
    deep_tool = ToolMessage(content=[{"type": "text", "text": "out", "data": _deep()}],
                            tool_call_id="c1")
    history = LedgerChatMessageHistory("s1", store=store)
    _refused(lambda: history.add_messages([HumanMessage("hi"), deep_tool]))

    middleware = RolloverMiddleware(store=store, workspace="m1", model="gpt-4o")
    answered: list[Any] = []

    def handler(request: ModelRequest) -> AIMessage:
        answered.append(request)
        return AIMessage("done")

    request = ModelRequest(model=None, messages=[HumanMessage("hi"), deep_tool])  # type: ignore[arg-type]
    _refused(lambda: middleware.wrap_model_call(request, handler))
    assert answered == []  # the model was never called
    assert store.workspaces() == []
