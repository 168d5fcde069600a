"""Forking a long history (issue 33), one run.

    python -m bench.fork_bench [--sizes 100,1024] [--rounds 3] [--json FILE]
                               [--layout grown|flat] [--only files] [--citus DSN]

At each history size (MiB of stored rows, the corpus of ``bench.corpus``,
then a rollover and a 200-row window as ``bench.postgres_bench`` builds
them), in one process, interleaved round by round:

- ``files``: ``History.fork`` at the head of a file-engine history. Its
  segments (``--layout``): ``grown`` (the default) is the shape appends and
  their automatic merges keep with the Store's default 64 KiB cap (about
  15 MiB segments, then fewer than 16 of about 1 MiB, then fewer than 16 of
  64 KiB: ``merge.classes``; a history grown by ``append_many`` to 100 MiB
  had 22 segments), written by ``bulk_load`` in three parts; ``flat`` is
  every segment at 64 KiB (17,000 at 1 GiB), which only a bulk load with
  that target makes (this benchmark's first two rounds measured it);
- ``files_mid``: ``History.fork`` of the same history at a batch end near
  its middle, inside a sealed segment (its prefix is copied);
- ``pg``: ``History.fork`` on PostgreSQL (a private cluster, fsync on), the
  same rows loaded byte for byte (``load_rows``);
- ``sdk``: the Agents SDK's ``AdvancedSQLiteSession.create_branch_from_turn``
  on its newest user turn, over the same rows as SDK items
  (``{"role", "content"}``), added with its own ``add_items``.

With ``--citus DSN`` (a running cluster: ``python -m tests.helpers.citus_cluster
start DIR``) it measures Citus alone instead, in a new schema per size: the
rows loaded byte for byte, then ``History.fork`` at the head (wall time, and
the bytes it added: ``citus_total_relation_size`` of the engine's tables,
summed over the workers), and a turn on the newest fork against the same turn
on its source, interleaved.

Each fork's wall time (on files, its CPU time too) and the bytes it added:
on files, the fork directory's files whose inode the source does not share
(hard-linked segments cost nothing); on PostgreSQL, ``pg_database_size``
after a ``CHECKPOINT``; for the SDK, its database file and WAL. Then a turn
(append 3 rows and read the provider view) on the newest fork against the
same turn on its source, interleaved: the ratio should be flat (about 1).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from typing import TYPE_CHECKING, Any, cast

import msgspec

from bench.corpus import STORED_OVERHEAD, Corpus, load_corpus
from bench.measure import interleave, ratio
from bench.output import emit, machine, progress
from bench.postgres_bench import history_batches
from bench.sqlrow import one
from ledger.storage.files.bulk import bulk_load
from ledger.transcript.history import History
from ledger.transcript.store import Store

if TYPE_CHECKING:
    from agents import TResponseInputItem

MIB = 1 << 20
WS = "bench"
SEGMENT = 64 << 10  # the Store's default segment size
_enc = msgspec.json.Encoder()


def _item(row: dict[str, Any]) -> dict[str, Any]:
    """The SDK item of a corpus row: the same role and bytes of content."""
    parts = row.get("parts") or []
    texts = [p.get("text") for p in parts if isinstance(p, dict)]
    content = "\n".join(t for t in texts if isinstance(t, str)) if all(
        isinstance(t, str) for t in texts) else _enc.encode(parts).decode("utf-8")
    return {"role": "user" if row.get("role") == "user" else "assistant", "content": content}


def _stored(batch: list[dict[str, Any]]) -> int:
    return sum(len(_enc.encode(r)) + STORED_OVERHEAD for r in batch)


def build_files(h: Any, batches: list[Any], layout: str) -> None:
    """Write ``batches`` into file history ``h`` in ``layout`` (module doc)."""
    if layout == "flat":
        bulk_load(h, batches, SEGMENT, durability="off", internal=True)
        return
    # The newest ~8 MiB in 1 MiB segments, the newest ~512 KiB of those in
    # 64 KiB ones (the middle of "fewer than 16" of each), the rest in 15 MiB.
    cut_small = cut_mid = len(batches)
    acc = 0
    for i in range(len(batches) - 1, -1, -1):
        acc += _stored(batches[i])
        if acc <= 512 << 10:
            cut_small = i
        if acc > 8 << 20:
            break
        cut_mid = i
    for part, target in ((batches[:cut_mid], 15 << 20), (batches[cut_mid:cut_small], 1 << 20),
                         (batches[cut_small:], SEGMENT)):
        if part:
            bulk_load(h, part, target, durability="off", internal=True)


def _new_inode_bytes(source: str, fork: str) -> tuple[int, int]:
    """(bytes of the fork's files the source does not share, their count)."""
    shared = set()
    for base, _dirs, files in os.walk(source):
        for name in files:
            shared.add(os.lstat(os.path.join(base, name)).st_ino)
    added = count = 0
    for base, _dirs, files in os.walk(fork):
        for name in files:
            st = os.lstat(os.path.join(base, name))
            if st.st_ino not in shared:
                added += st.st_size
                count += 1
    return added, count


class World:
    """One history size on the three contenders."""

    def __init__(self, tmp: str, server: str | None, corpus: Corpus, size_mib: int, log: Any,
                 layout: str) -> None:
        self.size = size_mib
        self.corpus = corpus
        self.k = 0
        self.files_root = os.path.join(tmp, f"files-{size_mib}")
        batches, tail = history_batches(corpus, size_mib)
        batches = [*batches, *tail]  # a rollover, then a 200-row window
        t0 = time.monotonic()
        self.files = Store(self.files_root).history(WS)
        build_files(self.files, batches, layout)
        os.sync()  # the build's bytes: not the first fork's to flush
        wsdir = os.path.join(self.files_root, WS)
        self.segments = sum(1 for n in os.listdir(wsdir) if n.startswith("seg-"))
        log(f"{size_mib} MiB: files built in {time.monotonic() - t0:.1f}s "
            f"({self.segments} segments, {layout})")
        self.mid = self._batch_end_near(sum(len(b) for b in batches) // 2)
        self.forks: dict[str, list[Any]] = {"files": [], "files_mid": [], "pg": [], "sdk": []}
        self.server = server
        if server is None:
            return
        import psycopg
        from agents.extensions.memory import AdvancedSQLiteSession

        db = f"fork_{size_mib}"
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {db}")
            conn.execute(f"CREATE DATABASE {db}")
        self.db = db
        self.pg_root = server.replace("/postgres?", f"/{db}?", 1)
        t0 = time.monotonic()
        self.pg = Store(self.pg_root).history(WS)
        self.pg.engine.load_rows(self.files.rows())
        log(f"{size_mib} MiB: PostgreSQL loaded in {time.monotonic() - t0:.1f}s")
        t0 = time.monotonic()
        self.sdk_path = os.path.join(tmp, f"sdk-{size_mib}.db")
        self.sdk = AdvancedSQLiteSession(session_id=WS, db_path=self.sdk_path,
                                         create_tables=True)
        items = [_item(row) for b in batches for row in b
                 if row.get("kind", "message") == "message"]
        if not any(i["role"] == "user" for i in items):
            items.append({"role": "user", "content": "a turn"})
        self.users = sum(i["role"] == "user" for i in items)
        for i in range(0, len(items), 5000):
            # The SDK's item type is a union of TypedDicts; these are its plain
            # role + content messages (``_item``).
            asyncio.run(self.sdk.add_items(cast("list[TResponseInputItem]", items[i:i + 5000])))
        log(f"{size_mib} MiB: AdvancedSQLiteSession built in {time.monotonic() - t0:.1f}s "
            f"({len(items)} items, {self.users} user turns)")

    def _batch_end_near(self, seq: int) -> int:
        """The seq of the first batch end at or after ``seq`` (a fork point)."""
        for row in self.files.rows(seq - 1 if seq > 1 else None):
            if row.batch["i"] == row.batch["n"] - 1:
                return int(row.seq)
        return seq

    # --- sizes ------------------------------------------------------------------------

    def pg_size(self) -> int:
        import psycopg

        if self.server is None:
            raise RuntimeError("no PostgreSQL server: no database size")
        with psycopg.connect(self.server, autocommit=True) as conn:
            conn.execute("CHECKPOINT")
            row = conn.execute("SELECT pg_database_size(%s)", (self.db,)).fetchone()
        return int(row[0]) if row else 0

    def sdk_size(self) -> int:
        return sum(os.path.getsize(self.sdk_path + s) for s in ("", "-wal", "-journal")
                   if os.path.exists(self.sdk_path + s))

    # --- the forks --------------------------------------------------------------------

    def fork_files(self, n: int, at: int | None = None) -> dict[str, float]:
        name = f"{WS}-f{n}" if at is None else f"{WS}-m{n}"
        t0, c0 = time.perf_counter(), time.process_time()
        fork = self.files.fork(name, at=at)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        added, files = _new_inode_bytes(os.path.join(self.files_root, WS),
                                        os.path.join(self.files_root, fork.workspace))
        self.forks["files" if at is None else "files_mid"].append(fork)
        return {"ms": wall * 1e3, "cpu_ms": cpu * 1e3, "added_bytes": added, "new_files": files}

    def fork_pg(self, n: int) -> dict[str, float]:
        before = self.pg_size()
        t0 = time.perf_counter()
        fork = self.pg.fork(f"{WS}-f{n}")
        wall = time.perf_counter() - t0
        self.forks["pg"].append(fork)
        return {"ms": wall * 1e3, "added_bytes": self.pg_size() - before}

    def fork_sdk(self, n: int) -> dict[str, float]:
        if n:
            asyncio.run(self.sdk.switch_to_branch("main"))
        turns = asyncio.run(self.sdk.get_conversation_turns())
        newest = turns[-1]["turn"]
        before = self.sdk_size()
        t0 = time.perf_counter()
        asyncio.run(self.sdk.create_branch_from_turn(newest, f"b{n}"))
        wall = time.perf_counter() - t0
        return {"ms": wall * 1e3, "added_bytes": self.sdk_size() - before}

    # --- a turn -----------------------------------------------------------------------

    def turn(self, h: Any) -> int:
        self.k += 1
        h.append_many(self.corpus.sized_batch(3, 400, self.k))
        return len(h.provider_view())

    def close(self) -> None:
        if self.server is None:
            return
        from ledger.storage.postgres.connect import close_pools

        self.sdk.close()
        close_pools(self.pg_root)


def _median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def run(sizes: list[int], rounds: int, log: Any, layout: str = "grown",
        only_files: bool = False) -> dict[str, Any]:
    from tests.helpers.pg_cluster import Cluster

    corpus = load_corpus()
    tmp = tempfile.mkdtemp(prefix="tledger-forkbench-")
    cluster = None if only_files else Cluster(fast=False)
    server = cluster.start() if cluster is not None else None
    out: dict[str, Any] = {"corpus": corpus.source, "sizes_mib": sizes, "layout": layout,
                           "segments": {}, "fork": {}, "turn_ms": {}, "ratios": {}}
    try:
        for size in sizes:
            w = World(tmp, server, corpus, size, log, layout)
            out["segments"][size] = w.segments
            forks: dict[str, Any] = {"files": w.fork_files,
                                     "files_mid": lambda n, w=w: w.fork_files(n, at=w.mid)}
            if server is not None:
                forks.update(pg=w.fork_pg, sdk=w.fork_sdk)
            got: dict[str, list[dict[str, float]]] = {k: [] for k in forks}
            for n in range(rounds):  # interleaved: each contender once per round
                for k, fork in forks.items():
                    got[k].append(fork(n))
                log(f"{size} MiB round {n}: " + ", ".join(
                    f"{k} {v[-1]['ms']:.1f} ms +{v[-1]['added_bytes'] / MIB:.2f} MiB"
                    for k, v in got.items()))
            out["fork"][size] = {
                k: {"ms_median": round(_median([r["ms"] for r in v]), 2),
                    **({"cpu_ms_median": round(_median([r["cpu_ms"] for r in v]), 2)}
                       if "cpu_ms" in v[0] else {}),
                    "added_bytes_median": int(_median([r["added_bytes"] for r in v])),
                    "rounds": v}
                for k, v in got.items()}
            turn: dict[str, Any] = {
                "files_source": lambda w=w: w.turn(w.files),
                "files_fork": lambda w=w, f=w.forks["files"][-1]: w.turn(f)}
            if server is not None:
                turn.update(pg_source=lambda w=w: w.turn(w.pg),
                            pg_fork=lambda w=w, f=w.forks["pg"][-1]: w.turn(f))
            turns = interleave(turn, min_runs=30, max_runs=30, budget_s=120)
            t = {k: round(s.of_runs(50) * 1e3, 3) for k, s in turns.items()}
            out["turn_ms"][size] = t
            fk = out["fork"][size]
            r = {"files_turn_fork_over_source": ratio(t["files_fork"], t["files_source"])}
            if server is not None:
                r.update(
                    sdk_branch_over_files_fork_ms=ratio(fk["sdk"]["ms_median"],
                                                        fk["files"]["ms_median"]),
                    sdk_branch_over_pg_fork_ms=ratio(fk["sdk"]["ms_median"],
                                                     fk["pg"]["ms_median"]),
                    pg_turn_fork_over_source=ratio(t["pg_fork"], t["pg_source"]))
            out["ratios"][size] = r
            log(f"{size} MiB: turns {t} ratios {r}")
            w.close()
            shutil.rmtree(w.files_root, ignore_errors=True)
    finally:
        if cluster is not None:
            cluster.remove()
        shutil.rmtree(tmp, ignore_errors=True)
    return out


CITUS_TABLES = ("tl_rows", "tl_batches", "tl_head", "tl_lineage")


def _citus_bytes(root: str) -> int:
    import psycopg

    with psycopg.connect(root, autocommit=True) as conn:
        got = 0
        for table in CITUS_TABLES:
            exists = "SELECT to_regclass(%s) IS NOT NULL"
            if one(conn.execute(exists, (table,)).fetchone(), exists)[0]:
                size = "SELECT citus_total_relation_size(%s)"
                got += int(one(conn.execute(size, (table,)).fetchone(), size)[0])
        return got


def run_citus(dsn: str, sizes: list[int], rounds: int, log: Any) -> dict[str, Any]:
    """``--citus`` (module doc): fork time and added bytes, and the turn on
    a fork over the turn on its source, per size."""
    from urllib.parse import quote

    import psycopg

    from ledger.storage.postgres.connect import close_pools

    corpus = load_corpus()
    tmp = tempfile.mkdtemp(prefix="tledger-forkbench-citus-")
    out: dict[str, Any] = {"corpus": corpus.source, "sizes_mib": sizes, "fork": {},
                           "turn_ms": {}, "ratios": {}}
    try:
        for size in sizes:
            schema = f"forkbench_{size}"
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
                conn.execute(f"CREATE SCHEMA {schema}")
            root = dsn + ("&" if "?" in dsn else "?") + "options=" + quote(
                f"-c search_path={schema}", safe="")
            batches, tail = history_batches(corpus, size)
            files = Store(os.path.join(tmp, f"files-{size}")).history(WS)
            bulk_load(files, [*batches, *tail], SEGMENT, durability="off", internal=True)
            t0 = time.monotonic()
            source = Store(root).history(WS)
            source.engine.load_rows(files.rows())
            log(f"{size} MiB: Citus loaded in {time.monotonic() - t0:.1f}s")
            w = World.__new__(World)  # only its turn (the corpus and a counter)
            w.corpus, w.k = corpus, 0
            got: list[dict[str, float]] = []
            forks = []
            for n in range(rounds):
                before = _citus_bytes(root)
                t0 = time.perf_counter()
                forks.append(source.fork(f"{WS}-f{n}"))
                wall = time.perf_counter() - t0
                got.append({"ms": wall * 1e3, "added_bytes": _citus_bytes(root) - before})
                log(f"{size} MiB round {n}: citus {got[-1]['ms']:.1f} ms "
                    f"+{got[-1]['added_bytes'] / MIB:.2f} MiB")
            out["fork"][size] = {
                "ms_median": round(sorted(r["ms"] for r in got)[len(got) // 2], 2),
                "added_bytes_median": int(sorted(r["added_bytes"] for r in got)[len(got) // 2]),
                "rounds": got}
            # Functions, not lambdas binding by defaults (python/mypy#15459).
            def source_turn(w: World = w, h: History = source) -> Any:
                return w.turn(h)

            def fork_turn(w: World = w, f: History = forks[-1]) -> Any:
                return w.turn(f)

            turns = interleave({
                "citus_source": source_turn,
                "citus_fork": fork_turn,
            }, min_runs=30, max_runs=30, budget_s=120)
            t = {k: round(v.of_runs(50) * 1e3, 3) for k, v in turns.items()}
            out["turn_ms"][size] = t
            out["ratios"][size] = {"citus_turn_fork_over_source":
                                   ratio(t["citus_fork"], t["citus_source"])}
            log(f"{size} MiB: turns {t} ratios {out['ratios'][size]}")
            close_pools(root)
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA {schema} CASCADE")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.fork_bench",
                                description=__doc__.split("\n\n")[1])
    p.add_argument("--sizes", default="100,1024", metavar="MIB,...")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--layout", choices=("grown", "flat"), default="grown",
                   help="the file history's segments (module doc)")
    p.add_argument("--only", choices=("files",), help="skip PostgreSQL and the SDK")
    p.add_argument("--citus", metavar="DSN", help="measure Citus alone, on this cluster")
    args = p.parse_args(argv)
    log = progress()
    sizes = sorted({int(x) for x in args.sizes.split(",")})
    doc = (run_citus(args.citus, sizes, args.rounds, log) if args.citus
           else run(sizes, args.rounds, log, args.layout, args.only == "files"))
    doc["machine"] = machine()
    emit(doc, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
