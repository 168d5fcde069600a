"""LangGraph checkpointers: one agent step on one ever-longer thread.

A step is one turn of a LangGraph agent: ``graph.invoke`` with a user message
on a ``MessagesState`` graph whose ``agent`` node (a fake model, no network)
answers with one AI message. LangGraph loads the thread (``get_tuple``),
writes the input checkpoint, the step-0 checkpoint, the node's writes and the
step-1 checkpoint: 3 ``put`` and 2 ``put_writes`` per step.

Contenders, all with durability off (no fsync: the cost measured is the
checkpointer's, not the disk's flush latency):

``ledger``   ``LedgerSaver`` over ``Store(durability="off")``;
``sqlite``   langgraph-checkpoint-sqlite's ``SqliteSaver`` (WAL, ``synchronous=OFF``);
``postgres`` langgraph-checkpoint-postgres's ``PostgresSaver`` on a throwaway
             cluster (``tests/helpers/pg_cluster.py``, ``synchronous_commit=off``).

Measured at 100, 1,000 and 10,000 steps of one thread, as medians over the
``WINDOW`` steps that end there: the wall time of a step, the process CPU
time it took (every thread, user and system: steadier than wall time on a
shared machine), and the wall and CPU time spent inside the saver's methods
(LangGraph runs puts on a background thread, so the wall time can exceed the
step's; the CPU time of the calling thread leaves out waiting for the GIL,
which the graph's own per-message work holds more as the thread grows);
and the bytes the thread takes on disk (the workspace's files; the SQLite
file with its WAL; the PostgreSQL tables with their indexes and TOAST).
SQLite's saver stores the whole message list again in every checkpoint
(O(N^2) bytes: about 1 GB at 1,000 steps) and PostgreSQL's every new
version of it, so they run for real to 1,000 steps; at 10,000 their step is
timed on a thread seeded with 9,970 steps of messages in one
``update_state``, and their bytes are projected from the 100- and 1,000-step
measurements (a*N^2 + b*N, marked "projected"). Ours runs all 10,000 steps.

Before the first point each contender runs a **warm-up**: ``WARMUP_STEPS``
untimed steps of a throwaway thread on a throwaway instance of the same
contender (its own store, SQLite file, or the PostgreSQL tables truncated
after it), so the 100-step point measures a process that has already run
the graph, the saver's code paths and the engine's first-call work
(imports, serializer and struct set-up, the first directory and lock files).
Without it the 100-step point came seconds after start-up and once cost 2.8
times the 1,000-step one for both threads (``bench/RESULTS.md``, eighth
round), which made the in-sequence 10,000 / 100 ratio meaningless. The
ratio still means what it meant: the saver CPU per step at 10,000 steps over
that at 100 steps of one thread.

Ours is also measured against a **reference thread** side by side: at each
size, its ``WINDOW`` timed steps alternate with the steps of a new thread of
the same saver type (its own store in the same process) that ends at
``REF_STEPS`` steps. Load from other processes and the process's own state
(heap size, caches) then hit both alike, so ``saver_cpu_ms / ref_saver_cpu_ms``
isolates the thread's length; the plain 10,000 / 100 ratio compares points
measured minutes apart.

``--direct`` measures our saver without a graph: the calls LangGraph makes
in a step (``get_tuple``, three ``put``, two ``put_writes``), built with
``create_checkpoint``, on a thread of 10,000 steps and one of 100 (two stores
in one process), ``DIRECT_RUNS`` steps each, interleaved; only the time
inside the saver's methods counts. It separates the saver's own growth from
the graph's work between its calls.

``--cold`` asks how much of the saver's CPU at 10,000 steps is the cache
state LangGraph leaves it in: two ``REF_STEPS``-step threads of our saver in
one process (each its own store), their last ``WINDOW`` steps alternating,
the same graph, except that before each of the second thread's saver calls
``COLD_EVICT_MIB`` of memory are written (more than the last-level cache), so
its calls start with the CPU caches as cold as after a long thread's graph
work (which walks a 20,000-message state between every two saver calls).
The eviction is outside the timed window. Its ``ratio`` (cold / warm) is
the part of the 10,000 / 100 ratio that a 100-step thread shows too once
its caches are cold. ``--cold --long`` adds a third thread grown to 10,000
steps (``SIZES[-1]``, no eviction: its own graph work leaves its caches
cold), the three threads' last ``WINDOW`` steps in turn (each order once
every three steps), and reports ``long / cold`` (both points cold: what is
left of the 10,000 / 100 ratio once the cache state is the same, the part
that the saver and the engine can change) beside ``long / warm`` (the
10,000 / 100 ratio measured in one sitting) and ``cold / warm``.

Run: ``python -m bench.langgraph_bench [--quick] [--json FILE]`` (``--quick``:
100 and 1,000 steps only). PostgreSQL runs when ``TLEDGER_TEST_PG`` is set
(``eval "$(python -m tests.helpers.pg_cluster start DIR)"``). Needs the langgraph and
bench extras.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from bench.sqlrow import one

WINDOW = 30
SIZES = (100, 1000, 10000)
REF_STEPS = 100
PEER_REAL_MAX = 1000
WARMUP_STEPS = 200

_TEXT = ("the quick brown fox jumps over the lazy dog while the agent checks the "
         "inventory, the weather and the calendar before it answers")


def _texts(k: int) -> tuple[str, str]:
    return (f"[{k}] user asks: {_TEXT[: 60 + k % 40]}",
            f"[{k}] agent answers: {_TEXT} {_TEXT[: k % 97]}")


def build_graph(saver: Any) -> Any:
    from langchain_core.messages import AIMessage
    from langgraph.graph import START, MessagesState, StateGraph

    def agent(state: MessagesState) -> dict[str, Any]:
        k = int(str(state["messages"][-1].content)[1:].split("]", 1)[0])
        return {"messages": [AIMessage(_texts(k)[1], id=f"ai-{k}")]}

    g = StateGraph(MessagesState)
    g.add_node("agent", agent)
    g.add_edge(START, "agent")
    return g.compile(checkpointer=saver)


class Timed:
    """Adds up the time spent in a saver's methods (wrapped on the instance):
    wall time, and the CPU time of the calling thread (user + system), which
    leaves out waiting for the GIL or for other processes."""

    METHODS = ("get_tuple", "put", "put_writes", "list")

    def __init__(self, saver: Any, before: Callable[[], None] | None = None) -> None:
        self.total = 0.0
        self.cpu = 0.0
        self._lock = threading.Lock()
        self._before = before  # run before each call, outside the timed window
        for name in self.METHODS:
            setattr(saver, name, self._wrap(getattr(saver, name)))

    def _wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            if self._before is not None:
                self._before()
            t, c = time.perf_counter(), time.thread_time()
            try:
                result = fn(*args, **kwargs)
                if fn.__name__ == "list":
                    result = list(result)
                return result
            finally:
                with self._lock:
                    self.total += time.perf_counter() - t
                    self.cpu += time.thread_time() - c

        return timed


def _step(app: Any, timer: Timed, cfg: dict[str, Any], k: int
          ) -> tuple[float, float, float, float]:
    """Wall time, process CPU time (every thread, user + system), and wall
    and CPU time inside the saver, of one step."""
    from langchain_core.messages import HumanMessage

    before, before_cpu = timer.total, timer.cpu
    c = time.process_time()
    t = time.perf_counter()
    app.invoke({"messages": [HumanMessage(_texts(k)[0], id=f"user-{k}")]}, cfg)
    return (time.perf_counter() - t, time.process_time() - c, timer.total - before,
            timer.cpu - before_cpu)


def _dir_bytes(path: str) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except FileNotFoundError:
                pass
    return total


# --- contenders ---------------------------------------------------------------------


class Contender(ABC):
    name = ""

    @abstractmethod
    def saver(self) -> Any: ...

    def reference(self, size: int) -> Any | None:
        """A saver for a reference thread measured beside the size point, or
        None (the peers: their bytes would count it)."""
        return None

    @abstractmethod
    def bytes(self) -> int: ...

    @abstractmethod
    def close(self) -> None: ...


class Ledger(Contender):
    name = "ledger"

    def __init__(self, tmp: str) -> None:
        from ledger import Store
        from ledger.integrations.langgraph import LedgerSaver

        self.tmp = tmp
        self.root = os.path.join(tmp, "ledger")
        self._saver = LedgerSaver(store=Store(self.root, durability="off"))

    def saver(self) -> Any:
        return self._saver

    def reference(self, size: int) -> Any:
        from ledger import Store
        from ledger.integrations.langgraph import LedgerSaver

        return LedgerSaver(store=Store(os.path.join(self.tmp, f"ref-{size}"), durability="off"))

    def bytes(self) -> int:
        return _dir_bytes(self.root)

    def close(self) -> None:
        """Nothing open between calls: the store's files stay under ``tmp``."""


class Sqlite(Contender):
    name = "sqlite"

    def __init__(self, tmp: str) -> None:
        from langgraph.checkpoint.sqlite import SqliteSaver

        self.path = os.path.join(tmp, "checkpoints.sqlite")
        self.conn = sqlite3.connect(self.path, check_same_thread=False)
        self._saver = SqliteSaver(self.conn)
        self._saver.setup()
        self.conn.execute("PRAGMA synchronous=OFF")

    def saver(self) -> Any:
        return self._saver

    def bytes(self) -> int:
        return sum(os.path.getsize(p) for p in (self.path, self.path + "-wal")
                   if os.path.exists(p))

    def close(self) -> None:
        self.conn.close()


class Postgres(Contender):
    name = "postgres"
    TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes", "checkpoint_migrations")

    def __init__(self, url: str) -> None:
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg.rows import dict_row

        self.conn = psycopg.connect(url, autocommit=True, prepare_threshold=0,
                                    row_factory=dict_row,
                                    options="-c synchronous_commit=off")
        self._saver = PostgresSaver(self.conn)
        self._saver.setup()
        for table in self.TABLES[:3]:
            self.conn.execute(f"TRUNCATE {table}")

    def saver(self) -> Any:
        return self._saver

    def bytes(self) -> int:
        row = self.conn.execute(
            "SELECT sum(pg_total_relation_size(t::regclass))::bigint AS n "
            "FROM unnest(%s::text[]) t",
            (list(self.TABLES),)).fetchone()
        return int(one(row, "pg_total_relation_size of the saver's tables")["n"])

    def close(self) -> None:
        for table in self.TABLES[:3]:
            self.conn.execute(f"TRUNCATE {table}")
        self.conn.close()


# --- runs ---------------------------------------------------------------------------


def _measure(app: Any, timer: Timed, cfg: dict[str, Any], first: int, n: int
             ) -> list[tuple[float, float, float, float]]:
    return [_step(app, timer, cfg, k) for k in range(first, first + n)]


def _point(steps: int, samples: list[tuple[float, float, float, float]], size: int, how: str
           ) -> dict[str, Any]:
    return {"steps": steps,
            "step_ms": statistics.median(s[0] for s in samples) * 1e3,
            "step_cpu_ms": statistics.median(s[1] for s in samples) * 1e3,
            "saver_ms": statistics.median(s[2] for s in samples) * 1e3,
            "saver_cpu_ms": statistics.median(s[3] for s in samples) * 1e3,
            "bytes": size, "how": how, "load": os.getloadavg()[0]}


def _side_by_side(app: Any, timer: Timed, cfg: dict[str, Any], first: int, n: int,
                  ref_saver: Any) -> tuple[list[tuple[float, float, float, float]],
                                           list[tuple[float, float, float, float]]]:
    """``n`` timed steps of the thread, alternating with the last ``n`` of a
    new reference thread of ``REF_STEPS`` steps (the first ones untimed)."""
    ref_timer = Timed(ref_saver)
    ref_app = build_graph(ref_saver)
    ref_cfg = {"configurable": {"thread_id": "reference"}}
    _measure(ref_app, ref_timer, ref_cfg, 0, REF_STEPS - n)
    ours: list[tuple[float, float, float, float]] = []
    ref: list[tuple[float, float, float, float]] = []
    for i in range(n):
        pair = [(ours, app, timer, cfg, first + i),
                (ref, ref_app, ref_timer, ref_cfg, REF_STEPS - n + i)]
        for out, a, t, c, k in (pair if i % 2 == 0 else pair[::-1]):
            out.append(_step(a, t, c, k))
    return ours, ref


def warm_up(make: Callable[[], Contender], log: Callable[[str], None]) -> None:
    """``WARMUP_STEPS`` untimed steps on a throwaway instance of a contender
    (module doc), closed before the measured one is made."""
    c = make()
    try:
        saver = c.saver()
        app = build_graph(saver)
        _measure(app, Timed(saver), {"configurable": {"thread_id": f"warm-up-{c.name}"}},
                 0, WARMUP_STEPS)
    finally:
        c.close()
    log(f"{c.name}: warmed up ({WARMUP_STEPS} untimed steps on a throwaway instance)")


def run_real(contender: Contender, sizes: tuple[int, ...], log: Callable[[str], None]
             ) -> list[dict[str, Any]]:
    """One thread grown step by step; a point at each size."""
    saver = contender.saver()
    timer = Timed(saver)
    app = build_graph(saver)
    cfg = {"configurable": {"thread_id": f"bench-{contender.name}"}}
    points = []
    done = 0
    for size in sizes:
        window = min(WINDOW, size // 2)
        _measure(app, timer, cfg, done, size - window - done)
        ref_saver = contender.reference(size)
        if ref_saver is None:
            samples = _measure(app, timer, cfg, size - window, window)
            ref = None
        else:
            samples, ref = _side_by_side(app, timer, cfg, size - window, window, ref_saver)
        done = size
        points.append(_point(size, samples, contender.bytes(), "real"))
        if ref is not None:
            r = _point(REF_STEPS, ref, 0, "reference")
            points[-1].update({f"ref_{k}": r[k] for k in (
                "step_ms", "step_cpu_ms", "saver_ms", "saver_cpu_ms")})
        log(f"{contender.name} {size} steps: {points[-1]}")
    return points


def run_seeded(contender: Contender, size: int, log: Callable[[str], None]) -> dict[str, Any]:
    """A thread that already holds ``size - WINDOW`` steps of messages (one
    update_state), then WINDOW timed steps."""
    from langchain_core.messages import AIMessage, HumanMessage

    saver = contender.saver()
    timer = Timed(saver)
    app = build_graph(saver)
    cfg = {"configurable": {"thread_id": f"seeded-{contender.name}-{size}"}}
    seed = []
    for k in range(size - WINDOW):
        user, ai = _texts(k)
        seed += [HumanMessage(user, id=f"user-{k}"), AIMessage(ai, id=f"ai-{k}")]
    app.update_state(cfg, {"messages": seed}, as_node="agent")
    samples = _measure(app, timer, cfg, size - WINDOW, WINDOW)
    point = _point(size, samples, 0, "seeded")
    log(f"{contender.name} {size} steps (seeded): {point}")
    return point


DIRECT_RUNS = 150


def _direct_step(saver: Any, cfg: dict[str, Any], k: int) -> None:
    """One step's saver calls as LangGraph makes them for ``build_graph``."""
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint

    tup = saver.get_tuple(cfg)
    base = tup.checkpoint if tup is not None else empty_checkpoint()
    config = tup.config if tup is not None else cfg
    msgs = base["channel_values"].get("messages", [])
    v = max((int(str(x).split(".")[0]) for x in base["channel_versions"].values()), default=0)

    def put(conf: Any, messages: list[Any], step: int, versions: dict[str, int]) -> Any:
        cp = create_checkpoint(base, None, step)
        cp["channel_values"] = {"messages": messages}
        cp["channel_versions"] = {**base["channel_versions"], **versions}
        return saver.put(conf, cp, {"source": "loop", "step": step}, versions)

    user, ai = _texts(k)
    c1 = put(config, msgs, 2 * k, {"__start__": v + 1})
    saver.put_writes(c1, [("messages", [HumanMessage(user, id=f"user-{k}")])], f"start-{k}")
    with_user = [*msgs, HumanMessage(user, id=f"user-{k}")]
    c2 = put(c1, with_user, 2 * k + 1, {"messages": v + 2})
    saver.put_writes(c2, [("messages", [AIMessage(ai, id=f"ai-{k}")])], f"agent-{k}")
    put(c2, [*with_user, AIMessage(ai, id=f"ai-{k}")], 2 * k + 2, {"messages": v + 3})


def run_direct(tmp: str, long_steps: int, log: Callable[[str], None]) -> dict[str, Any]:
    """Saver CPU per step without a graph: a ``long_steps`` thread against a
    ``REF_STEPS`` one, interleaved (module doc)."""
    from ledger import Store
    from ledger.integrations.langgraph import LedgerSaver

    threads = []
    for name, steps in (("long", long_steps), ("reference", REF_STEPS)):
        saver = LedgerSaver(store=Store(os.path.join(tmp, f"direct-{name}"), durability="off"))
        timer = Timed(saver)
        cfg = {"configurable": {"thread_id": f"direct-{name}"}}
        for k in range(steps):
            _direct_step(saver, cfg, k)
        threads.append((name, saver, timer, cfg, steps))
        log(f"direct: {name} thread grown to {steps} steps")
    cpu: dict[str, list[float]] = {name: [] for name, *_ in threads}
    for i in range(DIRECT_RUNS):
        for name, saver, timer, cfg, steps in (threads if i % 2 == 0 else threads[::-1]):
            before = timer.cpu
            _direct_step(saver, cfg, steps + i)
            cpu[name].append(timer.cpu - before)
    out = {f"{name}_saver_cpu_ms": statistics.median(v) * 1e3 for name, v in cpu.items()}
    out.update({"long_steps": long_steps, "reference_steps": REF_STEPS, "runs": DIRECT_RUNS,
                "ratio": out["long_saver_cpu_ms"] / out["reference_saver_cpu_ms"],
                "load": os.getloadavg()[0]})
    log(f"direct: {out}")
    return out


COLD_EVICT_MIB = 64


def run_cold(tmp: str, log: Callable[[str], None], long_steps: int = 0) -> dict[str, Any]:
    """Saver CPU per step of a ``REF_STEPS``-step thread with warm caches
    against one whose caches are evicted before every saver call (module
    doc), their last ``WINDOW`` steps alternating; with ``long_steps``, a
    third thread of that many steps (not evicted) takes its turn too."""
    from ledger import Store
    from ledger.integrations.langgraph import LedgerSaver

    buf = bytearray(COLD_EVICT_MIB << 20)
    zeros = bytes(len(buf[::64]))

    def evict() -> None:
        buf[::64] = zeros  # a write to every cache line of the buffer

    kinds: list[tuple[str, Callable[[], None] | None, int]] = [
        ("warm", None, REF_STEPS), ("cold", evict, REF_STEPS)]
    if long_steps:
        kinds.append(("long", None, long_steps))
    threads = []
    for name, before, steps in kinds:
        saver = LedgerSaver(store=Store(os.path.join(tmp, f"cold-{name}"), durability="off"))
        timer = Timed(saver, before)
        app = build_graph(saver)
        cfg = {"configurable": {"thread_id": f"cold-{name}"}}
        _measure(app, timer, cfg, 0, steps - WINDOW)
        threads.append((name, app, timer, cfg, steps))
        if long_steps:
            log(f"cold: {name} thread grown to {steps - WINDOW} steps")
    samples: dict[str, list[tuple[float, float, float, float]]] = {n: [] for n, *_ in threads}
    for i in range(WINDOW):
        # Two threads: each order in turn; three: each one first, then in turn.
        k = i % len(threads)
        turn = threads[k:] + threads[:k] if len(threads) > 2 or k == 0 else threads[::-1]
        for name, app, timer, cfg, steps in turn:
            samples[name].append(_step(app, timer, cfg, steps - WINDOW + i))
    out: dict[str, Any] = {}
    for name, got in samples.items():
        point = _point(REF_STEPS, got, 0, name)
        out[f"{name}_saver_cpu_ms"] = point["saver_cpu_ms"]
        out[f"{name}_step_cpu_ms"] = point["step_cpu_ms"]
    out.update({"steps": REF_STEPS, "window": WINDOW, "evict_mib": COLD_EVICT_MIB,
                "ratio": out["cold_saver_cpu_ms"] / out["warm_saver_cpu_ms"],
                "load": os.getloadavg()[0]})
    if long_steps:
        out.update({"long_steps": long_steps,
                    "long_over_warm": out["long_saver_cpu_ms"] / out["warm_saver_cpu_ms"],
                    "long_over_cold": out["long_saver_cpu_ms"] / out["cold_saver_cpu_ms"]})
    log(f"cold: {out}")
    return out


def project(points: list[dict[str, Any]], n: int) -> int:
    """a*n^2 + b*n through the two measured points."""
    (n1, y1), (n2, y2) = [(p["steps"], p["bytes"]) for p in points[:2]]
    a = (y2 / n2 - y1 / n1) / (n2 - n1)
    b = y1 / n1 - a * n1
    return int(a * n * n + b * n)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.langgraph_bench",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="100 and 1,000 steps only")
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--only", choices=("ledger", "sqlite", "postgres"), action="append")
    p.add_argument("--direct", action="store_true",
                   help="only our saver's calls without a graph, 10,000 against 100 steps")
    p.add_argument("--cold", action="store_true",
                   help="only our saver at 100 steps, warm caches against caches evicted "
                        "before each saver call")
    p.add_argument("--long", action="store_true",
                   help="with --cold: a 10,000-step thread too (long / cold: both points "
                        "cold)")
    args = p.parse_args(argv)
    if args.long and not args.cold:
        p.error("--long goes with --cold")
    sizes = SIZES[:2] if args.quick else SIZES
    only = set(args.only or ("ledger", "sqlite", "postgres"))
    started = time.monotonic()

    def log(msg: str) -> None:
        print(f"{time.monotonic() - started:7.1f}s {msg}", file=sys.stderr, flush=True)

    url = os.environ.get("TLEDGER_TEST_PG")
    results: dict[str, Any] = {"sizes": list(sizes), "window": WINDOW,
                               "warmup_steps": WARMUP_STEPS, "contenders": {}}
    tmp = tempfile.mkdtemp(prefix="tledger-lgbench-")
    if args.direct or args.cold:
        try:
            results = ({"direct": run_direct(tmp, SIZES[-1], log)} if args.direct
                       else {"cold": run_cold(tmp, log, SIZES[-1] if args.long else 0)})
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print(json.dumps(results, indent=2))
        return 0
    try:
        makers: list[tuple[str, Callable[[], Contender]]] = [
            ("ledger", lambda: Ledger(tempfile.mkdtemp(dir=tmp))),
            ("sqlite", lambda: Sqlite(tempfile.mkdtemp(dir=tmp))),
        ]
        if url:
            makers.append(("postgres", lambda: Postgres(url)))
        else:
            log("TLEDGER_TEST_PG is not set: postgres skipped")
        for name, make in makers:
            if name not in only:
                continue
            warm_up(make, log)
            c = make()
            real = tuple(s for s in sizes if name == "ledger" or s <= PEER_REAL_MAX)
            points = run_real(c, real, log)
            c.close()
            for size in sizes:
                if size in real:
                    continue
                c = make()
                point = run_seeded(c, size, log)
                point["bytes"] = project(points, size)
                point["how"] = "seeded; bytes projected"
                points.append(point)
                c.close()
            results["contenders"][name] = points
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    text = json.dumps(results, indent=2)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
