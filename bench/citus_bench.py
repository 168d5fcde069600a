"""Citus beside single-node PostgreSQL, in one run.

    python -m bench.citus_bench [--quick] [--sizes 0,100] [--json FILE]

Two private servers on this machine, fsync on (``fast=False``): a
single-node PostgreSQL 15 (``tests/helpers/pg_cluster.py``) and a Citus 13.2
cluster of a coordinator and two workers (``tests/helpers/citus_cluster.py``), where
the store's tables are distributed by workspace.

- *turn* (as in ``bench.postgres_bench``): append 3 rows, read the provider
  view of a 200-row window and count its tokens (gpt-4o); ``pg`` and
  ``citus`` at every history size, all interleaved in one loop. On Citus each statement goes
  client -> coordinator -> the worker holding the workspace's shard.
- *append*: 3-row batches alone, p50 and p99.
- *throughput*: 16 writer processes, each appending to its own workspace,
  through the coordinator of a database with one worker registered and of
  one with two (the same servers: ``pg_dist_node`` is per database), and on
  the single node for reference.

The histories are the corpus of ``bench.corpus`` (real transcripts when
../shared is present), built with the file engine's ``bulk_load`` and copied
byte for byte into both databases with ``load_rows`` (COPY).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from bench.corpus import Corpus, load_corpus
from bench.measure import interleave, ratio
from bench.output import emit, machine, progress
from bench.postgres_bench import MIB, WS, history_batches, writers_throughput
from ledger.storage.files.bulk import bulk_load
from ledger.tokens.counting import TokenCounter
from ledger.transcript.store import Store


class Histories:
    """One history size in both databases."""

    def __init__(self, tmp: str, pg_root: str, citus_root: str, corpus: Corpus,
                 size_mib: int) -> None:
        self.corpus = corpus
        files = Store(os.path.join(tmp, f"files-{size_mib}")).history(WS)
        batches, tail = history_batches(corpus, size_mib)
        bulk_load(files, [*batches, *tail], 64 * MIB, durability="off", internal=True)
        for root in (pg_root, citus_root):
            Store(root).history(WS).engine.load_rows(files.rows())
        self.pg = Store(pg_root).history(WS)
        self.citus = Store(citus_root).history(WS)
        self.counter = TokenCounter("gpt-4o")
        self.k = 0

    def batch(self) -> list[dict[str, Any]]:
        self.k += 1
        return self.corpus.sized_batch(3, 400, self.k)

    def turn(self, h: Any) -> int:
        h.append_many(self.batch())
        view = h.provider_view()
        return int(self.counter.rows([r.to_dict() for r in view]).tokens)


def run(sizes: list[int], quick: bool, log: Any) -> dict[str, Any]:
    import psycopg

    from ledger.storage.postgres.connect import close_pools
    from tests.helpers.citus_cluster import CitusCluster
    from tests.helpers.pg_cluster import Cluster

    corpus = load_corpus()
    tmp = tempfile.mkdtemp(prefix="tledger-citusbench-")
    single = Cluster(fast=False)
    citus = CitusCluster(fast=False)
    out: dict[str, Any] = {"corpus": corpus.source, "sizes_mib": sizes, "turn_ms": {},
                           "append_ms": {}, "ratios": {}}
    try:
        server = single.start()
        citus.start()
        log("servers up")
        worlds: dict[int, Histories] = {}
        roots: list[str] = []
        for size in sizes:
            t0 = time.monotonic()
            with psycopg.connect(server, autocommit=True) as conn:
                conn.execute(f"CREATE DATABASE bench_{size}")
            roots += [single.dsn(f"bench_{size}"), citus.add_database(f"bench_{size}")]
            worlds[size] = Histories(tmp, roots[-2], roots[-1], corpus, size)
            log(f"{size} MiB built in {time.monotonic() - t0:.1f}s")
        runs = 15 if quick else 80
        # Every contender of every size in one interleaved loop: a load that
        # drifts during the run weighs on all of them alike.
        # Functions, not lambdas binding by defaults: mypy cannot type those
        # (python/mypy#15459); the same calls, the same frames.
        turn: dict[str, Callable[[], Any]] = {}
        append: dict[str, Callable[[], Any]] = {}
        for size, w in worlds.items():
            for eng in ("pg", "citus"):
                def one_turn(w: Histories = w, eng: str = eng) -> Any:
                    return w.turn(getattr(w, eng))

                def one_append(w: Histories = w, eng: str = eng) -> Any:
                    return getattr(w, eng).append_many(w.batch())

                turn[f"{eng}@{size}"] = one_turn
                append[f"{eng}@{size}"] = one_append
        turns = interleave(turn, min_runs=runs, max_runs=runs, budget_s=120)
        appends = interleave(append, min_runs=runs * 5, max_runs=runs * 5, budget_s=120)
        for size in sizes:
            out["turn_ms"][size] = {eng: round(turns[f"{eng}@{size}"].of_runs(50) * 1e3, 3)
                                    for eng in ("pg", "citus")}
            out["append_ms"][size] = {
                eng: {"p50": round(appends[f"{eng}@{size}"].of_runs(50) * 1e3, 3),
                      "p99": round(appends[f"{eng}@{size}"].of_runs(99) * 1e3, 3)}
                for eng in ("pg", "citus")}
            log(f"{size} MiB: turns {out['turn_ms'][size]} appends {out['append_ms'][size]}")
        for root in roots:
            close_pools(root)
        big, empty = max(sizes), min(sizes)
        t = out["turn_ms"]
        out["ratios"] = {f"citus_over_pg_turn_at_{s}": ratio(t[s]["citus"], t[s]["pg"])
                         for s in sizes}
        out["ratios"]["citus_turn_big_over_empty"] = ratio(t[big]["citus"], t[empty]["citus"])
        out["ratios"]["pg_turn_big_over_empty"] = ratio(t[big]["pg"], t[empty]["pg"])
        n = 60 if quick else 150
        roots_tput = {"citus_1_worker": citus.add_database("tput_1", workers=1),
                      "citus_2_workers": citus.add_database("tput_2", workers=2)}
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute("CREATE DATABASE tput")
        roots_tput["pg_single_node"] = single.dsn("tput")
        runs_tput: dict[str, list[float]] = {k: [] for k in roots_tput}
        for _ in range(1 if quick else 2):  # alternated, the best kept: load drifts
            for label, root in roots_tput.items():
                runs_tput[label].append(round(writers_throughput(root, 16, n, tmp), 1))
                log(f"{label}: {runs_tput[label][-1]} batches/s")
        tput = {k: max(v) for k, v in runs_tput.items()}
        out["throughput_runs"] = runs_tput
        out["throughput_16_writers_batches_per_s"] = tput
        out["ratios"]["throughput_2_workers_over_1"] = ratio(tput["citus_2_workers"],
                                                            tput["citus_1_worker"])
        log(f"ratios {out['ratios']} throughput {tput}")
    finally:
        close_pools()
        single.remove()
        citus.remove()
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.citus_bench",
                                description=__doc__.split("\n\n")[1])
    p.add_argument("--quick", action="store_true", help="fewer samples")
    p.add_argument("--sizes", default="0,100", metavar="MIB,...")
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    log = progress()
    doc = run(sorted({int(x) for x in args.sizes.split(",")}), args.quick, log)
    doc["machine"] = machine()
    emit(doc, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
