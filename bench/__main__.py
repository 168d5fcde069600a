"""``python -m bench [--quick] [--only NAME] [--out DIR] [--summary FILE]``

Runs every benchmark suite, one after the other, each in its own process:
the file engine's series (``bench.files_bench``), PostgreSQL beside the file
engine (``bench.postgres_bench``), the runtime object
(``bench.conversation_bench``), the agent-framework sessions
(``bench.integrations_bench``), the LangGraph checkpointers
(``bench.langgraph_bench``) and recall (``bench.recall_latency``,
``bench.recall_bench``, ``bench.recall_v2``). A suite whose extra or server
is missing is named with what it lacks, and the run goes on. ``--quick`` runs a short version of
each (a minute or two in all): for A/B comparisons of two commits, run it on
each in one sitting and compare the summaries with
``python -m bench --compare BEFORE.json AFTER.json``.

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
    Suite("files", "bench.files_bench", ["--quick", "--sizes", "0,1,16"], headline=_files),
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


def compare(before_path: str, after_path: str) -> str:
    """A Markdown table of every number the two summaries share, after/before."""
    with open(before_path) as f:
        before = json.load(f)
    with open(after_path) as f:
        after = json.load(f)
    lines = ["| suite | number | before | after | after/before |", "|---|---|---|---|---|"]
    for name, rec in before["suites"].items():
        other = after["suites"].get(name, {})
        for key, a in rec.get("numbers", {}).items():
            b = other.get("numbers", {}).get(key)
            if b is None:
                continue
            r = f"{b / a:.2f}" if a else "-"
            lines.append(f"| {name} | {key} | {a:g} | {b:g} | {r} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[1])
    p.add_argument("--quick", action="store_true", help="a short version of every suite")
    p.add_argument("--only", action="append", choices=[s.name for s in SUITES],
                   help="run this suite (repeatable); default every suite")
    p.add_argument("--out", metavar="DIR", help="keep each suite's output and JSON here")
    p.add_argument("--summary", metavar="FILE", help="write the headline numbers here")
    p.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"),
                   help="print two summaries side by side and exit")
    args = p.parse_args(argv)
    if args.compare:
        print(compare(*args.compare))
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
