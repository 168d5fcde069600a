"""``python -m bench.files_bench [--quick] [--json FILE] [--markdown FILE] [--plots DIR]``

Runs every series of ``bench.series`` in one process and prints the ratios
and the results table. ``--quick`` stops at 256 MiB of history and takes
fewer samples (a few minutes on 2 cores); the full run goes to 1 GiB and
produces the table in ``bench/RESULTS.md``. Generated histories live in a
temporary directory under ``$TMPDIR`` and are deleted at the end.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any

from bench import report
from bench.corpus import REPO, load_corpus
from bench.series import Config, Results, run_all


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.files_bench",
                                description=__doc__.split("\n\n")[1])
    p.add_argument("--quick", action="store_true", help="up to 256 MiB, fewer samples")
    p.add_argument("--json", metavar="FILE", help="write the whole result document here")
    p.add_argument("--markdown", metavar="FILE", help="write the results table here")
    p.add_argument("--plots", metavar="DIR", help="write PNG plots here (needs matplotlib)")
    p.add_argument("--sizes", metavar="MIB,...", help="override the history sizes (MiB)")
    args = p.parse_args(argv)

    cfg = Config.make(args.quick)
    if args.sizes:
        cfg.sizes_mib = sorted({int(x) for x in args.sizes.split(",")})
        cfg.grown_sizes_mib = [s for s in cfg.grown_sizes_mib if s <= max(cfg.sizes_mib)]
    corpus = load_corpus()
    res = Results()
    if not corpus.source.startswith("real"):
        res.note(f"rows are synthetic: {corpus.source}")
    tmp = tempfile.mkdtemp(prefix="tledger-bench-")
    started = time.monotonic()
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")

    def log(msg: str) -> None:
        print(f"{time.monotonic() - started:7.1f}s {msg}", file=sys.stderr, flush=True)

    log(f"mode={'quick' if cfg.quick else 'full'} sizes={cfg.sizes_mib} MiB tmp={tmp} "
        f"corpus={corpus.source}")
    fs = report.filesystem_of(tmp)
    # The code measured is the tree as it is now (modules load at start).
    commit = report.git_commit(str(REPO))
    load_before = os.getloadavg()
    try:
        run_all(cfg, corpus, tmp, res, log)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    ratios, why = report.compute_ratios(cfg, res)
    doc: dict[str, Any] = {
        "meta": {
            "date": when,
            "mode": "quick" if cfg.quick else "full",
            "seconds": round(time.monotonic() - started, 1),
            "commit": commit,
            "machine": report.machine(),
            "filesystem": fs,
            "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
            "corpus": corpus.source,
            "sizes_mib": cfg.sizes_mib,
            "durability": "full",
            "segment_bytes": 64 << 10,
        },
        "ratios": ratios,
        "ratio_notes": why,
        "goals": report.goal_status(ratios),
        "series": res.series,
        "rss_scan": res.extra.get("rss_scan"),
        "tokens_bench": res.extra.get("tokens_bench"),
        "notes": res.notes,
    }
    table = report.markdown_table(doc)
    print(table)
    for note in res.notes:
        print(f"note: {note}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table)
    if args.plots:
        written = report.plots(doc, args.plots)
        if not written:
            print("note: matplotlib is not installed; no plots (pip install -e '.[bench]')")
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
