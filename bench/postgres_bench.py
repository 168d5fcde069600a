"""The PostgreSQL engine beside the file engine and the baselines, in one run.

    python -m bench.postgres_bench [--quick] [--sizes 0,10,100] [--json FILE]

A private PostgreSQL cluster with fsync on (``tests/helpers/pg_cluster.py``,
``fast=False``) on this machine's disk; every contender runs interleaved
with the others at each history size (``bench.measure.interleave``):

- ``pg`` / ``files``: our engines. A *turn* appends 3 rows, reads the
  provider view of a 200-row window and counts its tokens (gpt-4o).
- ``sqlite``: the SQLite session baseline of ``bench.baselines`` (WAL,
  synchronous=FULL): a turn inserts 3 items and reads the whole session.
- ``pg_session_table``: a session table in the same PostgreSQL server, read
  whole every turn as ``SQLAlchemySession``-style sessions do (plain psycopg:
  one ``SELECT message_data ... ORDER BY id``, JSON-decoded), then the tokens
  of its newest 200 items.

Histories are built with the corpus of ``bench.corpus`` (real transcripts
when ../shared is present): the file engine's ``bulk_load``, copied to
PostgreSQL byte for byte with ``load_rows`` (COPY). Throughput: 16 writer
processes, each appending to its own workspace, against 1 process.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

import msgspec

from bench.baselines import SqliteSession
from bench.corpus import REPO, Corpus, load_corpus
from bench.measure import interleave, ratio
from bench.output import emit, machine, progress
from ledger.storage.files.bulk import bulk_load
from ledger.tokens.counting import TokenCounter
from ledger.transcript.history import LEAD_IN_TEXT
from ledger.transcript.store import Store

MIB = 1 << 20
WINDOW_ROWS = 200
WS = "bench"
_enc = msgspec.json.Encoder()


def history_batches(corpus: Corpus, size_mib: int) -> tuple[list[Any], list[Any]]:
    """The batches of a ``size_mib`` history, then those of its last window:
    a rollover (reset, lead-in) and WINDOW_ROWS rows after it."""
    batches = list(corpus.batches(size_mib * MIB, seed=size_mib + 1)) if size_mib else []
    window = corpus.window_rows(WINDOW_ROWS, seed=42)
    reset = {"kind": "reset", "role": "system", "parts": [], "reset": {"reason": "rollover"}}
    lead = {"kind": "lead_in", "role": "system",
            "parts": [{"type": "text", "text": LEAD_IN_TEXT.format(window=1, tool="")}],
            "meta": {"window": 1, "session_history": True}}
    tail = [[reset, lead, window[0]]] + [window[i : i + 2] for i in range(1, WINDOW_ROWS, 2)]
    return batches, tail


class Worlds:
    """One history size: our two engines and the two session-table peers."""

    def __init__(self, tmp: str, server: str, corpus: Corpus, size_mib: int) -> None:
        import psycopg

        self.size = size_mib
        self.corpus = corpus
        db = f"bench_{size_mib}"
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {db}")
            conn.execute(f"CREATE DATABASE {db}")
        self.pg_root = server.replace("/postgres?", f"/{db}?", 1)
        self.files = Store(os.path.join(tmp, f"files-{size_mib}")).history(WS)
        self.sqlite = SqliteSession(os.path.join(tmp, f"sqlite-{size_mib}", "s.db"))
        self.table = psycopg.connect(self.pg_root, autocommit=True)
        self.table.execute("CREATE TABLE agent_messages (id bigserial PRIMARY KEY, session_id "
                           "text NOT NULL, message_data text NOT NULL, created_at timestamptz "
                           "DEFAULT now())")
        self.table.execute("CREATE INDEX ON agent_messages (session_id, id)")
        self._build()
        self.pg = Store(self.pg_root).history(WS)
        self.counter = TokenCounter("gpt-4o")
        self.k = 0

    def _build(self) -> None:
        batches, tail = history_batches(self.corpus, self.size)
        bulk_load(self.files, [*batches, *tail], 64 * MIB, durability="off", internal=True)
        Store(self.pg_root).history(WS).engine.load_rows(self.files.rows())
        items = [row for b in batches for row in b] + [row for b in tail for row in b]
        self.sqlite.grow([items])
        with self.table.cursor().copy(
                "COPY agent_messages (session_id, message_data) FROM STDIN") as copy:
            for row in items:
                copy.write_row((WS, _enc.encode(row).decode("utf-8")))
        self.table.execute("ANALYZE agent_messages")
        os.sync()

    def batch(self) -> list[dict[str, Any]]:
        self.k += 1
        return self.corpus.sized_batch(3, 400, self.k)

    # --- the contenders ---------------------------------------------------------------

    def turn_ours(self, h: Any) -> int:
        h.append_many(self.batch())
        view = h.provider_view()
        return int(self.counter.rows([r.to_dict() for r in view]).tokens)

    def turn_sqlite(self) -> int:
        self.sqlite.add_items(self.batch())
        items = self.sqlite.get_items()
        return int(self.counter.rows(items[-WINDOW_ROWS:]).tokens)

    def turn_table(self) -> int:
        with self.table.transaction():
            with self.table.cursor() as cur:
                cur.executemany("INSERT INTO agent_messages (session_id, message_data) VALUES "
                                "(%s, %s)", [(WS, _enc.encode(r).decode()) for r in self.batch()])
        got = self.table.execute("SELECT message_data FROM agent_messages WHERE session_id = "
                                 "%s ORDER BY id", (WS,)).fetchall()
        items = [json.loads(text) for (text,) in got]
        return int(self.counter.rows(items[-WINDOW_ROWS:]).tokens)

    def close(self) -> None:
        from ledger.storage.postgres.connect import close_pools

        self.table.close()
        self.sqlite.close()
        close_pools(self.pg_root)


def throughput(server: str, processes: int, batches: int, tmp: str) -> float:
    """Batches per second, all processes together, each on its own workspace."""
    import psycopg

    db = f"tput_{processes}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {db}")
        conn.execute(f"CREATE DATABASE {db}")
    return writers_throughput(server.replace("/postgres?", f"/{db}?", 1), processes, batches,
                              tmp)


def writers_throughput(root: str, processes: int, batches: int, tmp: str) -> float:
    """Batches per second of ``processes`` writer processes (``tests/helpers/writer_proc.py
    threads``, durability off), each appending to its own workspace of ``root``."""
    Store(root).history("warm").append({"role": "user", "parts": []})  # the schema
    go = os.path.join(tmp, f"go-{processes}-{time.monotonic_ns()}")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    writer = str(REPO / "tests" / "helpers" / "writer_proc.py")
    procs = [subprocess.Popen([sys.executable, writer, "threads", root, f"ws-{i}", "1",
                               str(batches), go, str(i)], stdout=subprocess.PIPE, env=env)
             for i in range(processes)]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline() == b"ready\n"
    t0 = time.perf_counter()
    open(go, "w").close()
    for p in procs:
        p.communicate(timeout=600)
        assert p.returncode == 0
    return processes * batches / (time.perf_counter() - t0)


def run(sizes: list[int], quick: bool, log: Any) -> dict[str, Any]:
    from tests.helpers.pg_cluster import Cluster

    corpus = load_corpus()
    tmp = tempfile.mkdtemp(prefix="tledger-pgbench-")
    cluster = Cluster(fast=False)  # its own temp dir: the server user must reach it
    server = cluster.start()
    out: dict[str, Any] = {"corpus": corpus.source, "sizes_mib": sizes, "turn_ms": {},
                           "append_ms": {}, "ratios": {}}
    try:
        for size in sizes:
            t0 = time.monotonic()
            w = Worlds(tmp, server, corpus, size)
            log(f"{size} MiB built in {time.monotonic() - t0:.1f}s")
            runs = 15 if quick else 40
            # Functions, not lambdas binding ``w`` by a default: mypy cannot type
            # those (python/mypy#15459); the same calls, the same frames.
            def pg_turn(w: Worlds = w) -> Any:
                return w.turn_ours(w.pg)

            def files_turn(w: Worlds = w) -> Any:
                return w.turn_ours(w.files)

            def pg_append(w: Worlds = w) -> Any:
                return w.pg.append_many(w.batch())

            def files_append(w: Worlds = w) -> Any:
                return w.files.append_many(w.batch())

            def sqlite_append(w: Worlds = w) -> Any:
                return w.sqlite.add_items(w.batch())

            turns = interleave({
                "pg": pg_turn,
                "files": files_turn,
                "pg_session_table": w.turn_table,
                "sqlite": w.turn_sqlite,
            }, min_runs=runs, max_runs=runs, budget_s=60)
            appends = interleave({
                "pg": pg_append,
                "files": files_append,
                "sqlite": sqlite_append,
            }, min_runs=runs * 7, max_runs=runs * 7, budget_s=60)
            out["turn_ms"][size] = {k: round(s.of_runs(50) * 1e3, 3) for k, s in turns.items()}
            out["append_ms"][size] = {k: {"p50": round(s.of_runs(50) * 1e3, 3),
                                          "p99": round(s.of_runs(99) * 1e3, 3)}
                                      for k, s in appends.items()}
            log(f"{size} MiB: turns {out['turn_ms'][size]} appends {out['append_ms'][size]}")
            w.close()
        big, empty = max(sizes), min(sizes)
        t = out["turn_ms"]
        out["ratios"] = {
            "pg_turn_big_over_empty": ratio(t[big]["pg"], t[empty]["pg"]),
            "files_turn_big_over_empty": ratio(t[big]["files"], t[empty]["files"]),
            "session_table_over_pg_turn_at_big": ratio(t[big]["pg_session_table"],
                                                       t[big]["pg"]),
            "sqlite_over_pg_turn_at_big": ratio(t[big]["sqlite"], t[big]["pg"]),
        }
        n = 100 if quick else 300
        one = throughput(server, 1, n, tmp)
        sixteen = throughput(server, 16, n // 2, tmp)
        out["throughput_batches_per_s"] = {"1_process": round(one, 1),
                                           "16_processes": round(sixteen, 1)}
        out["ratios"]["throughput_16_over_1"] = ratio(sixteen, one)
        log(f"ratios {out['ratios']} throughput {out['throughput_batches_per_s']}")
    finally:
        cluster.remove()
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.postgres_bench",
                                description=__doc__.split("\n\n")[1])
    p.add_argument("--quick", action="store_true", help="fewer samples")
    p.add_argument("--sizes", default="0,10,100", metavar="MIB,...")
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    log = progress()
    doc = run(sorted({int(x) for x in args.sizes.split(",")}), args.quick, log)
    doc["machine"] = machine()
    emit(doc, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
