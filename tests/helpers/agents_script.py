"""A local Agents SDK model with scripted replies, and a runner script.

``ScriptedModel`` implements the SDK's ``Model`` interface: each call pops
the next scripted output and records the input the SDK sent, so a test sees
exactly what the session gave the model. Run as a script
(``python tests/helpers/agents_script.py ROOT SESSION QUESTION REPLY [CONTEXT_LIMIT]``)
it reopens the session in a fresh process, runs one ``Runner.run`` turn (with
``CONTEXT_LIMIT``: under the session's budget, ``run_config()``) and prints
the input the model received as JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agents import Agent, ModelResponse, Runner, Usage, function_tool, set_tracing_disabled
from agents.models.interface import Model
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

set_tracing_disabled(True)


def message(text: str, msg_id: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id=msg_id, type="message", role="assistant", status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


def call(name: str, arguments: str, call_id: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        id=f"fc_{call_id}", type="function_call", call_id=call_id, name=name,
        arguments=arguments, status="completed",
    )


class ScriptedModel(Model):
    """Returns ``outputs`` in order, one list of output items per model call.

    Each call records what the model received: ``inputs`` (the input items),
    ``instructions`` (the system instructions) and ``tools`` (each advertised
    function tool as ``{"name", "description", "parameters"}``). With
    ``response_id`` the responses carry ids (``resp_1``, ``resp_2``, ...), which
    makes the SDK call ``run_compaction`` on compaction-aware sessions.
    """

    def __init__(self, outputs: list[list[Any]], *, response_id: bool = False) -> None:
        self.outputs = list(outputs)
        self.inputs: list[Any] = []
        self.instructions: list[str | None] = []
        self.tools: list[list[dict[str, Any]]] = []
        self.response_id = response_id

    async def get_response(self, system_instructions: Any, input: Any, model_settings: Any,
                           tools: Any, output_schema: Any, handoffs: Any, tracing: Any,
                           **kwargs: Any) -> ModelResponse:
        self.inputs.append(json.loads(json.dumps(input, default=str)))
        self.instructions.append(system_instructions)
        self.tools.append([
            {"name": t.name, "description": t.description, "parameters": t.params_json_schema}
            for t in tools if hasattr(t, "params_json_schema")
        ])
        if not self.outputs:
            raise AssertionError("the scripted model ran out of replies")
        rid = f"resp_{len(self.inputs)}" if self.response_id else None
        return ModelResponse(output=self.outputs.pop(0), usage=Usage(), response_id=rid)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the scripted model does not stream")


class StreamingModel(ScriptedModel):
    """The scripted model answering through the SDK's streaming interface."""

    async def stream_response(self, system_instructions: Any, input: Any,  # type: ignore[override]
                              *args: Any, **kwargs: Any) -> Any:
        reply = await self.get_response(system_instructions, input, *args, **kwargs)
        response = Response(id=f"resp_{len(self.inputs)}", created_at=0, model="scripted",
                            object="response", output=reply.output, parallel_tool_calls=False,
                            tool_choice="auto", tools=[])
        yield ResponseCompletedEvent(type="response.completed", response=response,
                                     sequence_number=0)


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def agent(model: ScriptedModel) -> Agent[Any]:
    return Agent(name="assistant", instructions="Be brief.", model=model, tools=[get_weather])


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from ledger import Store
    from ledger.integrations.openai_agents import LedgerSession

    root, session_id, question, reply, *budget = argv
    model = ScriptedModel([[message(reply, "msg_child")]])
    if budget:  # a context_limit: run with the session's budget
        from ledger.integrations.openai_agents import session_history_tool

        session = LedgerSession(session_id, store=Store(root, durability="off"),
                                context_limit=int(budget[0]))
        child = agent(model)
        child.tools.append(session_history_tool(session))
        result = asyncio.run(Runner.run(child, question, session=session,
                                        run_config=session.run_config()))
    else:
        session = LedgerSession(session_id, store=Store(root, durability="off"))
        result = asyncio.run(Runner.run(agent(model), question, session=session))
    print(json.dumps({"final": result.final_output, "input": model.inputs[0]}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
