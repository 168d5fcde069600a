"""The provider request a :class:`~ledger.rollover.conversation.Conversation`
returns: canonical rows plus each API's request body (``ledger.adapters``),
and the neutral tool schema it advertises."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ledger.adapters import to_request
from ledger.rollover.engine import Decision, ProviderRequest

__all__ = ["Request", "tool_schema"]


def tool_schema(name: str, description: str, parameters: Mapping[str, Any]) -> dict[str, Any]:
    """A tool in the conversation's neutral form (rendered per API by :class:`Request`)."""
    return {"name": name, "description": description, "parameters": dict(parameters)}


@dataclass(frozen=True)
class Request:
    """The next provider request: what the model is sent now.

    ``messages`` are the canonical rows of the provider view (lead-in, carried
    rows and warnings included), ``system`` the system text after middleware
    and memory, ``tools`` the advertised schemas (neutral form: ``name``,
    ``description``, ``parameters``). ``tokens``/``exact`` is its count, within
    ``ceiling``. ``decision`` is the engine's verdict for this send;
    ``rolled_over`` / ``warned`` say whether it opened window ``window`` /
    appended a budget warning; ``blocked`` names why a due rollover waits.
    """

    model: str
    system: str
    tools: tuple[Mapping[str, Any], ...]
    messages: tuple[dict[str, Any], ...]
    tokens: int
    exact: bool
    ceiling: int
    window: int
    decision: Decision
    rolled_over: bool = False
    warned: bool = False
    carried: int = 0
    blocked: str | None = None
    provider: ProviderRequest | None = field(default=None, repr=False, compare=False)

    def rows(self) -> list[dict[str, Any]]:
        """The system text as a leading system row, then ``messages``."""
        head = [{"kind": "message", "role": "system", "parts": [{"type": "text",
                                                                  "text": self.system}]}]
        return [*(head if self.system else []), *self.messages]

    def openai_chat(self, **extra: Any) -> dict[str, Any]:
        """The Chat Completions request body (``ledger.adapters.openai_chat``)."""
        tools = [{"type": "function", "function": dict(t)} for t in self.tools]
        return to_request("openai-chat", self.rows(), model=self.model,
                          **({"tools": tools} if tools else {}), **extra)

    def openai_responses(self, **extra: Any) -> dict[str, Any]:
        """The Responses request body (``ledger.adapters.openai_responses``)."""
        tools = [{"type": "function", **t} for t in self.tools]
        return to_request("openai-responses", self.rows(), model=self.model,
                          **({"tools": tools} if tools else {}), **extra)

    def anthropic(self, **extra: Any) -> dict[str, Any]:
        """The Messages request body (``ledger.adapters.anthropic``).

        A window that starts with a carried assistant tool call (a rollover at
        a tool step) gets its lead-in as the first user message, since some
        Messages endpoints (Bedrock's) refuse an assistant first message."""
        tools = [
            {"name": t["name"], "description": t.get("description", ""),
             "input_schema": t.get("parameters", {"type": "object"})}
            for t in self.tools
        ]
        rows = self.rows()
        talk = [i for i, r in enumerate(rows) if r.get("role") in ("user", "assistant", "tool")]
        if talk and rows[talk[0]].get("role") == "assistant":
            leads = [i for i in range(talk[0]) if rows[i].get("kind") == "lead_in"]
            if leads:
                lead = rows.pop(leads[-1])
                rows.insert(talk[0] - 1, {**lead, "kind": "message", "role": "user"})
        return to_request("anthropic", rows, model=self.model,
                          **({"tools": tools} if tools else {}), **extra)
