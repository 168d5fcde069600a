"""What rewrites cost on each file layout (issue 33, third round).

    python -m bench.rewrite_layout [--size 100] [--json FILE]

A fork links every sealed segment, so it is cheap when a history has few of
them; but a rewrite (purge, reject, rewind, truncate) copies the whole
segment that holds its row, so big segments make it dearer. This measures
both layouts of ``bench.fork_bench`` (``grown``: the segments appends and
their automatic merges keep, about 15 MiB then smaller; ``flat``: 64 KiB
each) on the same history of ``--size`` MiB with a manual reset (a privacy
floor) at its middle. On each layout, in this order (each changes the
history): ``purge_before_floor`` (the rows before the middle floor go),
``reject`` of a row 40 batch ends before the head, ``rewind`` to 20 batch
ends before the head, ``truncate_after`` 10 batch ends before the head, and
a ``fork`` at the head; wall and CPU time of each, and the segment count.
The layouts alternate within the one process, operation by operation.
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

from bench.corpus import load_corpus
from bench.fork_bench import WS, build_files
from bench.output import emit
from bench.postgres_bench import history_batches
from ledger.transcript.store import Store

RESET = {"kind": "reset", "role": "system", "parts": [], "reset": {"reason": "manual"}}


def _segments(root: str) -> int:
    return sum(1 for n in os.listdir(os.path.join(root, WS)) if n.startswith("seg-"))


def _batch_ends(h: Any, count: int) -> list[int]:
    """The seqs of the newest ``count`` batch ends, newest first."""
    ends: list[int] = []
    for row in h.rows(max(0, h.next_seq - 40 * count)):
        if row.batch["i"] == row.batch["n"] - 1:
            ends.append(int(row.seq))
    return ends[::-1][:count]


def run(size: int, log: Callable[[str], None]) -> dict[str, Any]:
    corpus = load_corpus()
    batches, tail = history_batches(corpus, size)
    half = len(batches) // 2
    batches = [*batches[:half], [RESET], *batches[half:], *tail]
    tmp = tempfile.mkdtemp(prefix="tledger-rewrite-layout-")
    out: dict[str, Any] = {"size_mib": size, "corpus": corpus.source, "layouts": {}}
    try:
        hs = {}
        for layout in ("grown", "flat"):
            root = os.path.join(tmp, layout)
            h = Store(root).history(WS)
            build_files(h, batches, layout)
            hs[layout] = (root, h)
            out["layouts"][layout] = {"segments_built": _segments(root)}
        os.sync()
        ends = _batch_ends(hs["grown"][1], 41)
        ops: list[tuple[str, Callable[[Any], Any]]] = [
            ("purge_before_floor", lambda h: h.purge_before_floor()),
            ("reject", lambda h: h.reject(ends[40])),
            ("rewind", lambda h: h.rewind(to=ends[20])),
            ("truncate_after", lambda h: h.truncate_after(ends[10])),
            ("fork", lambda h: h.fork(f"{WS}-fork")),
        ]
        for name, op in ops:
            for layout in ("grown", "flat") if len(name) % 2 else ("flat", "grown"):
                root, h = hs[layout]
                t0, c0 = time.perf_counter(), time.process_time()
                op(h)
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                out["layouts"][layout][name] = {"ms": round(wall * 1e3, 1),
                                                "cpu_ms": round(cpu * 1e3, 1),
                                                "segments_after": _segments(root)}
                log(f"{layout} {name}: {wall * 1e3:.1f} ms wall, {cpu * 1e3:.1f} ms CPU, "
                    f"{_segments(root)} segments")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.rewrite_layout",
                                description=__doc__.split("\n\n")[1])
    p.add_argument("--size", type=int, default=100, metavar="MIB")
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    doc = run(args.size, lambda m: print(m, file=sys.stderr, flush=True))
    doc["load_at_end"] = os.getloadavg()
    emit(doc, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
