"""``RolloverMiddleware``'s messages off the happy path (issue 29): a request
leaves out a call still waiting (e.g. a human-in-the-loop approval), a user
message settles it with an error ``ToolMessage``, and a result that comes
after is plain text -- so every message list the model gets pairs each
``tool_calls`` entry with one ``ToolMessage``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain.agents.middleware", reason="the langchain extra is not installed")

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from ledger import Store
from ledger.integrations.langchain import message_row
from ledger.integrations.langchain_middleware import row_message
from ledger.rollover.conversation import Conversation


def _messages(req: Any) -> list[BaseMessage]:
    return [m for m in map(row_message, req.messages) if m is not None]


def _paired(messages: list[BaseMessage]) -> None:
    waiting: list[str] = []
    for m in messages:
        if isinstance(m, AIMessage):
            assert not waiting, f"calls {waiting} have no ToolMessage"
            waiting = [str(c["id"]) for c in m.tool_calls]
        elif isinstance(m, ToolMessage):
            assert m.tool_call_id in waiting, f"ToolMessage for {m.tool_call_id} has no call"
            waiting.remove(m.tool_call_id)
        else:
            assert not waiting, f"calls {waiting} have no ToolMessage"
    assert not waiting


def test_open_calls_settled_and_late_results_render_as_valid_messages(tmp_path: Path) -> None:
    conv = Conversation.open(Store(tmp_path, durability="off"), "lc", model="gpt-4o",
                             context_limit=4000)
    conv.send([message_row(HumanMessage("deploy, and read the log", id="h1"))])
    conv.record([message_row(AIMessage("", id="a1", tool_calls=[
        {"id": "d", "name": "deploy", "args": {}}, {"id": "r", "name": "read", "args": {}}]))])
    req = conv.send([message_row(ToolMessage("log ok", tool_call_id="r", id="t1"))])
    sent = _messages(req)
    _paired(sent)  # the deploy call waits: left out of the request
    assert [c["id"] for c in sent[1].tool_calls] == ["r"]  # type: ignore[attr-defined]
    req = conv.send([message_row(HumanMessage("never mind", id="h2"))])
    sent = _messages(req)
    _paired(sent)
    settled = [m for m in sent if isinstance(m, ToolMessage) and m.tool_call_id == "d"]
    assert len(settled) == 1 and settled[0].status == "error"
    assert "before the user went on" in str(settled[0].content)
    req = conv.send([message_row(ToolMessage("deployed v2", tool_call_id="d", id="t2"))])
    sent = _messages(req)
    _paired(sent)
    assert isinstance(sent[-1], HumanMessage) and "deployed v2" in str(sent[-1].content)
