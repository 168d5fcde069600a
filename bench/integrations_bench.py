"""Agent-framework sessions: one agent turn, ours against each framework's own.

A turn is what a runtime does per model call: add 3 items (a user message, a
tool call, its result) and get the items the next model call needs.

Contenders, each as its users run it (file-backed, the library's defaults):

``ledger agents``
    ``LedgerSession`` (``durability="full"``): ``add_items`` + ``get_items()``.
``sdk SQLiteSession``
    The OpenAI Agents SDK's own file-backed ``SQLiteSession`` (WAL):
    ``add_items`` + ``get_items()``, which reads the whole session.
    ``get_items(limit=60)`` is timed too, as a reference: it reads the newest
    60 rows only, but a limit is not a window (no floor, no rollover, a tool
    result can lose its call).
``ledger langchain``
    ``LedgerChatMessageHistory``: ``add_messages`` + ``messages``.
``SQLChatMessageHistory`` / ``FileChatMessageHistory``
    langchain-community's SQL history on a SQLite file, and its JSON-file
    history: ``add_messages`` + ``messages``.

History sizes are the JSON bytes of the Agents SDK items already in the
session (the same number of turns for every contender; each store's own
bytes on disk are reported too). Our histories roll over every
``TURNS_PER_WINDOW`` turns, as a session with a token budget does, so the
turn reads the active window, which holds only the measured turns.

Method: phase 1 times our two sessions at every size, interleaved (size A,
B, C, A, B, C …) after two warm-up turns per size, before any peer data is
loaded into the process; phase 2 builds, warms up and times each peer, one
size at a time. Each number is the median of the repeats. Ratios: peer /
ours at the same size, and ours at the biggest size / ours empty.

Disk work per turn: with ``strace`` on the PATH, each contender's turn (ours
and each peer's, plus ``Conversation``, ``RolloverMiddleware`` and the
floors they are held to) is also run under ``strace`` by
``bench.turn_costs``, and its fsyncs, renames and ledger batches per turn are
reported beside each other (``per_turn_io``; ``--no-strace`` leaves it out).

Run alone: ``python -m bench.integrations_bench [--quick] [--json FILE]``
(``--quick``: sizes 0 and 10 MiB, fewer repeats). Needs the agents,
langchain and bench extras (langchain-community, SQLAlchemy).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

from bench.turn_workload import MIB, _windowed, turn_items, turn_messages, turns_for

PEER_LIMIT = 60


def _du(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


# --- building histories -------------------------------------------------------------------

def build_ours(root: str, turns: int) -> tuple[Any, Any]:
    from ledger import Store
    from ledger.integrations.langchain import LedgerChatMessageHistory, message_row
    from ledger.integrations.openai_agents import LedgerSession, item_row
    from ledger.storage.files.bulk import bulk_load

    store = Store(root)
    session = LedgerSession("agents", store=store)
    history = LedgerChatMessageHistory("langchain", store=store)
    if turns:
        bulk_load(session.history, _windowed(turns, lambda k: [item_row(i) for i in turn_items(k)]),
                  internal=True, durability="off")
        bulk_load(history.history,
                  _windowed(turns, lambda k: [message_row(m) for m in turn_messages(k)]),
                  internal=True, durability="off")
    return session, history


def _chunks(turns: int, of: Callable[[int], list[Any]], size: int = 2000) -> Iterator[list[Any]]:
    for start in range(0, turns, size):
        yield [x for k in range(start, min(turns, start + size)) for x in of(k)]


def build_peer(name: str, directory: str, turns: int, loop: asyncio.AbstractEventLoop) -> Any:
    if name.startswith("sdk SQLiteSession"):
        from agents import SQLiteSession

        session = SQLiteSession("bench", os.path.join(directory, "agents.db"))
        for chunk in _chunks(turns, turn_items):
            loop.run_until_complete(session.add_items(chunk))
        return session
    if name == "SQLChatMessageHistory":
        from langchain_community.chat_message_histories import SQLChatMessageHistory

        history = SQLChatMessageHistory(
            "bench", connection=f"sqlite:///{os.path.join(directory, 'lc.db')}")
    else:
        from langchain_community.chat_message_histories import FileChatMessageHistory
        from langchain_core.messages import messages_to_dict

        file_history = FileChatMessageHistory(os.path.join(directory, "lc.json"))
        # Its add_messages adds one message at a time, each rewriting the whole
        # file; write the file it would end with in one go instead.
        everything = [m for k in range(turns) for m in turn_messages(k)]
        file_history.file_path.write_text(json.dumps(messages_to_dict(everything)))
        return file_history
    for chunk in _chunks(turns, turn_messages):
        history.add_messages(chunk)
    return history


# --- one turn per contender ---------------------------------------------------------------

def agents_turn(session: Any, loop: asyncio.AbstractEventLoop, k: int,
                limit: int | None = None) -> int:
    loop.run_until_complete(session.add_items(turn_items(k)))
    return len(loop.run_until_complete(session.get_items(limit)))


def langchain_turn(history: Any, k: int) -> int:
    history.add_messages(turn_messages(k))
    return len(history.messages)


def _timed(fn: Callable[[], int]) -> tuple[float, int]:
    start = time.perf_counter()
    n = fn()
    return time.perf_counter() - start, n


# --- the run ------------------------------------------------------------------------------

PEERS = [("sdk SQLiteSession", "ledger agents"),
         (f"sdk SQLiteSession limit={PEER_LIMIT}", "ledger agents"),
         ("SQLChatMessageHistory", "ledger langchain"),
         ("FileChatMessageHistory", "ledger langchain")]


def run(quick: bool, log: Callable[[str], None] = lambda m: None,
        strace: bool = True) -> dict[str, Any]:
    sizes = [0, 10] if quick else [0, 10, 100]
    ours_repeats = 15 if quick else 40
    peer_repeats, peer_budget = (3, 20.0) if quick else (7, 90.0)
    tmp = tempfile.mkdtemp(prefix="tledger-integrations-")
    loop = asyncio.new_event_loop()
    out: dict[str, Any] = {"sizes_mib": sizes, "turns": {}, "disk_bytes": {}, "median_ms": {},
                           "repeats": {}, "items_seen": {}}
    try:
        # Phase 1: ours, every size interleaved.
        built: dict[int, tuple[Any, Any]] = {}
        for mib in sizes:
            turns = turns_for(mib)
            out["turns"][str(mib)] = turns
            t0 = time.perf_counter()
            built[mib] = build_ours(os.path.join(tmp, f"ours-{mib}"), turns)
            log(f"built ours {mib} MiB ({turns} turns) in {time.perf_counter() - t0:.1f}s")
            session, history = built[mib]
            out["disk_bytes"].setdefault("ledger agents", {})[str(mib)] = _du(
                session.history.engine.path)
            out["disk_bytes"].setdefault("ledger langchain", {})[str(mib)] = _du(
                history.history.engine.path) if history.history.exists() else 0
        samples: dict[str, dict[int, list[float]]] = {"ledger agents": {}, "ledger langchain": {}}
        k = 10_000_000
        gc.collect()
        for rep in range(ours_repeats + 2):
            for mib in sizes:
                session, history = built[mib]
                k += 1
                # Functions, not lambdas binding by defaults (python/mypy#15459).
                def agents(s: Any = session, k: int = k) -> int:
                    return agents_turn(s, loop, k)

                def langchain(h: Any = history, k: int = k) -> int:
                    return langchain_turn(h, k)

                dt_a, n_a = _timed(agents)
                dt_l, n_l = _timed(langchain)
                if rep >= 2:  # two warm-up turns
                    samples["ledger agents"].setdefault(mib, []).append(dt_a)
                    samples["ledger langchain"].setdefault(mib, []).append(dt_l)
                out["items_seen"].setdefault("ledger agents", {})[str(mib)] = n_a
                out["items_seen"].setdefault("ledger langchain", {})[str(mib)] = n_l
        for name, by_size in samples.items():
            out["median_ms"][name] = {str(m): statistics.median(v) * 1e3
                                      for m, v in by_size.items()}
            out["repeats"][name] = {str(m): len(v) for m, v in by_size.items()}
        log(f"ours: {out['median_ms']}")
        shutil.rmtree(os.path.join(tmp), ignore_errors=True)
        os.makedirs(tmp, exist_ok=True)
        del built
        gc.collect()

        # Phase 2: each peer, one size at a time.
        for name, _ in PEERS:
            for mib in sizes:
                directory = tempfile.mkdtemp(dir=tmp)
                t0 = time.perf_counter()
                peer = build_peer(name, directory, turns_for(mib), loop)
                log(f"built {name} {mib} MiB in {time.perf_counter() - t0:.1f}s")
                limit = PEER_LIMIT if "limit=" in name else None
                turn: Callable[[int], int]
                if name.startswith("sdk"):
                    def sdk_turn(k: int, p: Any = peer, lim: int | None = limit) -> int:
                        return agents_turn(p, loop, k, lim)
                    turn = sdk_turn
                else:
                    def chat_turn(k: int, p: Any = peer) -> int:
                        return langchain_turn(p, k)
                    turn = chat_turn
                gc.collect()
                turn(k := k + 1)  # warm-up
                times: list[float] = []
                started = time.perf_counter()
                while len(times) < 3 or (len(times) < peer_repeats
                                         and time.perf_counter() - started < peer_budget):
                    k += 1
                    def one(k: int = k, turn: Callable[[int], int] = turn) -> int:
                        return turn(k)  # a function, not a lambda: python/mypy#15459

                    dt, n = _timed(one)
                    times.append(dt)
                out["median_ms"].setdefault(name, {})[str(mib)] = statistics.median(times) * 1e3
                out["repeats"].setdefault(name, {})[str(mib)] = len(times)
                out["items_seen"].setdefault(name, {})[str(mib)] = n
                out["disk_bytes"].setdefault(name, {})[str(mib)] = _du(directory)
                log(f"{name} {mib} MiB: {out['median_ms'][name][str(mib)]:.2f} ms "
                    f"({len(times)} turns)")
                close = getattr(peer, "close", None)
                if close is not None:
                    close()
                del peer
                shutil.rmtree(directory, ignore_errors=True)
                gc.collect()
    finally:
        loop.close()
        shutil.rmtree(tmp, ignore_errors=True)
    out["ratios"] = ratios(out)
    if strace and shutil.which("strace") is not None:
        from bench.turn_costs import CONTENDERS, count

        out["per_turn_io"] = {}
        for name in CONTENDERS:
            out["per_turn_io"][name] = count(name, 5 if quick else 20)
            log(f"{name}: {out['per_turn_io'][name]} (strace)")
    return out


def ratios(out: dict[str, Any]) -> dict[str, Any]:
    med = out["median_ms"]
    big, empty = str(max(out["sizes_mib"])), "0"
    r: dict[str, Any] = {}
    for ours in ("ledger agents", "ledger langchain"):
        r[f"{ours}: {big} MiB / empty"] = round(med[ours][big] / med[ours][empty], 3)
    for peer, ours in PEERS:
        for mib in out["sizes_mib"]:
            r[f"{peer} / {ours} at {mib} MiB"] = round(med[peer][str(mib)] / med[ours][str(mib)], 1)
    return r


def markdown(out: dict[str, Any]) -> str:
    sizes = [str(s) for s in out["sizes_mib"]]
    lines = ["| contender (median ms per turn) | " + " | ".join(f"{s} MiB" for s in sizes)
             + " | on disk at the biggest |", "|---" * (len(sizes) + 2) + "|"]
    for name, by_size in out["median_ms"].items():
        disk = out["disk_bytes"].get(name, {}).get(sizes[-1], 0) / MIB
        lines.append(f"| {name} | " + " | ".join(f"{by_size[s]:.2f}" for s in sizes)
                     + f" | {disk:.0f} MiB |")
    lines += ["", "| ratio | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in out["ratios"].items()]
    if out.get("per_turn_io"):
        from bench.turn_costs import markdown as io_markdown

        lines += ["", "Disk work per turn (strace):", "", io_markdown(out["per_turn_io"])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.integrations_bench",
                                description="One agent turn: our sessions against each "
                                "framework's own, at history sizes 0, 10 and 100 MiB.")
    p.add_argument("--quick", action="store_true", help="sizes 0 and 10 MiB, fewer repeats")
    p.add_argument("--json", metavar="FILE", help="write the result document here")
    p.add_argument("--no-strace", action="store_true",
                   help="leave out the fsyncs and batches per turn (strace)")
    args = p.parse_args(argv)
    started = time.monotonic()

    def log(msg: str) -> None:
        print(f"{time.monotonic() - started:7.1f}s {msg}", file=sys.stderr, flush=True)

    out = run(args.quick, log, strace=not args.no_strace)
    out["seconds"] = round(time.monotonic() - started, 1)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)
    print(markdown(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
