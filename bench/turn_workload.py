"""The turn both framework benches replay (``bench.integrations_bench``: time
per turn; ``bench.turn_costs``: disk work per turn): three Responses items
(or LangChain messages) of about 1.9 KiB, and histories cut into windows of
50 turns. A leaf, so neither bench imports the other for it.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from typing import Any

MIB = 1 << 20
TURNS_PER_WINDOW = 50

_words = random.Random(14)
_VOCAB = ["".join(_words.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(_words.randint(2, 9)))
          for _ in range(2000)]
_LENGTHS = [_words.randint(40, 90) for _ in range(64)] + [_words.randint(150, 230)
                                                         for _ in range(64)]
_TEXTS = [" ".join(_words.choice(_VOCAB) for _ in range(n)) for n in _LENGTHS]


def turn_items(k: int) -> list[dict[str, Any]]:
    """The three Responses input items of turn ``k`` (about 1.9 KiB of JSON)."""
    return [
        {"role": "user", "content": f"[{k}] {_TEXTS[k % 64]}"},
        {"type": "function_call", "call_id": f"call_{k}", "name": "lookup", "id": f"fc_{k}",
         "arguments": json.dumps({"query": _TEXTS[(k + 7) % 64][:80]})},
        {"type": "function_call_output", "call_id": f"call_{k}",
         "output": f"[{k}] {_TEXTS[64 + k % 64]}"},
    ]


def turn_messages(k: int) -> list[Any]:
    """The same turn as LangChain messages."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    user, call, out = turn_items(k)
    return [HumanMessage(user["content"]),
            AIMessage("", tool_calls=[{"name": "lookup", "id": call["call_id"],
                                       "args": json.loads(call["arguments"])}]),
            ToolMessage(out["output"], tool_call_id=out["call_id"])]


def turns_for(mib: int) -> int:
    per_turn = len(json.dumps(turn_items(12345)))
    return mib * MIB // per_turn


def _windowed(turns: int, row_of: Callable[[int], list[dict[str, Any]]]) -> Iterator[list[Any]]:
    for k in range(turns):
        rows = row_of(k)
        if k and k % TURNS_PER_WINDOW == 0:
            rows = [{"kind": "reset", "role": "system", "parts": [],
                     "reset": {"reason": "rollover"}},
                    {"kind": "lead_in", "role": "system", "meta": {"session_history": True},
                     "parts": [{"type": "text", "text": "A new context window starts here."}]},
                    *rows]
        yield rows
    if turns:  # the measured turns start a fresh window
        yield [{"kind": "reset", "role": "system", "parts": [], "reset": {"reason": "rollover"}},
               {"kind": "lead_in", "role": "system", "meta": {"session_history": True},
                "parts": [{"type": "text", "text": "A new context window starts here."}]}]
