"""``python -m bench.semantic_bench``: the semantic channel (issue 32) through
the engine, measured.

1. Recall (``--recall``): on each dev set of ``bench.recall_data``, the
   ``session_history`` tool over a file store holding the set
   (``bench.recall_bench.tool_ranker``, ``current: true``: every window),
   lexical (no embedder) beside the same store with wordllama at 64 and 256
   dimensions, the fusion weight ``ALPHA`` on a grid (the vectors are
   computed once per store; ``ledger.core.semantic.ALPHA`` is set between
   runs), and plain BM25 in the same run. hit@k is the goals' recall@k.
2. Cost (``--latency``): a file store of ``--mib`` MiB built from the real
   transcripts (``bench.recall_latency.build``); the first ranked call with
   an embedder (every row embedded: rows/s, bytes per row of
   ``RECALL.vectors``), then ranked p50/p99 without and with the channel,
   interleaved over the same queries (CPU time and wall time). ``--pg``
   does the same on PostgreSQL (a throwaway cluster unless
   $TLEDGER_TEST_PG is set) at the same size.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from bench.recall_bench import tool_ranker
from bench.recall_v2 import build_index, plain_bm25, score, table
from bench.sqlrow import one
from ledger.core import semantic

ALPHAS = (0.8, 0.85, 0.9, 0.95)


EMBEDDER = ["wordllama"]  # --embedder: wordllama (at --dim) or minilm (384 d)


def _embedder(dim: int) -> Any:
    from bench.minilm import MiniLMEmbedder
    from ledger.core.embedders import WordLlamaEmbedder

    if EMBEDDER[0] == "minilm":
        return MiniLMEmbedder(threads=1)
    return WordLlamaEmbedder(dim)


def _label(dim: int) -> str:
    return "MiniLM 384 d" if EMBEDDER[0] == "minilm" else f"wordllama {dim} d"


def recall(sets: list[str], dims: list[int], out: Callable[[str], None] = print) -> None:
    from bench import recall_data

    for name in sets:
        qs, why = recall_data.by_name(name)
        if qs is None:
            out(f"\n### {name}: skipped: {why}")
            continue
        questions = qs.questions
        out(f"\n### {qs.name}: {len(questions)} questions, {len(qs.turns)} turns\n")
        rows: list[tuple[str, dict[str, float]]] = [
            ("plain BM25 (rank_bm25)", score(questions, plain_bm25(build_index(qs.turns))))]
        with tempfile.TemporaryDirectory() as d:
            rows.append(("engine, lexical (no embedder)",
                         score(questions, tool_ranker(qs, os.path.join(d, "lex"),
                                                      current=True))))
        for dim in dims:
            emb = _embedder(dim)
            with tempfile.TemporaryDirectory() as d:
                t0 = time.perf_counter()
                tool = tool_ranker(qs, d, embedder=emb, current=True)
                tool("warm up")  # every row embedded
                took = time.perf_counter() - t0
                saved = semantic.ALPHA
                try:
                    for a in ALPHAS:
                        semantic.ALPHA = a
                        rows.append((f"engine +semantic wordllama {dim} d, alpha {a}",
                                     score(questions, tool)))
                finally:
                    semantic.ALPHA = saved
            out(f"(wordllama {dim} d: store built and every turn embedded in {took:.1f} s)")
        out(table(rows))


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def _timed(tool: Any, qs: list[str]) -> tuple[list[float], list[float]]:
    wall, cpu = [], []
    for q in qs:
        w0, c0 = time.perf_counter(), time.process_time()
        res = json.loads(tool.call({"action": "search", "query": q, "mode": "ranked",
                                    "current": True}))
        cpu.append((time.process_time() - c0) * 1000)
        wall.append((time.perf_counter() - w0) * 1000)
        assert "error" not in res, res
    return wall, cpu


def latency(root: str, h: Any, make: Callable[..., Any], dim: int, n: int, rows: int,
            out: Callable[[str], None], bytes_of: Callable[[], int]) -> None:
    from bench.recall_latency import queries

    qs = queries(n)
    plain = make().history("w").session_history()
    _timed(plain, qs[:5])  # the lexical index built
    emb = _embedder(dim)
    withemb = make(embedder=emb).history("w").session_history()
    t0, c0 = time.perf_counter(), time.process_time()
    _timed(withemb, qs[:1])
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    size = bytes_of()
    out(f"first call with {_label(dim)} (every row embedded): {wall:.1f} s wall, "
        f"{cpu:.1f} s CPU for {rows:,} rows = {rows / wall:,.0f} rows/s; vectors "
        f"{size:,} bytes = {size / max(rows, 1):.0f} bytes per row")
    res: dict[str, tuple[list[float], list[float]]] = {"lexical": ([], []),
                                                       "+semantic": ([], [])}
    for i in range(0, n, 20):  # alternate blocks of 20 queries
        chunk = qs[i : i + 20]
        for name, tool in (("lexical", plain), ("+semantic", withemb)) if (i // 20) % 2 == 0 \
                else (("+semantic", withemb), ("lexical", plain)):
            w, c = _timed(tool, chunk)
            res[name][0].extend(w)
            res[name][1].extend(c)
    out("\n| ranked search | p50 ms | p99 ms | CPU p50 ms | CPU p99 ms |\n|---|---|---|---|---|")
    for name, (w, c) in res.items():
        out(f"| {name} ({_label(dim)}) | {_pct(w, .5):.2f} | {_pct(w, .99):.2f} | "
            f"{_pct(c, .5):.2f} | {_pct(c, .99):.2f} |")


def files_latency(mib: int, dim: int, n: int, out: Callable[[str], None]) -> None:
    from bench.recall_latency import build, log_bytes
    from ledger import Store
    from ledger.core.format import files as ffmt
    from ledger.storage.files.recall import RecallIndex

    with tempfile.TemporaryDirectory() as d:
        root = os.path.join(d, "store")
        h = build(root, mib)
        out(f"\n### files, {log_bytes(h.engine.path) / (1 << 20):.1f} MiB of log")

        def make(**kw: Any) -> Any:
            return Store(root, durability="off", **kw)

        make().history("w").session_history().call(
            {"action": "search", "query": "warm", "mode": "ranked", "current": True})
        index = RecallIndex(h.engine.path)
        rows = len(index.docs_after(0))
        index.close()
        path = os.path.join(h.engine.path, ffmt.VECTORS_NAME)
        latency(root, h, make, dim, n, rows, out, lambda: os.path.getsize(path))


def pg_latency(mib: int, dim: int, n: int, out: Callable[[str], None]) -> None:
    import uuid

    import psycopg

    from bench.recall_latency import build
    from ledger import Store
    from ledger.storage.postgres.connect import close_pools
    from tests.helpers.pg_cluster import ENV_DSN

    server = os.environ.get(ENV_DSN)
    if not server:
        out("\n### PostgreSQL: skipped ($TLEDGER_TEST_PG is not set)")
        return
    db = "bench_sem_" + uuid.uuid4().hex[:8]
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{db}" TEMPLATE template0')
    root = server.replace("/postgres?", f"/{db}?", 1)
    try:
        with tempfile.TemporaryDirectory() as d:
            src = build(os.path.join(d, "src"), mib)
            h = Store(root).history("w")
            h.engine.load_rows(src.rows())

        def make(**kw: Any) -> Any:
            return Store(root, **kw)

        def count(q: str) -> int:
            with psycopg.connect(root) as conn:
                return int(one(conn.execute(q).fetchone(), q)[0])

        make().history("w").session_history().call(
            {"action": "search", "query": "warm", "mode": "ranked", "current": True})
        rows = count("SELECT count(*) FROM tl_recall_docs")
        out(f"\n### PostgreSQL, {mib} MiB of rows ({rows:,} searchable)")
        latency(root, h, make, dim, n, rows, out,
                lambda: count("SELECT coalesce(sum(octet_length(rec)), 0) FROM tl_vec"))
    finally:
        close_pools(root)
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.semantic_bench")
    p.add_argument("--recall", action="store_true")
    p.add_argument("--latency", action="store_true")
    p.add_argument("--pg", action="store_true")
    p.add_argument("--sets", default="longmemeval,transcripts,agent")
    p.add_argument("--dims", default="64,256")
    p.add_argument("--mib", type=int, default=16)
    p.add_argument("--dim", type=int, default=64, help="wordllama dimension for --latency")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--embedder", choices=("wordllama", "minilm"), default="wordllama",
                   help="the embedder of --latency")
    args = p.parse_args(argv)
    EMBEDDER[0] = args.embedder

    def out(text: str) -> None:
        print(text, flush=True)

    out(f"load: {os.getloadavg()}")
    if args.recall:
        recall(args.sets.split(","), [int(x) for x in args.dims.split(",")], out)
    if args.latency:
        files_latency(args.mib, args.dim, args.queries, out)
    if args.pg:
        pg_latency(args.mib, args.dim, args.queries, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
