"""What one agent turn costs the disk, per integration and per peer: fsyncs
and batches (commits), counted from the system calls themselves.

    python -m bench.turn_costs [--turns 20] [--json FILE]
    python -m bench.turn_costs --time [--turns 40] [--mib 0,100]

Each contender runs in a child process under ``strace -f`` (tracing only
``fsync``, ``fdatasync``, ``sync_file_range``, the renames, and an
``access`` of two marker paths that fence the measured turns, so setup and
warm-up are not counted). A turn is what ``bench.integrations_bench`` and
``bench.conversation_bench`` time: the Agents SDK sessions add a turn's three
items and read the session back; the LangChain histories add three messages
and read them back; ``Conversation`` sends the user message, records the
model's tool call and sends the result; ``RolloverMiddleware`` wraps one
model call (the request's new messages stored, the answer recorded), twice
per turn (the call and the answer after its result), and ``after_agent``
at the run's end. Floors, each the file engine's own work for the same
durable steps, views and counts:

``by hand``
    one ``append_many`` of the three rows and one ``provider_view`` (the
    Agents SDK's item rows): one batch, one read per turn, no event loop;
``by hand (messages)``
    the same on the LangChain history's rows (``message_row``): the floor of
    ``ledger langchain``, whose rows are bigger and nest deeper than the
    item rows (its ratio is given over ``by hand`` as well);
``by hand, async``
    ``by hand`` with the event-loop guarantee of an async session: the
    append and the view each in a worker thread
    (``loop.run_in_executor``, the cheapest hop that keeps the loop off the
    lock and the disk), driven as the SDK drives ``add_items`` and
    ``get_items``: the floor of ``ledger agents`` (its ratio is given over
    ``by hand`` as well);
``by hand, 3 steps``
    ``Conversation``'s turn: ``[user]`` appended, the view read and counted
    once (``check_request``), ``[call]`` appended (``record`` returns it as
    stored, so it is a durable step of its own), ``[result]`` appended, the
    view read and counted;
``by hand, 3 steps (messages)``
    the middleware's turn on ``message_row`` rows: ``[user]``, view + count,
    ``[call, result]`` (the answer rides with the results), view + count,
    the final answer (``after_agent``).
``by hand, 3 steps (messages), async``
    the same three steps, each in a worker thread (``asyncio.to_thread``,
    which keeps the run's context, as the middleware must for
    ``get_config``) inside one running loop: the floor of
    ``RolloverMiddleware, async``, the middleware under ``ainvoke``
    (``awrap_model_call`` twice and ``aafter_agent``, awaited in one running
    loop, as ``create_agent``'s async nodes call them); its ratio is given
    over the synchronous floor as well.

Each floor is the same durable steps, views and counts with the same
event-loop guarantee as its contender (issue 31, turns4): an async
integration is over an async floor, a history over its own rows.

``--time`` times the same turns instead, in one process, round-robin over
the contenders (one turn of each in turn, so load from elsewhere falls on all
alike; the order rotated each round), wall and CPU time per turn, median
after three warm-up turns, at each history size (``--mib``; a history is
bulk-loaded first as
``bench.integrations_bench`` does: windows of 50 turns, the measured turns in
a fresh one). Each ratio is over the contender's floor (``FLOOR_OF``;
issue 31: a turn at most 1.2x it).

For the file engine a batch is one rename commit of a segment (a renamed
``seg-*.jsonl``); for SQLite a commit is visible as the fsyncs of its WAL
(``synchronous=FULL``) or journal. Needs ``strace`` on the PATH.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from langchain_core.tools import BaseTool

BEGIN = "/nonexistent-tledger-turn-costs-begin"
END = "/nonexistent-tledger-turn-costs-end"
WARMUP = 3

CONTENDERS = ("by hand", "by hand, async", "ledger agents", "sdk SQLiteSession",
              "by hand (messages)", "ledger langchain",
              "SQLChatMessageHistory", "FileChatMessageHistory", "by hand, 3 steps",
              "Conversation", "by hand, 3 steps (messages)", "RolloverMiddleware",
              "by hand, 3 steps (messages), async", "RolloverMiddleware, async")

#: The floor each contender's ratio is over: the same durable steps, views
#: and counts, done by hand on the engine (module doc).
FLOOR_OF = {"ledger agents": "by hand, async", "ledger langchain": "by hand (messages)",
            "Conversation": "by hand, 3 steps",
            "RolloverMiddleware": "by hand, 3 steps (messages)", "by hand, async": "by hand",
            "by hand (messages)": "by hand",
            "RolloverMiddleware, async": "by hand, 3 steps (messages), async",
            "by hand, 3 steps (messages), async": "by hand, 3 steps (messages)"}

#: A second ratio, over the synchronous floor of item rows: what the
#: contender's protocol (an async session's thread hops) or row format adds
#: on top of the engine's own cheapest turn.
ALSO_OVER = {"ledger agents": "by hand", "ledger langchain": "by hand",
             "RolloverMiddleware, async": "by hand, 3 steps (messages)"}


def _preload(name: str, directory: str, turns: int) -> None:
    """``turns`` turns of history (bulk, in windows) in the workspace the
    contender ``name`` uses under ``directory``."""
    from bench.turn_workload import _windowed, turn_items, turn_messages
    from ledger import Store
    from ledger.integrations.langchain import message_row
    from ledger.integrations.openai_agents import item_row
    from ledger.storage.files.bulk import bulk_load

    ws = {"by hand": "hand", "by hand, async": "hand", "ledger agents": "agents",
          "by hand (messages)": "hand",
          "ledger langchain": "langchain", "Conversation": "conv", "RolloverMiddleware": "mw",
          "by hand, 3 steps": "hand", "by hand, 3 steps (messages)": "hand",
          "by hand, 3 steps (messages), async": "hand", "RolloverMiddleware, async": "mw"}[name]
    h = Store(directory).history(ws)
    if name in ("ledger langchain", "RolloverMiddleware", "by hand, 3 steps (messages)",
                "by hand (messages)",
                "by hand, 3 steps (messages), async", "RolloverMiddleware, async"):
        bulk_load(h, _windowed(turns, lambda k: [message_row(m) for m in turn_messages(k)]),
                  internal=True, durability="off")
    else:
        bulk_load(h, _windowed(turns, lambda k: [item_row(i) for i in turn_items(k)]),
                  internal=True, durability="off")


def _by_hand(directory: str, rows_of: Callable[[int], list[dict[str, Any]]]
             ) -> Callable[[int], Any]:
    """A floor: turn ``k`` is one ``append_many`` of ``rows_of(k)`` and one
    provider view, on the calling thread."""
    from ledger import Store

    h = Store(directory).history("hand")

    def hand(k: int) -> Any:
        h.append_many(rows_of(k))
        return h.provider_view()
    return hand


def _turn_fn(name: str, directory: str) -> Callable[[int], Any]:
    """A function running turn ``k`` of contender ``name`` in ``directory``."""
    from bench.turn_workload import turn_items, turn_messages

    loop = asyncio.new_event_loop()
    if name == "by hand":
        from ledger.integrations.openai_agents import item_row

        return _by_hand(directory, lambda k: [item_row(i) for i in turn_items(k)])
    if name == "by hand, async":
        from ledger import Store
        from ledger.integrations.openai_agents import item_row

        ha = Store(directory).history("hand")

        async def hop(fn: Callable[..., Any], *args: Any) -> Any:
            # A worker thread per call (the SDK's own SQLiteSession uses
            # asyncio.to_thread; run_in_executor skips its context copy).
            return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

        def hand_async(k: int) -> Any:
            # The floor's two calls each on a worker thread, driven as the SDK
            # drives add_items and get_items.
            rows = [item_row(i) for i in turn_items(k)]
            loop.run_until_complete(hop(ha.append_many, rows))
            return loop.run_until_complete(hop(ha.provider_view))
        return hand_async
    if name == "by hand (messages)":
        from ledger.integrations.langchain import message_row

        return _by_hand(directory, lambda k: [message_row(m) for m in turn_messages(k)])
    if name.startswith("by hand, 3 steps"):
        from bench.conversation_bench import BASH, _rows
        from ledger import Store
        from ledger.integrations.langchain import message_row
        from ledger.policy import HISTORY_TOOL
        from ledger.rollover.guards import check_request
        from ledger.rollover.request import tool_schema
        from ledger.transcript.retrieval.tool import DESCRIPTION, PARAMETERS

        h3 = Store(directory).history("hand")
        tools = [BASH, tool_schema(HISTORY_TOOL, DESCRIPTION, PARAMETERS)]

        def budgeted_view() -> Any:
            view = [r.to_dict() for r in h3.provider_view()]
            check_request("gpt-4o", rows=view, system="You are an agent.", tools=tools,
                          context_limit=16000)
            return view

        if name == "by hand, 3 steps":
            def steps(k: int) -> Any:
                # Conversation's turn: send(user), record(call), send(result).
                user, call, result = _rows(k)
                h3.append_many([user])
                budgeted_view()
                h3.append_many([call])
                h3.append_many([result])
                return budgeted_view()
            return steps

        from langchain_core.messages import AIMessage

        if name == "by hand, 3 steps (messages), async":
            def message_steps_async(k: int) -> Any:
                # The middleware's turn under ainvoke: each durable step (the
                # store work of one model call, the run's end) in a worker
                # thread, in one running loop, as awrap_model_call and
                # aafter_agent run it.
                user, call, result = (message_row(m) for m in turn_messages(k))

                def step(rows: list[dict[str, Any]], view: bool) -> Any:
                    h3.append_many(rows)
                    return budgeted_view() if view else None

                async def turn() -> Any:
                    await asyncio.to_thread(step, [user], True)
                    view = await asyncio.to_thread(step, [call, result], True)
                    await asyncio.to_thread(step, [message_row(AIMessage(f"done {k}"))], False)
                    return view
                return loop.run_until_complete(turn())
            return message_steps_async

        def message_steps(k: int) -> Any:
            # The middleware's turn: [user] before the first model call,
            # [call, result] before the second, the answer at the run's end.
            user, call, result = (message_row(m) for m in turn_messages(k))
            h3.append_many([user])
            budgeted_view()
            h3.append_many([call, result])
            view = budgeted_view()
            h3.append_many([message_row(AIMessage(f"done {k}"))])
            return view
        return message_steps
    if name == "ledger agents" or name == "sdk SQLiteSession":
        if name == "ledger agents":
            from ledger import Store
            from ledger.integrations.openai_agents import LedgerSession

            session: Any = LedgerSession("agents", store=Store(directory))
        else:
            from agents import SQLiteSession

            session = SQLiteSession("bench", os.path.join(directory, "agents.db"))

        def agents(k: int) -> Any:
            loop.run_until_complete(session.add_items(turn_items(k)))
            return loop.run_until_complete(session.get_items())
        return agents
    if name in ("ledger langchain", "SQLChatMessageHistory", "FileChatMessageHistory"):
        if name == "ledger langchain":
            from ledger import Store
            from ledger.integrations.langchain import LedgerChatMessageHistory

            history: Any = LedgerChatMessageHistory("langchain", store=Store(directory))
        elif name == "SQLChatMessageHistory":
            from langchain_community.chat_message_histories import SQLChatMessageHistory

            history = SQLChatMessageHistory(
                "bench", connection=f"sqlite:///{os.path.join(directory, 'lc.db')}")
        else:
            from langchain_community.chat_message_histories import FileChatMessageHistory

            history = FileChatMessageHistory(os.path.join(directory, "lc.json"))

        def lc(k: int) -> Any:
            history.add_messages(turn_messages(k))
            return history.messages
        return lc
    if name == "Conversation":
        from bench.conversation_bench import BASH, _rows
        from ledger import Store
        from ledger.rollover.conversation import Conversation

        conv = Conversation.open(Store(directory), "conv", model="gpt-4o", context_limit=16000,
                                 system="You are an agent.", tools={"bash": BASH})

        def conversation(k: int) -> Any:
            user, call, result = _rows(k)
            conv.send(user)
            conv.record(call)
            return conv.send(result)
        return conversation
    if name.startswith("RolloverMiddleware"):
        from langchain.agents.middleware import ModelRequest
        from langchain_core.messages import AIMessage

        from bench.conversation_bench import BASH
        from ledger import Store
        from ledger.integrations.langchain_middleware import RolloverMiddleware

        mw = RolloverMiddleware(Store(directory), workspace="mw", context_limit=16000)
        state: dict[str, list[Any]] = {"messages": []}
        # The agent's tools, session_history among them.
        mw_tools: list[BaseTool | dict[str, Any]] = [BASH, *mw.tools]

        def request(messages: list[Any]) -> Any:
            # What create_agent hands wrap_model_call (no model is called).
            return ModelRequest(model=None, messages=messages,  # type: ignore[arg-type]
                                system_prompt="You are an agent.", tools=mw_tools)

        if name == "RolloverMiddleware, async":
            async def amiddleware(k: int) -> Any:
                # The same turn under ainvoke: create_agent's async nodes call
                # awrap_model_call and aafter_agent inside one running loop.
                user, call, result = turn_messages(k)
                state["messages"] += [user]

                async def give(answer: Any) -> Any:
                    return answer

                await mw.awrap_model_call(request(list(state["messages"])), lambda r: give(call))
                state["messages"] += [call, result]
                answer = AIMessage(f"done {k}")
                await mw.awrap_model_call(request(list(state["messages"])),
                                          lambda r: give(answer))
                state["messages"] += [answer]
                await mw.aafter_agent(state, None)
                return state
            return lambda k: loop.run_until_complete(amiddleware(k))

        def middleware(k: int) -> Any:
            user, call, result = turn_messages(k)
            state["messages"] += [user]
            mw.wrap_model_call(request(list(state["messages"])), lambda r: call)
            state["messages"] += [call, result]
            answer = AIMessage(f"done {k}")
            mw.wrap_model_call(request(list(state["messages"])), lambda r: answer)
            state["messages"] += [answer]
            mw.after_agent(state, None)  # the run ends (create_agent's after_agent node)
            return state
        return middleware
    raise SystemExit(f"unknown contender {name!r}")


def child(name: str, turns: int, directory: str) -> None:
    turn = _turn_fn(name, directory)
    for k in range(WARMUP):
        turn(k)
    os.access(BEGIN, os.F_OK)
    for k in range(WARMUP, WARMUP + turns):
        turn(k)
    os.access(END, os.F_OK)


_SEGMENT = re.compile(r'seg-\d+\.jsonl"')
_CALL = re.compile(r"^(?:\[pid\s+\d+\]\s+)?(?:\d+\s+)?(\w+)\((.*)$")


def count(name: str, turns: int) -> dict[str, Any]:
    directory = tempfile.mkdtemp(prefix="tledger-turn-costs-")
    trace = os.path.join(directory, "trace.txt")
    try:
        cmd = ["strace", "-f", "-qq", "-o", trace, "-e",
               "trace=fsync,fdatasync,sync_file_range,rename,renameat,renameat2,access,"
               "faccessat,faccessat2",
               sys.executable, "-m", "bench.turn_costs", "--child", name, "--turns", str(turns),
               "--dir", os.path.join(directory, "data")]
        os.makedirs(os.path.join(directory, "data"))
        subprocess.run(cmd, check=True)
        fsyncs = renames = seg_renames = 0
        inside = False
        with open(trace, encoding="utf-8", errors="replace") as f:
            for line in f:
                m = _CALL.match(line.strip())
                if m is None:
                    continue
                call, args = m.groups()
                if BEGIN in args:
                    inside = True
                    continue
                if END in args:
                    break
                if not inside:
                    continue
                if call in ("fsync", "fdatasync", "sync_file_range"):
                    fsyncs += 1
                elif call.startswith("rename"):
                    renames += 1
                    seg_renames += bool(_SEGMENT.search(args))
        out: dict[str, Any] = {"turns": turns, "fsyncs_per_turn": round(fsyncs / turns, 2),
                               "renames_per_turn": round(renames / turns, 2)}
        if name not in ("sdk SQLiteSession", "SQLChatMessageHistory", "FileChatMessageHistory"):
            out["batches_per_turn"] = round(seg_renames / turns, 2)
        return out
    finally:
        shutil.rmtree(directory, ignore_errors=True)


TIMED = ("by hand", "by hand, async", "ledger agents", "by hand (messages)", "ledger langchain",
         "by hand, 3 steps",
         "Conversation", "by hand, 3 steps (messages)", "RolloverMiddleware",
         "by hand, 3 steps (messages), async", "RolloverMiddleware, async")


def timed(names: list[str], turns: int, sizes: list[int]) -> dict[str, Any]:
    """Median wall and CPU ms per turn of each contender at each size,
    round-robin in one process; each ratio over the contender's floor
    (``FLOOR_OF``)."""
    import statistics
    import time

    from bench.turn_workload import turns_for

    out: dict[str, Any] = {}
    for mib in sizes:
        root = tempfile.mkdtemp(prefix="tledger-turn-time-")
        try:
            fns = {}
            for name in names:
                d = os.path.join(root, name.replace(" ", "-"))
                os.makedirs(d)
                if mib:
                    _preload(name, d, turns_for(mib))
                fns[name] = _turn_fn(name, d)
            wall: dict[str, list[float]] = {n: [] for n in names}
            cpu: dict[str, list[float]] = {n: [] for n in names}
            order = list(fns)
            # Each contender replays turns of its own (``turn_items(k)`` holds
            # ``k`` in its text and call id): with the same rows, the process's
            # row-token cache (``ledger.tokens.rows.DEFAULT_CACHE``, keyed by
            # content) let whoever ran second reuse the first one's counts, and
            # a floor ran before its contender in most rounds (turns7). Every
            # ``k`` has 8 digits, so the rows' sizes are the same for all.
            first = {name: 10_000_000 + 1_000_000 * i for i, name in enumerate(order)}
            assert len(order) <= 90 and WARMUP + turns < 1_000_000
            for k in range(WARMUP + turns):
                # The order rotates each round: a contender always first paid
                # 5-15% more CPU in a trial (bench/RESULTS.md, turns3).
                r = k % len(order)
                for name in order[r:] + order[:r]:
                    fn = fns[name]
                    w0, c0 = time.perf_counter(), time.process_time()
                    fn(first[name] + k)
                    w1, c1 = time.perf_counter(), time.process_time()
                    if k >= WARMUP:
                        wall[name].append(w1 - w0)
                        cpu[name].append(c1 - c0)
            rec: dict[str, dict[str, Any]] = {  # a JSON record: ms, ratios, floor names
                n: {"wall_ms": round(statistics.median(wall[n]) * 1e3, 3),
                    "cpu_ms": round(statistics.median(cpu[n]) * 1e3, 3)} for n in names}
            for n in names:
                floor = rec.get(FLOOR_OF.get(n, n))
                if floor is None:
                    continue
                rec[n]["floor"] = FLOOR_OF.get(n, n)
                rec[n]["wall_over_floor"] = round(rec[n]["wall_ms"] / floor["wall_ms"], 2)
                rec[n]["cpu_over_floor"] = round(rec[n]["cpu_ms"] / floor["cpu_ms"], 2)
                also = rec.get(ALSO_OVER.get(n, ""))
                if also is not None:
                    rec[n]["also_floor"] = ALSO_OVER[n]
                    rec[n]["wall_over_also"] = round(rec[n]["wall_ms"] / also["wall_ms"], 2)
                    rec[n]["cpu_over_also"] = round(rec[n]["cpu_ms"] / also["cpu_ms"], 2)
            out[str(mib)] = rec
            print(f"{mib} MiB: {rec}", file=sys.stderr, flush=True)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return out


def timed_markdown(doc: dict[str, Any]) -> str:
    lines = ["| contender | history | wall ms | CPU ms | floor | wall / floor | CPU / floor |",
             "|---|---|---|---|---|---|---|"]
    for mib, rec in doc.items():
        for name, r in rec.items():
            floor = "itself" if r.get("floor", name) == name else r["floor"]
            lines.append(f"| {name} | {mib} MiB | {r['wall_ms']:.2f} | {r['cpu_ms']:.2f} | "
                         f"{floor} | {r.get('wall_over_floor', '—')} | "
                         f"{r.get('cpu_over_floor', '—')} |")
            if "also_floor" in r:
                lines.append(f"| {name} | {mib} MiB | | | {r['also_floor']} | "
                             f"{r['wall_over_also']} | {r['cpu_over_also']} |")
    return "\n".join(lines)


def markdown(doc: dict[str, dict[str, Any]]) -> str:
    lines = ["| contender | fsyncs per turn | renames per turn | ledger batches per turn |",
             "|---|---|---|---|"]
    for name, rec in doc.items():
        lines.append(f"| {name} | {rec['fsyncs_per_turn']:g} | {rec['renames_per_turn']:g} | "
                     f"{rec.get('batches_per_turn', '—')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.turn_costs",
                                description="fsyncs and batches per agent turn (strace)")
    p.add_argument("--turns", type=int, default=20)
    p.add_argument("--only", action="append", choices=CONTENDERS)
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--time", action="store_true",
                   help="time the turns (round-robin, one process) instead of counting")
    p.add_argument("--mib", default="0,100", help="with --time: history sizes (MiB)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--dir", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args.child, args.turns, args.dir)
        return 0
    if args.time:
        names = [n for n in (args.only or TIMED) if n in TIMED]
        doc_t = timed(names, args.turns, [int(x) for x in args.mib.split(",")])
        print(timed_markdown(doc_t))
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump(doc_t, f, indent=1)
        return 0
    if shutil.which("strace") is None:
        print("strace is not on the PATH (apt-get install strace)", file=sys.stderr)
        return 2
    doc = {}
    for name in args.only or CONTENDERS:
        doc[name] = count(name, args.turns)
        print(f"{name}: {doc[name]}", file=sys.stderr, flush=True)
    print(markdown(doc))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
