"""The runtime object's cost per send, against the wiring a loop would do by hand.

One *turn* is a user message, the model's tool call (recorded) and its result
(sent): two sends and two records, as an agent loop does per tool step.

Contenders, on the file engine (``durability="full"``, the default), gpt-4o
with real tiktoken counts, the same rows:

``conversation``
    ``Conversation.send`` / ``record`` with ``context_limit``: the decision
    (current and fresh-window counts), warnings, automatic rollover with the
    tool step carried, and the hard-ceiling check of every request.
``by hand``
    The baseline a loop without the object needs at the least for a hard
    ceiling: ``History.append_many`` of the rows, ``provider_view()``, and one
    ``check_request`` of the assembled request. No rollover, so its window
    only grows; the by-hand loop is measured at the same window sizes by
    clearing (``clear_soft``) whenever the conversation rolled over.

Each number is the median over the turns of a run after two warm-up turns;
the ratio is conversation / by hand.

Run: ``python -m bench.conversation_bench [--quick] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

from ledger import Store
from ledger.rollover.conversation import Conversation, tool_schema
from ledger.rollover.guards import check_request

BASH = tool_schema("bash", "Run a shell command and return its output.",
                   {"type": "object", "properties": {"cmd": {"type": "string"}}})


def _rows(turn: int) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    words = " ".join(f"w{(turn * 7 + i) % 211}" for i in range(60))
    user = {"role": "user", "parts": [{"type": "text", "text": f"turn {turn}: {words}"}]}
    call = {"role": "assistant", "parts": [
        {"type": "tool_call", "id": f"c{turn}", "name": "bash", "input": {"cmd": "ls"}}]}
    result = {"role": "tool", "parts": [
        {"type": "tool_result", "id": f"c{turn}", "output": words * 2}]}
    return user, call, result


def run(turns: int, limit: int) -> dict[str, Any]:
    root = tempfile.mkdtemp(prefix="tledger-conv-bench-")
    try:
        store = Store(root)
        conv = Conversation.open(store, "conv", model="gpt-4o", context_limit=limit,
                                 system="You are an agent.", tools={"bash": BASH})
        hand = store.history("hand")
        tools = [BASH, conv.tools["session_history"]]
        ours: list[float] = []
        base: list[float] = []
        rollovers = 0
        for turn in range(turns):
            user, call, result = _rows(turn)
            t0 = time.perf_counter()
            conv.send(user)
            conv.record(call)
            req = conv.send(result)
            ours.append(time.perf_counter() - t0)
            rollovers += req.rolled_over
            if req.rolled_over:
                hand.clear_soft()
            t0 = time.perf_counter()
            for rows in ([user], [call], [result]):
                hand.append_many(rows)
                if rows[0]["role"] != "assistant":
                    view = [r.to_dict() for r in hand.provider_view()]
                    check_request("gpt-4o", rows=view, system="You are an agent.",
                                  tools=tools, context_limit=limit)
            base.append(time.perf_counter() - t0)
        ours_ms = statistics.median(ours[2:]) * 1000
        base_ms = statistics.median(base[2:]) * 1000
        return {"turns": turns, "context_limit": limit, "rollovers": rollovers,
                "conversation_ms_per_turn": round(ours_ms, 2),
                "by_hand_ms_per_turn": round(base_ms, 2),
                "ratio": round(ours_ms / base_ms, 2)}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.conversation_bench")
    p.add_argument("--quick", action="store_true", help="fewer turns")
    p.add_argument("--json", metavar="FILE", help="write the results here")
    args = p.parse_args(argv)
    turns = 40 if args.quick else 200
    results = [run(turns, limit) for limit in (3000, 16000)]
    for r in results:
        print(f"context_limit {r['context_limit']:>6}: {r['turns']} turns, {r['rollovers']} "
              f"rollovers; conversation {r['conversation_ms_per_turn']} ms/turn, by hand "
              f"{r['by_hand_ms_per_turn']} ms/turn; ratio {r['ratio']}x")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
