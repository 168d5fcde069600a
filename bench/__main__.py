"""``python -m bench [--quick] [--only NAME] [--out DIR] [--summary FILE]``

Runs every benchmark suite, one after the other, each in its own process:
the file engine's series (``bench.files_bench``), PostgreSQL beside the file
engine (``bench.postgres_bench``), the runtime object
(``bench.conversation_bench``), the agent-framework sessions
(``bench.integrations_bench``), the LangGraph checkpointers
(``bench.langgraph_bench``) and recall (``bench.recall_latency``,
``bench.recall_bench``, ``bench.recall_v2``). A suite whose extra or server
is missing is named with what it lacks, and the run goes on. ``--quick`` runs
a short version of each (the file series still goes to 256 MiB of history,
where a scan's cost shows: about four minutes for it on 2 shared cores): for
A/B comparisons of two commits, run it on each in one sitting and compare the
summaries with ``python -m bench --compare BEFORE.json AFTER.json``, which
flags every number that got more than 15% worse (``--tolerance`` changes the
bound).

Citus (``bench.citus_bench``) is left out: it needs a Citus build and takes
minutes to start; run it by itself.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Headline = Callable[[Any], dict[str, float]]


def _files(doc: Any) -> dict[str, float]:
    return {k: float(v) for k, v in doc.get("ratios", {}).items()
            if isinstance(v, (int, float))}


def _postgres(doc: Any) -> dict[str, float]:
    out = {f"ratio {k}": float(v) for k, v in doc.get("ratios", {}).items()}
    for size, turn in doc.get("turn_ms", {}).items():
        for name, ms in turn.items():
            out[f"turn ms {name} @{size} MiB"] = float(ms)
    return out


def _conversation(doc: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in doc:
        lim = r["context_limit"]
        out[f"conversation ms/turn (limit {lim})"] = float(r["conversation_ms_per_turn"])
        out[f"by hand ms/turn (limit {lim})"] = float(r["by_hand_ms_per_turn"])
    return out


def _integrations(doc: Any) -> dict[str, float]:
    out = {}
    for name, by_size in doc.get("median_ms", {}).items():
        for size, ms in by_size.items():
            out[f"turn ms {name} @{size} MiB"] = float(ms)
    for name, io in doc.get("per_turn_io", {}).items():
        out[f"fsyncs/turn {name}"] = float(io["fsyncs_per_turn"])
        if "batches_per_turn" in io:
            out[f"batches/turn {name}"] = float(io["batches_per_turn"])
    return out


def _langgraph(doc: Any) -> dict[str, float]:
    out = {}
    for name, points in doc.get("contenders", {}).items():
        for p in points:
            for key in ("step_ms", "step_cpu_ms", "saver_cpu_ms"):
                if isinstance(p.get(key), (int, float)):
                    out[f"{name} {key} @{p.get('steps')} steps"] = float(p[key])
    return out


def _recall(doc: Any) -> dict[str, float]:
    out = {}
    for size, rec in doc.get("sizes", {}).items():
        for key in ("ranked_p50_ms", "ranked_p99_ms", "literal_p50_ms"):
            out[f"{key} @{size} MiB"] = float(rec[key])
    if "append" in doc:
        out["append+index / append"] = float(doc["append"]["ratio"])
    return out


@dataclass
class Suite:
    name: str
    module: str
    quick: list[str]
    full: list[str] = field(default_factory=list)
    needs: dict[str, str] = field(default_factory=dict)  # import name -> what installs it
    server: str | None = None  # "postgres": binaries for a private cluster
    headline: Headline | None = None
    json_flag: bool = True


SUITES = [
    # Up to 256 MiB: check and the provider view regressed at 64-256 MiB
    # once and a 16 MiB run did not show it (issue 31).
    Suite("files", "bench.files_bench", ["--quick", "--sizes", "0,1,16,64,256"],
          headline=_files),
    Suite("postgres", "bench.postgres_bench", ["--quick", "--sizes", "0,10"],
          needs={"psycopg": "the postgres extra"}, server="postgres", headline=_postgres),
    Suite("conversation", "bench.conversation_bench", ["--quick"], headline=_conversation),
    Suite("frameworks", "bench.integrations_bench", ["--quick"],
          needs={"agents": "the agents extra", "langchain_core": "the langchain extra",
                 "langchain_community": "the bench extra", "sqlalchemy": "the bench extra",
                 "greenlet": "the bench extra"}, headline=_integrations),
    Suite("langgraph", "bench.langgraph_bench", ["--quick", "--only", "ledger", "--only",
                                                 "sqlite"],
          needs={"langgraph": "the langgraph extra",
                 "langgraph.checkpoint.sqlite": "the bench extra"}, headline=_langgraph),
    Suite("recall latency", "bench.recall_latency", ["--sizes", "0,16", "--queries", "60"],
          headline=_recall),
    Suite("recall quality", "bench.recall_bench", [], needs={"rank_bm25": "the bench extra"},
          json_flag=False),
    Suite("recall v2", "bench.recall_v2", ["--quick", "--sets", "longmemeval,transcripts"],
          needs={"rank_bm25": "the bench extra"}, json_flag=False),
]


def missing(suite: Suite) -> str | None:
    """What the suite lacks on this machine, or None."""
    for mod, extra in suite.needs.items():
        try:
            found = importlib.util.find_spec(mod) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            return f"needs {mod} ({extra}; pip install -e '.[bench]' brings every suite's)"
    if suite.server == "postgres":
        from tests.helpers.pg_cluster import find_bindir

        if find_bindir() is None:
            return "needs a PostgreSQL server's binaries (initdb, pg_ctl) on the PATH"
    return None


def run_suite(suite: Suite, quick: bool, out_dir: str) -> dict[str, Any]:
    why = missing(suite)
    if why is not None:
        print(f"== {suite.name}: skipped, {why}", file=sys.stderr, flush=True)
        return {"status": "skipped", "why": why}
    args = list(suite.quick if quick else suite.full)
    doc_path = os.path.join(out_dir, suite.module.split(".")[-1] + ".json")
    if suite.json_flag:
        args += ["--json", doc_path]
    cmd = [sys.executable, "-m", suite.module, *args]
    print(f"== {suite.name}: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
    t0 = time.monotonic()
    with open(os.path.join(out_dir, suite.module.split(".")[-1] + ".txt"), "w") as text:
        rc = subprocess.call(cmd, stdout=text)
    seconds = round(time.monotonic() - t0, 1)
    rec: dict[str, Any] = {"status": "ok" if rc == 0 else f"failed (exit {rc})",
                           "seconds": seconds, "output": text.name}
    if rc == 0 and suite.headline is not None and os.path.exists(doc_path):
        with open(doc_path) as f:
            rec["numbers"] = suite.headline(json.load(f))
    print(f"== {suite.name}: {rec['status']} in {seconds}s", file=sys.stderr, flush=True)
    return rec


# Numbers where more is better; every other headline number (times, and
# ratios of the ledger over a floor or a baseline) is better smaller.
HIGHER_IS_BETTER = (
    "rewrite_baseline_over_ledger_200mib",  # the reference design's append over ours
    "turn_sqlite_over_ledger_big",
    "session_table_over_pg_turn_at_big",
    "sqlite_over_pg_turn_at_big",
    "throughput_16_over_1",  # sixteen writers' batches per second over one writer's
)
TOLERANCE = 0.15


def worse_by(key: str, before: float, after: float) -> float | None:
    """How much worse ``after`` is than ``before`` as a fraction (0.2: 20%
    worse), negative when it got better; None when ``before`` is 0."""
    if not before:
        return None
    higher = any(k in key for k in HIGHER_IS_BETTER)
    if higher:
        return before / after - 1 if after else float("inf")
    return after / before - 1


def compare(before_path: str, after_path: str,
            tolerance: float = TOLERANCE) -> tuple[str, list[str]]:
    """A Markdown table of every number the two summaries share, after/before,
    and the numbers that got more than ``tolerance`` worse (flagged **worse**
    in the table)."""
    with open(before_path) as f:
        before = json.load(f)
    with open(after_path) as f:
        after = json.load(f)
    lines = ["| suite | number | before | after | after/before | |",
             "|---|---|---|---|---|---|"]
    flagged = []
    for name, rec in before["suites"].items():
        other = after["suites"].get(name, {})
        for key, a in rec.get("numbers", {}).items():
            b = other.get("numbers", {}).get(key)
            if b is None:
                continue
            r = f"{b / a:.2f}" if a else "-"
            w = worse_by(key, a, b)
            mark = ""
            if w is not None and w > tolerance:
                mark = f"**worse** ({w:+.0%})"
                flagged.append(f"{name}: {key}")
            lines.append(f"| {name} | {key} | {a:g} | {b:g} | {r} | {mark} |")
    return "\n".join(lines), flagged


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[1])
    p.add_argument("--quick", action="store_true", help="a short version of every suite")
    p.add_argument("--only", action="append", choices=[s.name for s in SUITES],
                   help="run this suite (repeatable); default every suite")
    p.add_argument("--out", metavar="DIR", help="keep each suite's output and JSON here")
    p.add_argument("--summary", metavar="FILE", help="write the headline numbers here")
    p.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"),
                   help="print two summaries side by side, flag what got worse, and exit "
                   "(exit 1 when anything did)")
    p.add_argument("--tolerance", type=float, default=TOLERANCE, metavar="FRACTION",
                   help="with --compare: how much worse a number may get unflagged "
                   f"(default {TOLERANCE:g}, i.e. {TOLERANCE * 100:.0f}%%)")
    args = p.parse_args(argv)
    if args.compare:
        before, after = args.compare
        table, flagged = compare(before, after, tolerance=args.tolerance)
        print(table)
        if flagged:
            print(f"\n{len(flagged)} number(s) more than {args.tolerance:.0%} worse: "
                  + "; ".join(flagged))
            return 1
        print(f"\nnothing more than {args.tolerance:.0%} worse")
        return 0
    out_dir = args.out or tempfile.mkdtemp(prefix="tledger-bench-all-")
    os.makedirs(out_dir, exist_ok=True)
    started = time.monotonic()
    suites = {}
    for suite in SUITES:
        if args.only and suite.name not in args.only:
            continue
        suites[suite.name] = run_suite(suite, args.quick, out_dir)
    doc = {"mode": "quick" if args.quick else "full",
           "seconds": round(time.monotonic() - started, 1), "suites": suites}
    for name, rec in suites.items():
        print(f"{name}: {rec['status']}" + (f" ({rec['why']})" if "why" in rec else "")
              + (f", {rec['seconds']}s" if "seconds" in rec else ""))
        for key, value in rec.get("numbers", {}).items():
            print(f"  {key}: {value:g}")
    print(f"outputs in {out_dir}; {doc['seconds']}s in all")
    if args.summary:
        with open(args.summary, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
    failed = [n for n, r in suites.items() if r["status"].startswith("failed")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
