"""``python -m bench.recall_latency [--sizes 0,100,1024] [--queries N]``

Ranked ``session_history`` search on the file engine, side by side at each
history size (MiB of stored log, built with ``ledger.storage.files.bulk`` from the real
transcripts of ``bench.corpus``; 0 = a 40-row history):

- the first search, which builds the recall index from the log (seconds);
- ranked search p50/p99 over the same queries at every size (ms), and
  big/empty;
- literal search p50 of the same queries for comparison (one call each);
- index bytes / log bytes;
- append: a batch appended alone, and appended then brought into the index
  (the catch-up the next ranked search does), p50 over interleaved runs.

Queries: 4 words drawn (seeded) from the corpus rows, so every one has hits.

Pathological queries (issue 30), p50/p99 at every size beside the ordinary
ones: a 1,000-character query of corpus words, 100 distinct quoted phrases
(refused: at most 16), one phrase repeated 60 times (1,019 characters, one
phrase after de-duplication), and the most frequent term of the index (a word
in nearly every row). Also: the first call of a new tool on an up-to-date
index (it opens and verifies the whole index: ``open_verify_s``), and the RSS
of this process before and after ``--rss-calls`` ranked calls (ordinary and
pathological in turn, new words each time) on the largest history.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from typing import Any

from bench.corpus import load_corpus
from bench.measure import interleave
from bench.output import emit, scratch
from ledger import Store
from ledger.core import ranking
from ledger.core.format import files as ffmt
from ledger.core.searchable import row_text
from ledger.storage.files import segments as segs
from ledger.storage.files.bulk import bulk_load
from ledger.transcript.retrieval.args import ALLOWED_ARGS

MIB = 1 << 20
# Every ranked call searches the whole history, the current window included
# (``current``, issue 32) where the tool has the argument (so older trees compare).
RANKED: dict[str, Any] = {"mode": "ranked", **({"current": True}
                                                if "current" in ALLOWED_ARGS["search"] else {})}


def queries(n: int, seed: int = 3) -> list[str]:
    rnd = random.Random(seed)
    rows = [row_text(r) for r in load_corpus().rows]
    pool = [[w for w in ranking.words(t) if len(w) >= 4 and w not in ranking.STOP]
            for t in rows]
    pool = [p for p in pool if len(p) >= 4]
    return [" ".join(rnd.sample(rnd.choice(pool), 4)) for _ in range(n)]


def pathological(h: Any, seed: int = 5) -> dict[str, str]:
    """The issue-30 queries for the history ``h`` (its index built)."""
    import sqlite3

    rnd = random.Random(seed)
    words = [w for q in queries(400, seed) for w in q.split()]
    long_q = ""
    while len(long_q) < 990:
        long_q += rnd.choice(words) + " "
    db = sqlite3.connect(os.path.join(h.engine.path, ffmt.RECALL_NAME))
    common = db.execute("SELECT term FROM df ORDER BY n DESC LIMIT 1").fetchone()[0]
    db.close()
    return {
        "1000 chars": long_q[:1000],
        "100 phrases": " ".join(f'"{w}"' for w in list(dict.fromkeys(words))[:100])[:1024],
        "1 phrase x60": " ".join(['"cache was cold"'] * 60),
        "every row": common,
    }


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def log_bytes(path: str) -> int:
    total = 0
    for n in segs.list_segments(path):
        s = segs.stamp(segs.segment_path(path, n))
        total += s.size if s is not None else 0
    return total


def index_bytes(path: str) -> int:
    total = 0
    for suffix in ("", "-wal", "-shm"):
        p = os.path.join(path, ffmt.RECALL_NAME + suffix)
        if os.path.exists(p):
            total += os.path.getsize(p)
    return total


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def build(root: str, size_mib: int) -> Any:
    corpus = load_corpus()
    h = Store(root, durability="off").history("w")
    if size_mib == 0:
        h.append_many(corpus.rows[:40])
    else:
        bulk_load(h, corpus.batches(size_mib * MIB, seed=size_mib), 64 * MIB, durability="off")
    return h


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.recall_latency")
    p.add_argument("--sizes", default="0,100,1024")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--rss-calls", type=int, default=10_000)
    args = p.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",")]
    qs = queries(args.queries)
    out: dict[str, Any] = {"sizes": {}}
    tools: dict[int, Any] = {}
    hist: dict[int, Any] = {}
    with scratch("recall-bench-") as tmp:
        for size in sizes:
            t0 = time.monotonic()
            h = build(os.path.join(tmp, f"s{size}"), size)
            built = time.monotonic() - t0
            tool = h.session_history()
            t0 = time.monotonic()
            json.loads(tool.call({"action": "search", "query": qs[0], **RANKED}))
            first = time.monotonic() - t0
            tool.reader._recall.close()
            tool = h.session_history()
            t0 = time.monotonic()
            json.loads(tool.call({"action": "search", "query": qs[1], **RANKED}))
            reopen = time.monotonic() - t0
            rec = {"log_bytes": log_bytes(h.engine.path), "index_bytes": index_bytes(h.engine.path),
                   "build_log_s": round(built, 1), "first_search_s": round(first, 2),
                   "open_verify_s": round(reopen, 2)}
            rec["index/log"] = round(rec["index_bytes"] / max(rec["log_bytes"], 1), 3)
            out["sizes"][size] = rec
            tools[size], hist[size] = tool, h
            print(f"{size} MiB: {rec}", file=sys.stderr, flush=True)
        # Ranked search: every size answers the same query in turn (interleaved).
        times: dict[int, list[float]] = {s: [] for s in sizes}
        lit: dict[int, list[float]] = {s: [] for s in sizes}
        hits: dict[int, int] = {s: 0 for s in sizes}
        for i, q in enumerate(qs):
            order = sizes[i % len(sizes):] + sizes[: i % len(sizes)]
            for s in order:
                t0 = time.perf_counter()
                res = json.loads(tools[s].call({"action": "search", "query": q,
                                                **RANKED}))
                times[s].append(time.perf_counter() - t0)
                hits[s] += bool(res.get("items"))
            if i < 30:
                for s in order:
                    t0 = time.perf_counter()
                    tools[s].call({"action": "search", "query": q})
                    lit[s].append(time.perf_counter() - t0)
        # Pathological queries, interleaved the same way.
        bad = {s: pathological(hist[s]) for s in sizes}
        kinds = list(bad[sizes[0]])
        ptimes: dict[tuple[int, str], list[float]] = {(s, k): [] for s in sizes for k in kinds}
        pcode: dict[tuple[int, str], str] = {}
        for i in range(max(len(qs) // 4, 5)):
            order = sizes[i % len(sizes):] + sizes[: i % len(sizes)]
            for k in kinds:
                for s in order:
                    t0 = time.perf_counter()
                    res = json.loads(tools[s].call({"action": "search", "query": bad[s][k],
                                                    **RANKED}))
                    ptimes[s, k].append(time.perf_counter() - t0)
                    pcode[s, k] = res["error"]["code"] if "error" in res else \
                        f"{len(res['items'])} items"
        base = sizes[0]
        for s in sizes:
            out["sizes"][s]["pathological"] = {
                k: {"p50_ms": round(statistics.median(ptimes[s, k]) * 1e3, 2),
                    "p99_ms": round(pct(ptimes[s, k], 0.99) * 1e3, 2),
                    "max_ms": round(max(ptimes[s, k]) * 1e3, 2), "answer": pcode[s, k]}
                for k in kinds}
        for s in sizes:
            rec = out["sizes"][s]
            rec["ranked_p50_ms"] = round(statistics.median(times[s]) * 1e3, 2)
            rec["ranked_p99_ms"] = round(pct(times[s], 0.99) * 1e3, 2)
            rec["ranked_max_ms"] = round(max(times[s]) * 1e3, 2)
            rec["queries_with_hits"] = hits[s]
            rec["literal_p50_ms"] = round(statistics.median(lit[s]) * 1e3, 2)
            rec["p99_big/empty"] = round(pct(times[s], 0.99) / pct(times[base], 0.99), 2)
        # RSS after many ranked calls on the biggest history (new words each call).
        big = sizes[-1]
        if args.rss_calls:
            rnd = random.Random(11)
            words = [w for q in qs for w in q.split()]
            before = rss_mib()
            t0 = time.monotonic()
            for i in range(args.rss_calls):
                kind = i % 4
                if kind == 0:
                    q = qs[i % len(qs)]
                elif kind == 1:  # long junk words: never terms, never cached
                    q = " ".join(f"{rnd.choice(words)}{'z' * 80}{i}" for _ in range(8))
                elif kind == 2:
                    q = bad[big]["1000 chars"]
                else:
                    q = f'"{rnd.choice(words)} {rnd.choice(words)}" {rnd.choice(words)}'
                tools[big].call({"action": "search", "query": q, **RANKED})
            out["rss"] = {"size_mib": big, "calls": args.rss_calls,
                          "before_mib": round(before, 1), "after_mib": round(rss_mib(), 1),
                          "seconds": round(time.monotonic() - t0, 1)}
            print(f"rss: {out['rss']}", file=sys.stderr, flush=True)
        # Append alone vs append + index catch-up, on the biggest history.
        h, tool = hist[big], tools[big]
        corpus = load_corpus()
        made = {"i": 0}

        def batch() -> list[dict[str, Any]]:
            made["i"] += 1
            return corpus.rows[(made["i"] * 2) % 1000: (made["i"] * 2) % 1000 + 2]

        def plain() -> None:
            h.append_many(batch())

        def with_index() -> None:
            h.append_many(batch())
            reader = tool.reader
            with reader.locked():
                reader.refresh_recall(reader.state())

        samples = interleave({"append": plain, "append+index": with_index},
                             min_runs=200, max_runs=400, budget_s=20)
        a = statistics.median(samples["append"].times)
        b = statistics.median(samples["append+index"].times)
        out["append"] = {"size_mib": big, "append_p50_ms": round(a * 1e3, 3),
                         "append+index_p50_ms": round(b * 1e3, 3), "ratio": round(b / a, 2)}
        emit(out, args.json, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
