"""The benchmark series: the ledger, its alternatives and the floors, per
history size, measured side by side in one run.

A *point* is one history size S: the bytes of history written before the
measured operation (0 = a new workspace). Each point has a *world*: a ledger
workspace (``Store`` defaults: 64 KiB segment cap, durability ``full``), the
reference design's ``chat.jsonl`` (up to ``rewrite_max_mib``), an O_APPEND
JSONL file and a SQLite session, all filled with the same realistic rows
(``bench.corpus``). Big ledger histories are built with ``ledger.storage.files.bulk`` (64 MiB
sealed segments, as a history that has merged its segments); one extra series
builds them with 64 KiB segments, the layout ``append`` alone leaves behind.
Every point builds a fresh world: the measurements themselves add hundreds
of small segments (rollovers, appends), which would otherwise pile up into the
next point and measure segment count instead of history size. Everything
lives under one temporary directory (``$TMPDIR`` respected) that is deleted
at the end. After every build the page cache is flushed to disk
(``os.sync``) so writeback does not land inside a timing; reads are warm
(the data is in the page cache), as for a live agent.

Per point, in this order:

1. **append**: a batch of 3 rows of 2 KiB each, interleaved with the rename
   floor, the SQLite session (one transaction, WAL, ``synchronous=FULL``) and
   the O_APPEND JSONL; then the whole-file-rewrite reference design (at least
   ``rewrite_min_runs`` runs, only up to ``rewrite_max_mib``).
2. A rollover and a fixed 1 MiB window are bulk-written; **view**: open a
   ``Store`` + ``provider_view()`` of that window, interleaved with the floor
   that reads and decodes the same bytes.
3. **search**: a full-history ``session_history`` search followed page by page
   through its cursors, for a query that matches nothing (so every row is
   examined); each call is also a **tool call** sample. Floors: decode +
   case-fold + ``str.find`` of the same segments, and raw ``bytes.find``.
4. **check** (when ``recovery.check`` exists) against the read + decode floor
   of the whole history.
5. **turn**: before each turn (untimed) a rollover re-creates a 200-row
   window and appends the rollover's first 3 rows (that append seals the
   rollover's segment and is reported apart as ``*_first_turn``); the timed
   turn appends its 3 rows, assembles the provider view and counts its exact
   tokens with ``ledger.tokens.counting`` (when importable). The SQLite turn adds the
   same rows and reads all of the session's items back.

After the points: **segments**, the same turn (no rollover, no token count)
on ``segments_mib`` of history in ``small_segment_bytes`` sealed segments
against the same bytes in one segment (``turn_many_segments_over_few``).
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from bench import floors
from bench.baselines import JsonlAppend, RewriteTranscript, SqliteSession, encode_rows
from bench.corpus import MISSING_QUERY, REPO, Corpus
from bench.measure import Sample, interleave, timed
from bench.workspace import workspace_dir
from ledger import Store
from ledger.core.rows import prepare_batch
from ledger.core.toolpairs import pair
from ledger.storage.files import segments as segs
from ledger.storage.files.bulk import bulk_load
from ledger.transcript.history import LEAD_IN_TEXT, History

MIB = 1 << 20
WORKSPACE = "bench"


@dataclass
class Config:
    quick: bool
    sizes_mib: list[int]
    grown_sizes_mib: list[int]
    scan_sizes_mib: list[int] | None = None  # search and check points (None: every point)
    rewrite_max_mib: int = 200
    rewrite_min_runs: int = 11
    window_bytes: int = 1 * MIB
    turn_window_rows: int = 200
    batch_rows: int = 3
    row_bytes: int = 2048
    # (min runs, max runs, budget seconds) per series
    append_runs: tuple[int, int, float] = (100, 300, 6.0)
    rewrite_runs: tuple[int, int, float] = (11, 40, 3.0)
    view_runs: tuple[int, int, float] = (10, 100, 3.0)
    search_runs: tuple[int, int, float] = (2, 10, 5.0)
    check_runs: tuple[int, int, float] = (2, 10, 5.0)
    turn_runs: tuple[int, int, float] = (10, 50, 4.0)
    sqlite_turn_runs: tuple[int, int, float] = (3, 20, 4.0)
    count_runs: tuple[int, int, float] = (5, 30, 4.0)
    # The segment-count point: this many MiB in sealed segments this small.
    segments_mib: int = 16
    small_segment_bytes: int = 4096

    @classmethod
    def make(cls, quick: bool) -> Config:
        if quick:
            # check: at least 3 rounds (at 256 MiB a round of check and its
            # floor takes the whole 2 s budget, and the best of 2 moved
            # check_over_decode_floor by 0.1-0.2 between runs; issue 31).
            return cls(quick=True, sizes_mib=[0, 1, 4, 16, 64, 200, 256],
                       grown_sizes_mib=[64], scan_sizes_mib=[0, 1, 4, 16, 64, 256],
                       search_runs=(2, 5, 2.0), check_runs=(3, 5, 2.0),
                       sqlite_turn_runs=(3, 10, 2.0), append_runs=(100, 200, 3.0),
                       view_runs=(10, 50, 1.5), turn_runs=(10, 30, 2.0),
                       rewrite_runs=(11, 20, 2.0), segments_mib=16)
        return cls(quick=False, sizes_mib=[0, 1, 4, 16, 64, 200, 256, 1024],
                   grown_sizes_mib=[64, 256, 1024], append_runs=(200, 600, 10.0),
                   search_runs=(3, 10, 10.0), check_runs=(3, 10, 10.0),
                   turn_runs=(30, 100, 6.0), sqlite_turn_runs=(3, 20, 6.0),
                   view_runs=(30, 200, 5.0), rewrite_runs=(11, 40, 5.0), segments_mib=64)


@dataclass
class Results:
    series: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    samples: dict[tuple[str, int, str], Sample] = field(default_factory=dict)

    def add(self, series: str, size_mib: int, record: dict[str, Any],
            samples: dict[str, Sample]) -> None:
        out = dict(record)
        for name, s in samples.items():
            out[name] = s.to_json()
            self.samples[(series, size_mib, name)] = s
        self.series.setdefault(series, []).append(out)

    def get(self, series: str, size_mib: int, name: str) -> Sample | None:
        return self.samples.get((series, size_mib, name))

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)


# --- optional components ------------------------------------------------------


def optional_module(name: str) -> Any | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def token_counter(res: Results) -> Any | None:
    """``ledger.tokens.counting.TokenCounter`` for gpt-4o (o200k_base), or None."""
    tokens = optional_module("ledger.tokens.counting")
    if tokens is None or not hasattr(tokens, "TokenCounter"):
        res.note("ledger.tokens.counting is not importable: turns skip the token-budget step")
        return None
    return tokens.TokenCounter("gpt-4o")


def check_function(res: Results) -> Callable[[History], Any] | None:
    """The read-only verification of recovery.check, called on a History."""
    mod = optional_module("recovery.check")
    if mod is None:
        res.note("recovery.check is not importable: the check series is skipped")
        return None
    for name in ("check_history", "check", "run_check", "check_workspace"):
        fn = getattr(mod, name, None)
        if callable(fn):
            return fn
    res.note("recovery.check has no check_history/check function: "
             "the check series is skipped")
    return None


def retrieval_tool(res: Results) -> Callable[[History], Any] | None:
    mod = optional_module("ledger.transcript.retrieval")
    if mod is None or not hasattr(mod, "SessionHistory"):
        res.note("ledger.transcript.retrieval is not importable: "
                 "search and tool-call series are skipped")
        return None
    return mod.SessionHistory


# --- worlds -----------------------------------------------------------------------


class World:
    """One ledger workspace and its mirrored alternatives, grown together."""

    def __init__(self, root: str, corpus: Corpus, cfg: Config, *, segment_target: int = 64 * MIB,
                 mirrors: bool = True) -> None:
        self.root = root
        self.corpus = corpus
        self.cfg = cfg
        self.segment_target = segment_target
        os.makedirs(root, mode=0o700, exist_ok=True)
        self.store = Store(os.path.join(root, "ledger"))
        self.h = self.store.history(WORKSPACE)
        self.mirrors = mirrors
        self.rewrite: RewriteTranscript | None = None
        self.jsonl: JsonlAppend | None = None
        self.sqlite: SqliteSession | None = None
        if mirrors:
            self.rewrite = RewriteTranscript(os.path.join(root, "reference"))
            self.jsonl = JsonlAppend(os.path.join(root, "jsonl"))
            self.sqlite = SqliteSession(os.path.join(root, "sqlite", "sessions.db"))
        self.seed = 0

    def segments(self) -> int:
        return len(segs.list_segments(workspace_dir(self.h)))

    def ledger_bytes(self) -> int:
        total = 0
        for n in segs.list_segments(workspace_dir(self.h)):
            s = segs.stamp(segs.segment_path(workspace_dir(self.h), n))
            total += s.size if s is not None else 0
        return total

    def spans(self) -> list[tuple[str, int]]:
        path = workspace_dir(self.h)
        return [(segs.segment_path(path, n), 0) for n in segs.list_segments(path)]

    def grow_to(self, size: int) -> dict[str, float]:
        """Bulk-write realistic rows until the ledger holds about ``size`` bytes."""
        need = size - (self.ledger_bytes() if self.h.exists() else 0)
        took: dict[str, float] = {}
        if need <= 0:
            return took
        self.seed += 1
        seed = self.seed
        t0 = time.monotonic()
        bulk_load(self.h, self.corpus.batches(need, seed), self.segment_target, durability="off")
        took["ledger_s"] = time.monotonic() - t0
        if self.mirrors:
            assert self.jsonl is not None and self.sqlite is not None
            t0 = time.monotonic()
            rewrite = self.rewrite if size <= self.cfg.rewrite_max_mib * MIB else None
            for batch in self._chunked_lines(need, seed):
                self.jsonl.grow(batch)
                if rewrite is not None:
                    rewrite.grow(batch)
            took["files_s"] = time.monotonic() - t0
            t0 = time.monotonic()
            self.sqlite.grow(self.corpus.batches(need, seed))
            took["sqlite_s"] = time.monotonic() - t0
        os.sync()
        return took

    def _chunked_lines(self, need: int, seed: int) -> Iterator[list[bytes]]:
        pending: list[bytes] = []
        for batch in self.corpus.batches(need, seed):
            pending.extend(encode_rows(batch))
            if len(pending) >= 4096:
                yield pending
                pending = []
        if pending:
            yield pending

    def drop_rewrite(self) -> None:
        if self.rewrite is not None:
            shutil.rmtree(self.rewrite.dir, ignore_errors=True)
            self.rewrite = None

    def place_window(self) -> tuple[str, int]:
        """Bulk-write a rollover and a fixed window of ``window_bytes``; return
        the span (segment path, offset) of the window's bytes."""
        rows = self.corpus.window_of_bytes(self.cfg.window_bytes, seed=42)
        first = self.h.snapshot().next_seq if self.h.exists() else 1
        reset: dict[str, Any] = {"kind": "reset", "role": "system", "parts": [],
                                 "reset": {"reason": "rollover"}}
        lead: dict[str, Any] = {"kind": "lead_in", "role": "system",
                "parts": [{"type": "text", "text": LEAD_IN_TEXT.format(window=first, tool="")}],
                "meta": {"window": first, "session_history": True}}
        batches = [[reset, lead, rows[0]]] + [rows[i : i + 2] for i in range(1, len(rows), 2)]
        res = bulk_load(self.h, batches, self.segment_target, durability="off", internal=True)
        os.sync()
        st = self.h.snapshot()
        assert st.window is not None and st.window.seq == res.first_seq
        return segs.segment_path(workspace_dir(self.h), st.window.segment), st.window.offset

    def close(self) -> None:
        if self.sqlite is not None:
            self.sqlite.close()
        shutil.rmtree(self.root, ignore_errors=True)


# --- the series -------------------------------------------------------------------


def append_series(w: World, e: World, size_mib: int, res: Results, floor_dir: str,
                  k0: int) -> None:
    cfg = w.cfg
    counter = {"k": k0}
    os.makedirs(floor_dir, mode=0o700, exist_ok=True)

    def batch() -> list[dict[str, Any]]:
        return w.corpus.sized_batch(cfg.batch_rows, cfg.row_bytes, counter["k"])

    def next_batch() -> None:
        counter["k"] += 1
        cur["rows"] = batch()
        _, lines = prepare_batch(cur["rows"], 1, "b_" + "0" * 28, 1 << 26)
        cur["lines"] = lines
        cur["json"] = encode_rows(cur["rows"])

    cur: dict[str, Any] = {}
    next_batch()
    replica = floors.SyscallReplica(os.path.join(floor_dir, f"replica-{size_mib}"),
                                    w.segments(), w.store.segment_bytes)
    contenders: dict[str, Callable[[], Any]] = {
        "ledger": lambda: w.h.append_many(cur["rows"]),
        "ledger_empty": lambda: e.h.append_many(cur["rows"]),
        "rename_floor": lambda: floors.rename_floor(floor_dir, cur["lines"]),
        "syscall_replica": lambda: replica(cur["lines"]),
    }
    if w.sqlite is not None:
        sq = w.sqlite
        contenders["sqlite_wal_full"] = lambda: sq.add_items(cur["rows"])
    if w.jsonl is not None:
        jl = w.jsonl
        contenders["jsonl_append"] = lambda: jl.append_many(cur["json"])
    mn, mx, budget = cfg.append_runs
    record: dict[str, Any] = {"size_mib": size_mib, "history_bytes": w.ledger_bytes(),
                              "segments": w.segments(),
                              "batch_bytes": sum(len(x) for x in cur["lines"])}
    samples = interleave(contenders, min_runs=mn, max_runs=mx, budget_s=budget, setup=next_batch)
    if w.rewrite is not None and size_mib <= cfg.rewrite_max_mib:
        rw = w.rewrite
        record["rewrite_bytes"] = rw.size()
        mn, mx, budget = cfg.rewrite_runs
        samples.update(interleave({"rewrite": lambda: rw.append_many(cur["json"])},
                                  min_runs=max(mn, cfg.rewrite_min_runs), max_runs=mx,
                                  budget_s=budget, setup=next_batch))
    res.add("append", size_mib, record, samples)


def grown_append_series(root: str, corpus: Corpus, cfg: Config, size_mib: int,
                        res: Results) -> None:
    """Append on a history laid out as appends leave it: sealed segments of
    the cap plus part of a batch (64 KiB + up to 8 KiB). A history grown one
    append at a time merges as it goes; one built in bulk has the whole merge
    backlog at once, so it is merged first (untimed, ``merge_segments`` when
    the store has it) and the measurement is the steady state."""
    cap = Store(root).segment_bytes
    w = World(os.path.join(root, f"grown-{size_mib}"), corpus, cfg,
              segment_target=cap + cfg.batch_rows * cfg.row_bytes, mirrors=False)
    e = World(os.path.join(root, f"grown-{size_mib}-empty"), corpus, cfg, mirrors=False)
    try:
        t0 = time.monotonic()
        w.grow_to(size_mib * MIB)
        build = time.monotonic() - t0
        built = w.segments()
        t0 = time.monotonic()
        merge = getattr(w.h.engine, "merge_segments", None)
        merges = merge() if merge is not None else None
        merge_s = time.monotonic() - t0
        os.sync()
        floor_dir = os.path.join(w.root, "floor")
        os.makedirs(floor_dir, mode=0o700)
        rows = corpus.sized_batch(cfg.batch_rows, cfg.row_bytes, 1)
        _, lines = prepare_batch(rows, 1, "b_" + "0" * 28, 1 << 26)
        mn, mx, budget = cfg.append_runs
        samples = interleave(
            {"ledger": lambda: w.h.append_many(rows),
             "ledger_empty": lambda: e.h.append_many(rows),
             "rename_floor": lambda: floors.rename_floor(floor_dir, lines)},
            min_runs=mn, max_runs=mx, budget_s=budget,
        )
        res.add("append_grown_by_append", size_mib,
                {"size_mib": size_mib, "history_bytes": w.ledger_bytes(),
                 "segments_built": built, "merges": merges, "merge_s": round(merge_s, 2),
                 "segments": w.segments(), "build_s": round(build, 2)},
                samples)
    finally:
        w.close()
        e.close()


def view_series(w: World, e: World, size_mib: int, res: Results,
                span: tuple[str, int]) -> None:
    def view(root: str) -> int:
        return len(Store(root).history(WORKSPACE).provider_view())

    root, empty_root = w.store.root, e.store.root
    mn, mx, budget = w.cfg.view_runs
    samples = interleave(
        {"ledger": lambda: view(root), "ledger_empty": lambda: view(empty_root),
         "read_decode_floor": lambda: floors.read_decode([span])},
        min_runs=mn, max_runs=mx, budget_s=budget,
    )
    rows = view(root)
    res.add("view", size_mib, {"size_mib": size_mib, "history_bytes": w.ledger_bytes(),
                               "segments": w.segments(), "segments_empty": e.segments(),
                               "window_bytes": os.path.getsize(span[0]) - span[1],
                               "view_rows": rows}, samples)
    # Beside the ratio, after it (its interleave is left as it was):
    # the view against a floor that keeps its rows, as the view must.
    kept = interleave(
        {"ledger": lambda: view(root),
         "read_decode_kept_floor": lambda: floors.read_decode_kept([span])},
        min_runs=mn, max_runs=mx, budget_s=budget,
    )
    res.add("view_kept", size_mib, {"size_mib": size_mib, "view_rows": rows,
                                    "per_call": alloc_state(
                                        {"ledger": lambda: view(root),
                                         "read_decode_floor": lambda: floors.read_decode([span]),
                                         "read_decode_kept_floor":
                                             lambda: floors.read_decode_kept([span])})},
            kept)


def alloc_state(contenders: dict[str, Callable[[], Any]], runs: int = 10
                ) -> dict[str, dict[str, float]]:
    """Untimed: each contender's minor page faults and cyclic-collector
    passes per call over ``runs`` calls in a row, in this process as it is
    now. A view that faults in fresh pages on every call (the C allocator
    giving its heap back between calls) or collects more often shows here;
    which state a run was in is what its view ratio cannot tell
    (bench/RESULTS.md, issue 31, ninth round: view4)."""
    out: dict[str, dict[str, float]] = {}
    passes = [0]

    def count(phase: str, info: dict[str, Any]) -> None:
        if phase == "stop":
            passes[0] += 1

    for name, fn in contenders.items():
        gc.callbacks.append(count)
        try:
            passes[0] = 0
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            for _ in range(runs):
                fn()
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
        finally:
            gc.callbacks.remove(count)
        out[name] = {"minor_faults": round(faults / runs, 1), "gc_passes": passes[0] / runs}
    return out


def search_series(w: World, size_mib: int, res: Results, tool_cls: Any) -> None:
    calls = Sample()

    n_calls = {"n": 0}

    def search() -> int:
        tool = tool_cls(w.h)
        cursor = None
        n = 0
        while True:
            args: dict[str, Any] = {"action": "search", "query": MISSING_QUERY}
            if cursor is not None:
                args["cursor"] = cursor
            def call(a: dict[str, Any] = args) -> Any:  # not a lambda: python/mypy#15459
                return tool.call(a)

            dt, text = timed(call)
            calls.times.append(dt)
            out = json.loads(text)
            if "error" in out:
                raise RuntimeError(f"session_history error: {out['error']}")
            n += 1
            cursor = out.get("cursor")
            if not cursor:
                n_calls["n"] = n
                return n

    spans = w.spans()
    mn, mx, budget = w.cfg.search_runs
    samples = interleave(
        {"ledger": search,
         "scan_floor": lambda: floors.scan_fold_find(spans, MISSING_QUERY),
         "raw_find": lambda: floors.raw_find(spans, MISSING_QUERY)},
        min_runs=mn, max_runs=mx, budget_s=budget,
    )
    res.add("search", size_mib, {"size_mib": size_mib, "history_bytes": w.ledger_bytes(),
                                 "calls_per_search": n_calls["n"]}, samples)
    res.add("tool_call", size_mib, {"size_mib": size_mib, "history_bytes": w.ledger_bytes()},
            {"ledger": calls})


def check_series(w: World, size_mib: int, res: Results, check: Callable[[History], Any]) -> None:
    spans = w.spans()
    mn, mx, budget = w.cfg.check_runs
    samples = interleave(
        {"ledger": lambda: check(w.store.history(WORKSPACE)),
         "decode_floor": lambda: floors.read_decode(spans)},
        min_runs=mn, max_runs=mx, budget_s=budget,
    )
    report = check(w.store.history(WORKSPACE))
    record: dict[str, Any] = {"size_mib": size_mib, "history_bytes": w.ledger_bytes()}
    ok = getattr(report, "ok", None)
    if ok is not None:
        record["check_ok"] = bool(ok)
        if not ok:
            res.note(f"check found damage in the {size_mib} MiB history: {report}")
    res.add("check", size_mib, record, samples)


def close_open_calls(h: History) -> None:
    """Append a result for every tool call of the open window that has none
    (untimed): the generated history's random batches leave calls open, and
    ``History.rollover`` refuses to seal an open call. Read from the window's
    stored rows with the store's own pairing (the provider view leaves open
    calls out, so it cannot show them)."""
    open_ids = [c.id for c in pair(r.data for r in h.window_rows()).open_calls()]
    if open_ids:
        h.append_many([{"kind": "message", "role": "tool", "parts": [
            {"type": "tool_result", "id": c, "output": "(closed by the benchmark)"}
            for c in open_ids]}])


def turn_series(w: World, e: World, size_mib: int, res: Results, counter: Any) -> None:
    cfg = w.cfg
    window = w.corpus.window_rows(cfg.turn_window_rows - 1, seed=7, calls=False)
    state: dict[str, Any] = {"k": 0}

    first = {"ledger_first_turn": Sample(), "ledger_empty_first_turn": Sample()}

    def setup() -> None:
        # Untimed: a rollover re-creates a fixed window (lead-in + 199 rows)
        # and its own first append seals the rollover's segment (the append
        # that seals a segment scans it for the INDEX; reported apart as
        # *_first_turn). The timed turn is the steady state that follows.
        state["k"] += 1
        warm = w.corpus.sized_batch(cfg.batch_rows, cfg.row_bytes, 20_000 + state["k"])
        for h, name in ((w.h, "ledger_first_turn"), (e.h, "ledger_empty_first_turn")):
            if state["k"] == 1:
                close_open_calls(h)
            h.rollover(window)
            def append(h: History = h) -> Any:  # not a lambda: python/mypy#15459
                return h.append_many(warm)

            first[name].times.append(timed(append)[0])
            if counter is not None:
                # Counted here, untimed, as the turn before a real one counts
                # it: the timed turn counts only its own new rows. Without
                # this, the two histories' same ``warm`` rows were counted by
                # whichever turn ran first in the round and found in the
                # row-token cache by the other, so with the order rotating
                # each history's turns had two modes ~0.8 ms apart (of ~3 ms
                # CPU) and the p50 ratio moved with which one it landed in
                # (turn_big_over_turn_empty 0.999-1.163 on unchanged turns;
                # bench/RESULTS.md, issue 31, ninth round: turn8).
                counter.rows([r.to_dict() for r in h.provider_view()])
        # Different new rows per history: each turn's rows miss the shared
        # row-token cache once, as a real turn's would.
        k = 10_000 + 2 * state["k"]
        state["rows"] = w.corpus.sized_batch(cfg.batch_rows, cfg.row_bytes, k)
        state["rows_empty"] = w.corpus.sized_batch(cfg.batch_rows, cfg.row_bytes, k + 1)

    def turn(h: History, rows_key: str) -> int:
        h.append_many(state[rows_key])
        view = h.provider_view()
        if counter is not None:
            return int(counter.rows([r.to_dict() for r in view]).tokens)
        return len(view)

    mn, mx, budget = cfg.turn_runs
    samples = interleave({"ledger": lambda: turn(w.h, "rows"),
                          "ledger_empty": lambda: turn(e.h, "rows_empty")},
                         min_runs=mn, max_runs=mx, budget_s=budget, setup=setup)
    samples.update(first)
    record: dict[str, Any] = {"size_mib": size_mib, "history_bytes": w.ledger_bytes(),
                              "segments": w.segments(), "segments_empty": e.segments(),
                              "window_rows": cfg.turn_window_rows,
                              "tokens_step": counter is not None}
    if w.sqlite is not None:
        sq = w.sqlite
        got = {"items": 0}

        def sqlite_turn() -> None:
            sq.add_items(state["rows"])
            got["items"] = len(sq.get_items())

        def sqlite_setup() -> None:
            state["k"] += 1
            state["rows"] = w.corpus.sized_batch(cfg.batch_rows, cfg.row_bytes,
                                                 10_000 + state["k"])

        mn, mx, budget = cfg.sqlite_turn_runs
        samples.update(interleave({"sqlite_wal_full": sqlite_turn}, min_runs=mn, max_runs=mx,
                                  budget_s=budget, setup=sqlite_setup))
        record["sqlite_items"] = got["items"]
        record["sqlite_bytes"] = sq.size()
    res.add("turn", size_mib, record, samples)


def segments_series(tmp: str, corpus: Corpus, cfg: Config, res: Results) -> None:
    """A turn (append a batch, read the provider view) on a history held in
    thousands of small sealed segments against the same bytes in one (issue
    31: a turn costs O(window + batch), not O(segments); at 17,000 segments
    it cost 257 ms against 15 ms at 1,700). Both get the same rows, the same
    1 MiB window (in one segment) and the store's own appends."""
    many = World(os.path.join(tmp, "segments-many"), corpus, cfg,
                 segment_target=cfg.small_segment_bytes, mirrors=False)
    few = World(os.path.join(tmp, "segments-few"), corpus, cfg, mirrors=False)
    try:
        for w in (many, few):
            w.grow_to(cfg.segments_mib * MIB)
            w.segment_target = 64 * MIB
            w.place_window()
        state = {"k": 0}

        def setup() -> None:
            state["k"] += 1

        def turn(h: History, k: int) -> int:
            h.append_many(corpus.sized_batch(cfg.batch_rows, cfg.row_bytes, k))
            return len(h.provider_view())

        mn, mx, budget = cfg.turn_runs
        samples = interleave({"many": lambda: turn(many.h, 30_000 + 2 * state["k"]),
                              "few": lambda: turn(few.h, 30_001 + 2 * state["k"])},
                             min_runs=mn, max_runs=mx, budget_s=budget, setup=setup)
        record = {"size_mib": cfg.segments_mib, "segments_many": many.segments(),
                  "segments_few": few.segments(), "history_bytes": many.ledger_bytes()}
        res.add("segments", cfg.segments_mib, record, samples)
    finally:
        many.close()
        few.close()


_RSS_SCRIPT = r"""
import json, sys
sys.path.insert(0, sys.argv[3])
from bench.measure import reset_hwm, vm_rss_bytes, vm_hwm_bytes
from ledger import Store
h = Store(sys.argv[1]).history(sys.argv[2])
first = next(iter(h.rows()))  # imports done, files opened
hwm_reset = reset_hwm()  # the peak from here on: the scan's, not the start-up's
base_rss, base_hwm = vm_rss_bytes(), vm_hwm_bytes()
n = 0
nbytes = 0
for row in h.rows():
    n += 1
    nbytes += len(row.line)
print(json.dumps({"rows": n, "line_bytes": nbytes, "base_rss": base_rss, "base_hwm": base_hwm,
                  "end_rss": vm_rss_bytes(), "peak_hwm": vm_hwm_bytes(), "hwm_reset": hwm_reset}))
"""


def rss_scan(w: World, size_mib: int) -> dict[str, Any]:
    """Scan ``h.rows()`` over the whole history in a fresh process and report
    how far its resident set grew (VmHWM peak minus VmRSS after start-up).
    The peak is started again after start-up (``hwm_reset``): before, the
    start-up's own peak, 0.8-1.0 MiB above the baseline, was counted as the
    scan's. What the scan keeps (0.7-0.9 MiB at 256 MiB, any size) is a
    freed 1 MiB read chunk that glibc's malloc holds at the heap's top:
    bench/RESULTS.md, issue 31 eighth round (regress2)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    t0 = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", _RSS_SCRIPT, w.store.root, WORKSPACE, str(REPO)],
        capture_output=True, text=True, check=True, env=env,
    )
    took = time.monotonic() - t0
    data = json.loads(out.stdout)
    growth = max(data["peak_hwm"], data["end_rss"]) - data["base_rss"]
    data.update(size_mib=size_mib, history_bytes=w.ledger_bytes(), seconds=round(took, 2),
                growth_mib=round(growth / MIB, 2))
    return data


def count_series(corpus: Corpus, cfg: Config, res: Results) -> dict[str, Any] | None:
    """Token counting against raw tiktoken. ``bench.tokens_bench`` (the token
    engineer's suite: count ratio, re-budget, pathological inputs) is the
    authority when present; this interleaved p50 comparison is the fallback."""
    own = optional_module("bench.tokens_bench")
    if own is not None and hasattr(own, "run"):
        doc = own.run(cfg.quick)
        res.extra["tokens_bench"] = doc
        return doc
    tokens = optional_module("ledger.tokens.counting")
    encodings = optional_module("ledger.tokens.encodings")
    if tokens is None or encodings is None:
        res.note("ledger.tokens.counting is not importable: count_over_raw_tiktoken is null")
        return None
    counter = tokens.TokenCounter("gpt-4o", cache=None)
    enc = encodings.get_encoding(counter.spec.encoding)
    text = corpus.text
    ours = counter.text(text)
    raw = floors.tiktoken_raw(enc, text)
    mn, mx, budget = cfg.count_runs
    samples = interleave(
        {"ledger": lambda: counter.text(text),
         "tiktoken_raw": lambda: floors.tiktoken_raw(enc, text)},
        min_runs=mn, max_runs=mx, budget_s=budget,
    )
    record = {"text_chars": len(text), "text_bytes": len(text.encode("utf-8")),
              "encoding": counter.spec.encoding, "tokens_ledger": ours.tokens,
              "tokens_tiktoken": raw, "exact": ours.exact}
    res.add("count", 0, record, samples)
    return record


# --- orchestration ------------------------------------------------------------------


class Lap:
    """Seconds spent per step, for the progress log."""

    def __init__(self) -> None:
        self.t = time.monotonic()
        self.laps: list[str] = []

    def __call__(self, name: str) -> None:
        now = time.monotonic()
        self.laps.append(f"{name} {now - self.t:.1f}")
        self.t = now

    def __str__(self) -> str:
        return ", ".join(self.laps)


def run_all(cfg: Config, corpus: Corpus, tmp: str, res: Results,
            log: Callable[[str], None]) -> None:
    tool_cls = retrieval_tool(res)
    check = check_function(res)
    counter = token_counter(res)
    big = max(cfg.sizes_mib)
    k = 0
    for size_mib in cfg.sizes_mib:
        t_point = time.monotonic()
        w = World(os.path.join(tmp, f"point-{size_mib}"), corpus, cfg)
        took = w.grow_to(size_mib * MIB)
        log(f"[{size_mib} MiB] built {w.ledger_bytes() / MIB:.1f} MiB "
            + " ".join(f"{k_}={v:.1f}" for k_, v in took.items()))
        k += 1000
        # An empty companion is measured interleaved with this point, so that
        # the big/empty ratios do not depend on load that drifts during the
        # run. It receives the same appends, rollovers and windows as the big
        # history (so both hold about as many segments: the ratios isolate
        # history bytes; segment count has its own series).
        lap = Lap()
        e = World(os.path.join(tmp, f"empty-{size_mib}"), corpus, cfg, mirrors=False)
        append_series(w, e, size_mib, res, os.path.join(tmp, "floor"), k)
        lap("append")
        e.place_window()
        span = w.place_window()
        view_series(w, e, size_mib, res, span)
        lap("view")
        scan = cfg.scan_sizes_mib is None or size_mib in cfg.scan_sizes_mib
        if tool_cls is not None and scan:
            search_series(w, size_mib, res, tool_cls)
            lap("search")
        if check is not None and scan:
            check_series(w, size_mib, res, check)
            lap("check")
        turn_series(w, e, size_mib, res, counter)
        e.close()
        lap("turn")
        if size_mib == big:
            res.extra["rss_scan"] = rss_scan(w, size_mib)
            lap("rss")
        log(f"[{size_mib} MiB] measured in {time.monotonic() - t_point:.1f} s ({lap})")
        w.close()
        gc.collect()
    for size_mib in cfg.grown_sizes_mib:
        t0 = time.monotonic()
        grown_append_series(tmp, corpus, cfg, size_mib, res)
        log(f"[grown {size_mib} MiB] {time.monotonic() - t0:.1f} s")
    t0 = time.monotonic()
    segments_series(tmp, corpus, cfg, res)
    log(f"[segments {cfg.segments_mib} MiB] {time.monotonic() - t0:.1f} s")
    t0 = time.monotonic()
    count = count_series(corpus, cfg, res)
    if count is not None:
        log(f"[count] {time.monotonic() - t0:.1f} s")
