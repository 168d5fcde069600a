"""``python -m bench.recall_pg [--sizes 0,10,100] [--queries 200] [--json FILE]``

Ranked ``session_history`` search on the PostgreSQL engine (its recall index
in ``tl_recall_*``), in one run on a private cluster with fsync on
(``tests/helpers/pg_cluster.py``, ``fast=False``), beside the file engine:

- per history size (MiB of stored rows, built with ``ledger.storage.files.bulk`` from the
  real transcripts of ``bench.corpus`` into a file root, then copied byte for
  byte into a database of its own with ``load_rows``; 0 = a 40-row history):
  the first ranked search, which builds the index (seconds), index bytes /
  row bytes (``pg_total_relation_size`` of the recall tables against the
  stored rows, and against ``tl_rows`` with its indexes);
- ranked search p50/p99 (ms) over the same queries at every size, interleaved,
  big/empty; the file engine's p50 on the same history for comparison;
- agreement: for every query, whether the PostgreSQL top 10 (seqs and scores)
  equals the file engine's;
- append on the biggest history, interleaved, 2-row batches, three copies
  of it in one database: one that never had an index, one whose index is
  kept current (a catch-up, untimed, before every round), and one where each
  append is followed by the catch-up the next ranked search does (timed
  together: what indexing at append would cost).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

from bench.corpus import load_corpus
from bench.measure import interleave, ratio
from bench.recall_latency import RANKED, build, log_bytes, pct, queries
from bench.sqlrow import one
from ledger import Store
from ledger.storage.seqpages import SeqReader
from ledger.transcript.history import History

RECALL_TABLES = ("tl_recall_state", "tl_recall_terms", "tl_recall_docs", "tl_recall_post",
                 "tl_recall_echo")


def pg_sizes(root: str) -> dict[str, int]:
    import psycopg

    with psycopg.connect(root, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        size = "SELECT pg_total_relation_size(%s)"
        index = sum(one(conn.execute(size, (t,)).fetchone(), size)[0] for t in RECALL_TABLES)
        table = "SELECT pg_total_relation_size('tl_rows')"
        rows = one(conn.execute(table).fetchone(), table)[0]
        total = ("SELECT coalesce(sum(octet_length(raw) + 1), 0) FROM tl_rows "
                 "WHERE workspace = 'w'")
        raw = one(conn.execute(total).fetchone(), total)[0]
    return {"index_bytes": int(index), "tl_rows_bytes": int(rows), "row_bytes": int(raw)}


def ranked(tool: Any, q: str, limit: int = 10) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(tool.call({"action": "search", "query": q,
                                                **RANKED, "limit": limit}))
    return out


def _row_reader(h: History) -> SeqReader:
    """The page reader of ``h``'s ``session_history`` (a row engine's)."""
    reader = h.session_history().reader
    if not isinstance(reader, SeqReader):
        raise TypeError(f"workspace {h.workspace!r}: not a row engine's reader")
    return reader


def measure_append(root: str, big: int, log: Any) -> dict[str, Any]:
    """Append alone, with the index kept current, and with the catch-up
    (module doc), on three copies of the history in ``root``."""
    corpus = load_corpus()
    k = {"i": 0}

    def batch() -> list[dict[str, Any]]:
        k["i"] += 1
        at = (k["i"] * 2) % 1000
        return corpus.rows[at : at + 2]

    kept = Store(root).history("w")
    plain = Store(root).history("plain")
    eager = Store(root).history("eager")
    for h in (plain, eager):
        h.engine.load_rows(kept.rows())
    reader = _row_reader(kept)
    eager_reader = _row_reader(eager)
    t0 = time.monotonic()
    eager_reader.prepare_ranked()
    log(f"append: histories ready ({time.monotonic() - t0:.1f}s to index 'eager')")
    samples = interleave({
        "append, no index": lambda: plain.append_many(batch()),
        "append, index kept current": lambda: kept.append_many(batch()),
        "append + catch-up": lambda: (eager.append_many(batch()),
                                      eager_reader.prepare_ranked()),
    }, min_runs=200, max_runs=400, budget_s=60, setup=reader.prepare_ranked)
    p50 = {n: statistics.median(s.times) for n, s in samples.items()}
    got = {
        "size_mib": big,
        **{f"{n} p50_ms": round(v * 1e3, 3) for n, v in p50.items()},
        **{f"{n} p99_ms": round(samples[n].of_runs(99) * 1e3, 3) for n in samples},
        "kept/no index": ratio(p50["append, index kept current"], p50["append, no index"]),
        "append+catch-up/append": ratio(p50["append + catch-up"],
                                        p50["append, index kept current"]),
    }
    log(f"append: {got}")
    return got


def main(argv: list[str] | None = None) -> int:
    import psycopg

    from tests.helpers.pg_cluster import Cluster

    p = argparse.ArgumentParser(prog="python -m bench.recall_pg")
    p.add_argument("--sizes", default="0,10,100")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--files-upto", type=int, default=1 << 20, metavar="MIB",
                   help="compare with the file engine at sizes up to this (its index "
                        "build takes minutes per GiB)")
    p.add_argument("--no-append", action="store_true",
                   help="skip the append measurement (it copies the biggest history twice)")
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",")]
    qs = queries(args.queries)
    started = time.monotonic()

    def log(text: str) -> None:
        print(f"{time.monotonic() - started:7.1f}s {text}", file=sys.stderr, flush=True)

    tmp = tempfile.mkdtemp(prefix="recall-pg-bench-")
    cluster = Cluster(fast=False)
    server = cluster.start()
    out: dict[str, Any] = {"sizes": {}}
    pg_tools: dict[int, Any] = {}
    file_tools: dict[int, Any] = {}
    roots: dict[int, str] = {}
    try:
        for size in sizes:
            files = build(os.path.join(tmp, f"s{size}"), size)
            db = f"recall_{size}"
            with psycopg.connect(server, autocommit=True) as conn:
                conn.execute(f"CREATE DATABASE {db}")
            root = server.replace("/postgres?", f"/{db}?", 1)
            roots[size] = root
            t0 = time.monotonic()
            Store(root).history("w").engine.load_rows(files.rows())
            loaded = time.monotonic() - t0
            pg = Store(root).history("w")
            tool = pg.session_history()
            t0 = time.monotonic()
            ranked(tool, qs[0])
            first = time.monotonic() - t0
            ftool = files.session_history() if size <= args.files_upto else None
            t0 = time.monotonic()
            if ftool is not None:
                ranked(ftool, qs[0])
            first_files = time.monotonic() - t0 if ftool is not None else None
            rec: dict[str, Any] = {"log_bytes": log_bytes(files.engine.path), **pg_sizes(root),
                                   "load_s": round(loaded, 1),
                                   "first_search_s": round(first, 2),
                                   "files_first_search_s": first_files and round(first_files, 2)}
            rec["index/rows"] = round(rec["index_bytes"] / max(rec["row_bytes"], 1), 2)
            rec["index/tl_rows"] = round(rec["index_bytes"] / max(rec["tl_rows_bytes"], 1), 2)
            out["sizes"][size] = rec
            pg_tools[size], file_tools[size] = tool, ftool
            log(f"{size} MiB: {rec}")
        times: dict[int, list[float]] = {s: [] for s in sizes}
        ftimes: dict[int, list[float]] = {s: [] for s in sizes}
        agree: dict[int, int] = {s: 0 for s in sizes}
        hits: dict[int, int] = {s: 0 for s in sizes}
        for i, q in enumerate(qs):
            order = sizes[i % len(sizes):] + sizes[: i % len(sizes)]
            for s in order:
                t0 = time.perf_counter()
                a = ranked(pg_tools[s], q)
                times[s].append(time.perf_counter() - t0)
                top = [(x["seq"], x["score"]) for x in a.get("items", [])]
                hits[s] += bool(top)
                if file_tools[s] is None:
                    continue
                t0 = time.perf_counter()
                b = ranked(file_tools[s], q)
                ftimes[s].append(time.perf_counter() - t0)
                agree[s] += top == [(x["seq"], x["score"]) for x in b.get("items", [])]
        base = sizes[0]
        for s in sizes:
            rec = out["sizes"][s]
            rec["ranked_p50_ms"] = round(statistics.median(times[s]) * 1e3, 2)
            rec["ranked_p99_ms"] = round(pct(times[s], 0.99) * 1e3, 2)
            rec["p99_big/empty"] = round(pct(times[s], 0.99) / pct(times[base], 0.99), 2)
            rec["queries_with_hits"] = hits[s]
            if ftimes[s]:
                rec["files_ranked_p50_ms"] = round(statistics.median(ftimes[s]) * 1e3, 2)
                rec["files_ranked_p99_ms"] = round(pct(ftimes[s], 0.99) * 1e3, 2)
                rec["top10_equal_to_files"] = f"{agree[s]}/{len(qs)}"
        log(f"search: {out['sizes']}")
        if not args.no_append:
            out["append"] = measure_append(roots[sizes[-1]], sizes[-1], log)
        out["machine"] = {"cpus": os.cpu_count(), "load_at_end": os.getloadavg()}
        print(json.dumps(out, indent=1))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1)
    finally:
        from ledger.storage.postgres.connect import close_pools

        close_pools()
        cluster.remove()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
