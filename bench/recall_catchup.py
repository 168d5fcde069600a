"""``python -m bench.recall_catchup [--mib 16] [--rounds 400] [--json FILE]``

The ranked catch-up of a small batch on the file engine (issue 31), beside
the append itself, on one history of ``--mib`` MiB (``bench.recall_latency.
build``: the real transcripts, durability ``off``, so SQLite runs
``synchronous=OFF`` too and no fsync hides the work), its index built first.

Each round, in order: ``append`` (a 2-row batch), ``catch-up`` (the index
brought up to the log under the reader's lock, ``refresh_recall``: what the
next ranked search does first), ``nothing new`` (the same again, with
nothing to catch up: the lock, the log's state and the checks that the
index still matches the log, which every ranked search pays whether or not
rows came) and ``search`` (a ranked search of the up-to-date history: an
index and, where the tree has one, its tail). Every batch is caught up by a
timed ``catch-up``. ``merges``: the rounds whose append merged segments
(automatic merges, from about round 359 at 16 MiB) and the catch-up right
after each (wall and CPU ms), which finds the index's place again.

Wall and CPU time of this process (SQLite runs in it) per operation: p50,
p90, mean and max, and ``(append + catch-up) / append`` (the issue's
ratio, goal 1.5) on the p50s and on the means; ``(append + catch-up -
nothing new) / append`` is the same with the cost a search pays anyway taken
out: what a batch adds to the next search. The mean is the one to read:
a tree that folds a tail into the index every so many batches pays the fold
in few rounds, which the p50 does not see.
Run it once per tree, alternating, on a quiet machine or several times.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from bench.corpus import load_corpus
from bench.output import emit, scratch
from bench.recall_latency import RANKED, build, pct, queries


def timed(fn: Callable[[], Any]) -> tuple[float, float]:
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def summary(xs: list[float]) -> dict[str, float]:
    return {"p50_ms": round(statistics.median(xs) * 1e3, 3),
            "p90_ms": round(pct(xs, 0.9) * 1e3, 3),
            "mean_ms": round(statistics.fmean(xs) * 1e3, 3),
            "max_ms": round(max(xs) * 1e3, 3)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.recall_catchup")
    p.add_argument("--mib", type=int, default=16)
    p.add_argument("--rounds", type=int, default=400)
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    with scratch("recall-catchup-") as tmp:
        h = build(os.path.join(tmp, "h"), args.mib)
        tool = h.session_history()
        qs = queries(args.rounds)
        tool.call({"action": "search", "query": qs[0], **RANKED})  # builds the index
        reader = tool.reader
        rows = load_corpus().rows
        k = {"i": 0}

        def batch() -> list[dict[str, Any]]:
            k["i"] += 1
            at = (k["i"] * 2) % 1000
            return rows[at:at + 2]

        def catch_up() -> None:
            with reader.locked():
                reader.refresh_recall(reader.state())

        def search() -> None:
            tool.call({"action": "search", "query": qs[k["i"] % len(qs)], **RANKED})

        ops: dict[str, Callable[[], None]] = {
            "append": lambda: h.append_many(batch()), "catch-up": catch_up,
            "nothing new": catch_up, "search": search}
        wall: dict[str, list[float]] = {n: [] for n in ops}
        cpu: dict[str, list[float]] = {n: [] for n in ops}
        merged: list[dict[str, float]] = []  # the catch-ups right after a merge
        wsdir = h.engine.path

        def segments() -> int:  # the directory alone: no state of the store touched
            return sum(name.startswith("seg-") for name in os.listdir(wsdir))

        count = segments()
        for r in range(args.rounds):
            for name, op in ops.items():
                w, c = timed(op)
                wall[name].append(w)
                cpu[name].append(c)
                if name == "append":
                    now = segments()
                    if now < count:
                        merged.append({"round": r})
                    count = now
                elif name == "catch-up" and merged and len(merged[-1]) == 1:
                    merged[-1].update(wall_ms=round(w * 1e3, 2), cpu_ms=round(c * 1e3, 2))
        out: dict[str, Any] = {"mib": args.mib, "rounds": args.rounds,
                               "load": [round(x, 2) for x in os.getloadavg()],
                               "merges": merged}
        for name in ops:
            out[name] = {"wall": summary(wall[name]), "cpu": summary(cpu[name])}
        for kind in ("wall", "cpu"):
            a, c = out["append"][kind], out["catch-up"][kind]
            n = out["nothing new"][kind]
            out[f"(append+catch-up)/append, {kind}"] = {
                "p50": round(1 + c["p50_ms"] / a["p50_ms"], 2),
                "mean": round(1 + c["mean_ms"] / a["mean_ms"], 2)}
            out[f"(append+catch-up-nothing new)/append, {kind}"] = {
                "p50": round(1 + (c["p50_ms"] - n["p50_ms"]) / a["p50_ms"], 2),
                "mean": round(1 + (c["mean_ms"] - n["mean_ms"]) / a["mean_ms"], 2)}
        emit(out, args.json, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
