"""``python -m bench.recall_merge_page [--mib 17] [--queries 40] [--json FILE]``

A ranked page after a merge (issue 31, page1), on one tree (run it once per
tree). A merge moves rows to other segments and offsets; a search reads each
row back from the log at the place the index holds for it, and a place a
merge made old is looked up by seq within the call's read budget, so the
page can end before ``limit`` items.

The history: ``--mib`` MiB of the real transcripts bulk-loaded in segments
of 1 MiB (durability ``off``), its index built by a search; then another
``Store`` handle merges them (``merge_segments``: at 17 MiB one merge of the
first 16 segments, 16 MiB of rows moved, the worst case of a history grown
by appends; at 16 the last segment is short of 1 MiB and nothing merges),
and:

- ``catch-up``: the first refresh of the index after the merge (under the
  reader's lock, ``refresh_recall``), which finds the index's last row
  again and, where the tree does, moves the index's entries (wall, CPU ms);
- ``pages``: for each of ``--queries`` queries (``limit`` 25, ``current``),
  the items of the page against a fresh index's (the workspace copied
  without its index): the sum of items, the pages shorter than the fresh
  one's, and whether every page is a prefix of the fresh one's;
- ``search``: wall and CPU ms per ranked search on the merged index and on
  the fresh one, alternating query by query, after one untimed pass;
- ``to a fresh page``: the calls the merged index takes to return as many
  items as the fresh index's first page (following its cursors), and their
  CPU ms beside the fresh page's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from typing import Any

from bench.corpus import load_corpus
from bench.output import emit, scratch
from bench.recall_latency import MIB, queries
from ledger import Store
from ledger.core.format import files as ffmt
from ledger.storage.files.bulk import bulk_load
from ledger.storage.files.ports import unwrap

PAGE = {"mode": "ranked", "current": True, "limit": 25}


def ms(xs: list[float]) -> dict[str, float]:
    return {"p50_ms": round(statistics.median(xs) * 1e3, 3),
            "mean_ms": round(statistics.fmean(xs) * 1e3, 3)}


def page(tool: Any, query: str) -> tuple[list[int], float, float]:
    c0, t0 = time.process_time(), time.perf_counter()
    out = json.loads(tool.call({"action": "search", "query": query, **PAGE}))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return [item["seq"] for item in out.get("items", [])], wall, cpu


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.recall_merge_page")
    p.add_argument("--mib", type=int, default=17)
    p.add_argument("--queries", type=int, default=40)
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    qs = queries(args.queries)
    with scratch("recall-merge-page-") as tmp:
        root = os.path.join(tmp, "h")
        h = Store(root, durability="off").history("w")
        bulk_load(h, load_corpus().batches(args.mib * MIB, seed=args.mib),
                  MIB, durability="off")
        tool = h.session_history()
        reader: Any = tool.reader
        page(tool, qs[0])  # builds the index
        segments = len(unwrap(h).state().segments)
        other: Any = Store(root, durability="off").history("w").engine
        merges = other.merge_segments()
        st = unwrap(h).state()
        c0, t0 = time.process_time(), time.perf_counter()
        with reader.locked():
            reader.refresh_recall(reader.state())
        catch_up = {"wall_ms": round((time.perf_counter() - t0) * 1e3, 1),
                    "cpu_ms": round((time.process_time() - c0) * 1e3, 1)}
        shutil.copytree(os.path.join(root, "w"), os.path.join(tmp, "f", "w"),
                        ignore=shutil.ignore_patterns(ffmt.RECALL_NAME + "*"))
        fresh = Store(os.path.join(tmp, "f"), durability="off").history("w").session_history()
        items = fresh_items = shorter = 0
        prefix = True
        for q in qs:  # the pages, and one untimed pass of both
            got, want = page(tool, q)[0], page(fresh, q)[0]
            items += len(got)
            fresh_items += len(want)
            shorter += len(got) < len(want)
            prefix = prefix and got == want[:len(got)]
        calls: list[int] = []  # the calls that bring the fresh page's items, cursor by cursor
        spent: dict[str, list[float]] = {"merged": [], "fresh": []}
        for q in qs:
            c0 = time.process_time()
            want_n = len(page(fresh, q)[0])
            c1 = time.process_time()
            n, seen, cursor = 0, 0, None
            while seen < want_n and n < 50:
                got_page = json.loads(tool.call(
                    {"action": "search", "query": q, **PAGE} if cursor is None else
                    {"action": "search", "cursor": cursor}))
                n += 1
                seen += len(got_page.get("items", []))
                cursor = got_page.get("cursor")
                if cursor is None:
                    break
            spent["merged"].append(time.process_time() - c1)
            spent["fresh"].append(c1 - c0)
            calls.append(n)
        wall: dict[str, list[float]] = {"merged": [], "fresh": []}
        cpu: dict[str, list[float]] = {"merged": [], "fresh": []}
        for q in qs:
            for name, t in (("merged", tool), ("fresh", fresh)):
                _, w, c = page(t, q)
                wall[name].append(w)
                cpu[name].append(c)
        out: dict[str, Any] = {
            "mib": args.mib, "segments": segments, "merges": merges,
            "after": len(st.segments), "load": [round(x, 2) for x in os.getloadavg()],
            "catch-up": catch_up,
            "pages": {"queries": len(qs), "items": items, "fresh items": fresh_items,
                      "shorter": shorter, "prefix": prefix},
            "search": {n: {"wall": ms(wall[n]), "cpu": ms(cpu[n])} for n in wall},
            "to a fresh page": {"calls": sum(calls), "queries": len(calls),
                                "cpu": {n: ms(spent[n]) for n in spent}},
        }
        emit(out, args.json, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
