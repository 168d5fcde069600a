"""``check`` against its floor: one pass of per-line msgspec decoding.

    python -m bench.check_bench [--mib 64] [--json FILE]

The floor reads the same segment files with the same chunked line reader and
decodes every line into the same struct ``check`` uses
(``ledger.storage.files.scan.CheckRow``) -- the least any verifier that looks at every
row must do. ``check`` adds the checksum of every line, UTF-8 validation,
batch and sequence bookkeeping, reset detection, and the receipt. The goal is
``check`` at most 1.5x this floor. (The files bench's
``check_over_decode_floor``, goal 1.2 since issue 31, divides by another floor,
``bench.floors.read_decode``: generic decoding into dicts, dearer than
``CheckRow``'s, so the two ratios differ.) Memory: ``check`` streams, so its peak
(traced Python allocations) stays flat as the history grows; ``run`` reports
it next to the floor's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import msgspec

from bench.workspace import workspace_dir
from ledger.storage.files import segments as segs
from ledger.storage.files.scan import CheckRow
from ledger.transcript.history import History
from ledger.transcript.store import Store
from recovery.check import check

_decode = msgspec.json.Decoder(CheckRow).decode


def decode_floor(history: History) -> int:
    """Decode every line of every segment into CheckRow; returns the row count."""
    rows = 0
    path = workspace_dir(history)
    for number in segs.list_segments(path):
        fd = os.open(segs.segment_path(path, number), os.O_RDONLY | os.O_CLOEXEC)
        try:
            for line in segs.iter_lines_fd(fd):
                _decode(line.data)
                rows += 1
        finally:
            os.close(fd)
    return rows


def _best(fn: Callable[[], Any], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _peak(fn: Callable[[], Any]) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def run(root_or_history: str | os.PathLike[str] | History, *, workspace: str = "bench",
        repeats: int = 5) -> dict[str, Any]:
    """Time ``check`` and the decode floor over one history (best of
    ``repeats``, interleaved so both see the same cache state), and their
    peak traced memory."""
    h = root_or_history if isinstance(root_or_history, History) else (
        Store(root_or_history).history(workspace))
    path = workspace_dir(h)
    size = sum(os.path.getsize(segs.segment_path(path, n)) for n in segs.list_segments(path))
    report = check(h)
    rows = decode_floor(h)
    t_check = t_floor = float("inf")
    for k in range(repeats):
        order = [("check", lambda: check(h)), ("floor", lambda: decode_floor(h))]
        for name, fn in order if k % 2 == 0 else order[::-1]:
            t = _best(fn, 1)
            if name == "check":
                t_check = min(t_check, t)
            else:
                t_floor = min(t_floor, t)
    return {
        "bytes": size,
        "rows": rows,
        "segments": report.segments,
        "check_ok": report.ok,
        "check_s": round(t_check, 4),
        "decode_floor_s": round(t_floor, 4),
        "ratio": round(t_check / t_floor, 3) if t_floor > 0 else None,
        "check_mib_s": round(size / t_check / (1 << 20), 1),
        "check_peak_bytes": _peak(lambda: check(h)),
        "floor_peak_bytes": _peak(lambda: decode_floor(h)),
    }


def build(root: str, mib: int, workspace: str = "bench") -> History:
    """A history of about ``mib`` MiB of realistic rows (bench.corpus)."""
    from bench.corpus import load_corpus
    from ledger.storage.files.bulk import bulk_load

    corpus = load_corpus()
    h = Store(root, durability="off").history(workspace)
    bulk_load(h, corpus.batches(mib << 20, seed=7), 4 << 20, durability="off")
    return h


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.check_bench",
                                description="check vs one pass of per-line msgspec decoding")
    p.add_argument("--mib", type=int, default=64, help="history size (MiB); memory is also "
                   "measured at a quarter of it")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", metavar="FILE", help="write the result document here")
    args = p.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="tledger-check-bench-")
    try:
        small = run(build(os.path.join(tmp, "small"), max(1, args.mib // 4)),
                    repeats=args.repeats)
        big = run(build(os.path.join(tmp, "big"), args.mib), repeats=args.repeats)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    doc = {"small": small, "big": big,
           "memory_growth": round(big["check_peak_bytes"] / max(1, small["check_peak_bytes"]), 2)}
    text = json.dumps(doc, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return 0 if big["ratio"] is not None and big["ratio"] <= 1.5 else 1


if __name__ == "__main__":
    sys.exit(main())
