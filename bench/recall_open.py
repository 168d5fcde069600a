"""``python -m bench.recall_open build|measure --dir DIR [--sizes 16,256,1024]``

The first ranked search of a fresh process on an existing, up-to-date recall
index (issue 31, thirteenth round): what each ``tledger search``, each MCP
server start and each short-lived agent runtime pays, beside a warm search
of the same process and ``recall.verify`` alone.

``build`` makes one history per size under ``DIR`` (``bench.recall_latency.
build``: the real transcripts, durability ``off``) and its index (one ranked
search), and keeps them: an index of 1 GiB takes many minutes to build, so
``measure`` runs against the same files as often as needed, from any tree.

``pieces`` times each part of ``recall.verify`` on each size's index (the
schema, ``quick_check``, the type checks, the postings' checks in SQL, the
rows' checksums in Python, the counts), in this process, once.

``measure --trees A,B`` runs, for each size and each round, one new Python
process per tree (``PYTHONPATH`` and the working directory = the tree,
alternating A B, B A, ...), each:
``Store`` opened, the first ranked search timed (open + whatever the tree
verifies + the search), then a warm ranked search (another query), then the
whole-index ``verify`` alone on a read-only connection of its own (skip with
``--no-verify``). Medians and ranges per tree and size, the index file's
bytes, and the load average at the start and the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any

CHILD = r"""
import json, os, sqlite3, sys, time
t0 = time.perf_counter()
from ledger import Store
from ledger.storage.files import recall
imported = time.perf_counter() - t0
root, q1, q2, do_verify = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
args = {"action": "search", "mode": "ranked", "current": True, "limit": 10}
tool = Store(root).history("w").session_history()
t0 = time.perf_counter()
a = json.loads(tool.call({**args, "query": q1}))
first = time.perf_counter() - t0
t0 = time.perf_counter()
b = json.loads(tool.call({**args, "query": q2}))
warm = time.perf_counter() - t0
tool.reader._recall.close()
out = {"import_s": imported, "first_s": first, "warm_s": warm,
       "items": [len(a.get("items", [])), len(b.get("items", []))],
       "errors": [x["error"]["code"] for x in (a, b) if "error" in x]}
if do_verify:
    db = sqlite3.connect("file:" + os.path.join(root, "w", "RECALL.sqlite") + "?mode=ro",
                         uri=True)
    t0 = time.perf_counter()
    recall.verify(db)
    out["verify_s"] = time.perf_counter() - t0
    db.close()
print(json.dumps(out))
"""


def history_root(base: str, size: int) -> str:
    return os.path.join(base, f"s{size}")


def do_build(base: str, sizes: list[int]) -> None:
    from bench.output import progress
    from bench.recall_latency import RANKED, build, queries

    log = progress()
    qs = queries(2)
    for size in sizes:
        root = history_root(base, size)
        if os.path.exists(os.path.join(root, "built")):
            log(f"{size} MiB: kept")
            continue
        h = build(root, size)
        log(f"{size} MiB: log written")
        tool = h.session_history()
        json.loads(tool.call({"action": "search", "query": qs[0], **RANKED}))
        tool.reader._recall.close()
        with open(os.path.join(root, "built"), "w") as f:
            f.write("ok\n")
        log(f"{size} MiB: index built")


def index_bytes(root: str) -> int:
    path = os.path.join(root, "w", "RECALL.sqlite")
    return sum(os.path.getsize(path + s) for s in ("", "-wal") if os.path.exists(path + s))


def child(tree: str, root: str, q1: str, q2: str, verify: bool) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=tree)
    got = subprocess.run([sys.executable, "-c", CHILD, root, q1, q2, "1" if verify else "0"],
                         env=env, cwd=tree, capture_output=True, text=True, check=True)
    return dict(json.loads(got.stdout.strip().splitlines()[-1]))


def do_measure(base: str, sizes: list[int], trees: list[str], rounds: int,
               verify: bool) -> dict[str, Any]:
    from bench.recall_latency import queries

    qs = queries(4 * rounds + 4, seed=17)
    out: dict[str, Any] = {"load_at_start": [round(x, 2) for x in os.getloadavg()],
                           "trees": trees, "rounds": rounds, "sizes": {}}
    for size in sizes:
        root = history_root(base, size)
        runs: dict[str, list[dict[str, Any]]] = {t: [] for t in trees}
        for r in range(rounds):
            order = trees if r % 2 == 0 else trees[::-1]
            for t in order:
                i = 2 * (r * len(trees) + trees.index(t))
                runs[t].append(child(t, root, qs[i], qs[i + 1], verify))
        rec: dict[str, Any] = {"index_bytes": index_bytes(root)}
        for t in trees:
            per: dict[str, Any] = {}
            for key in ("first_s", "warm_s", "verify_s", "import_s"):
                xs = [x[key] for x in runs[t] if key in x]
                if xs:
                    per[key] = {"median": round(statistics.median(xs), 4),
                                "min": round(min(xs), 4), "max": round(max(xs), 4)}
            per["errors"] = sorted({e for x in runs[t] for e in x["errors"]})
            rec[t] = per
        out["sizes"][size] = rec
        print(f"{size} MiB: {json.dumps(rec)}", file=sys.stderr, flush=True)
    out["load_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return out


def pieces_of(path: str) -> dict[str, float]:
    """The parts of ``recall.verify`` on the index at ``path``, timed one by
    one (the same statements)."""
    import sqlite3
    import time

    from ledger.storage.files import recall

    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    rec: dict[str, float] = {}

    def timed(name: str, fn: Any) -> None:
        t0 = time.perf_counter()
        fn()
        rec[name] = round(time.perf_counter() - t0, 3)

    def docs() -> None:
        for seq, win, length, size, tids, seg, off, _h in db.execute("SELECT * FROM docs"):
            recall._doc_h(seq, win, length, size, tids, seg, off)

    def others() -> None:
        for term, tid, n, _h in db.execute("SELECT * FROM df"):
            recall._h(term, tid, n)
        for table in ("echo", "wins", "segs"):
            for row in db.execute(f"SELECT * FROM {table}"):
                recall._h(*row[:-1])

    timed("schema", lambda: recall._schema_of(db))
    timed("mark", lambda: recall.read_mark(db))
    timed("quick_check", lambda: db.execute("PRAGMA quick_check").fetchall())
    timed("types", lambda: [db.execute(q).fetchone() for q in recall._MISTYPED.values()])
    timed("postings (SQL)", lambda: db.execute(
        f"SELECT count(*) FROM post WHERE h IS NOT {recall._POST_CHECK}").fetchone())
    timed("docs rows (Python)", docs)
    timed("df, echo, wins, segs rows (Python)", others)
    timed("counts (SQL)", lambda: db.execute(
        "SELECT count(*) FROM df LEFT JOIN (SELECT tid, count(*) AS c FROM post "
        "GROUP BY tid) p USING (tid) WHERE df.n IS NOT coalesce(p.c, 0)").fetchone())
    timed("verify (whole)", lambda: recall.verify(db))
    db.close()
    return rec


def do_pieces(base: str, sizes: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {"load_at_start": [round(x, 2) for x in os.getloadavg()]}
    for size in sizes:
        rec = pieces_of(os.path.join(history_root(base, size), "w", "RECALL.sqlite"))
        out[str(size)] = rec
        print(f"{size} MiB: {json.dumps(rec)}", file=sys.stderr, flush=True)
    out["load_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return out


def main(argv: list[str] | None = None) -> int:
    from bench.output import emit

    p = argparse.ArgumentParser(prog="python -m bench.recall_open")
    p.add_argument("what", choices=("build", "pieces", "measure"))
    p.add_argument("--dir", required=True)
    p.add_argument("--sizes", default="16,256,1024")
    p.add_argument("--trees", default=".", help="comma-separated source trees (measure)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--no-verify", action="store_true")
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",")]
    if args.what == "build":
        do_build(args.dir, sizes)
        return 0
    if args.what == "pieces":
        emit(do_pieces(args.dir, sizes), args.json, indent=1)
        return 0
    trees = [os.path.abspath(t) for t in args.trees.split(",")]
    emit(do_measure(args.dir, sizes, trees, args.rounds, not args.no_verify), args.json,
         indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
