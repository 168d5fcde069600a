"""Instructions per integration turn (callgrind): ``bench.turn_costs``'s
turns counted in instructions instead of timed, so a change to a turn can be
judged on a loaded machine.

    python -m bench.turn_instr [--mib 0,100] [--turns 40] [--only NAME ...] [TREE ...]

For each contender (``bench.turn_costs.TIMED``, or ``--only``) and history
size, a workspace is bulk-loaded as ``turn_costs --time`` loads it (not
counted), then two processes run under ``valgrind --tool=callgrind``: one
runs the warm-up turns (``turn_costs.WARMUP``), the other the same warm-up
turns and ``--turns`` more, numbered as ``--time`` numbers them. Their
difference over ``--turns`` is the contender's instructions per turn: the
interpreter's start, the imports, the set-up and the warm-up cancel out.
Each ratio is over the contender's floor (``turn_costs.FLOOR_OF``), as
``--time`` gives it. What this cannot see is waiting (fsync) and memory
traffic; ``turn_costs --time`` measures those.

With TREE arguments (source trees, each directly under a directory beside
``shared``), each tree is counted with ``PYTHONPATH`` set to it and a
column per tree is printed; without, the tree this file is in.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

COLLECTED = re.compile(r"Collected : (\d+)")
HERE = Path(__file__).resolve().parent.parent


def _run(name: str, directory: str, turns: int) -> None:
    from bench.turn_costs import WARMUP, _turn_fn

    turn = _turn_fn(name, directory)
    for k in range(WARMUP + turns):
        turn(1_000_000 + k)


def _count(tree: Path, name: str, mib: int, turns: int, tmp: str) -> int:
    """Instructions of ``turns`` turns of ``name`` after the warm-up, on a
    history of ``mib`` MiB, in ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
    script = str(Path(__file__).resolve())
    total = []
    for n in (0, turns):
        d = tempfile.mkdtemp(prefix="turn-instr-", dir=tmp)
        try:
            subprocess.run([sys.executable, script, "--build", name, "--dir", d,
                            "--mib", str(mib)], env=env, cwd=tree, check=True)
            done = subprocess.run(
                ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                 sys.executable, script, "--child", name, "--dir", d, "--turns", str(n)],
                env=env, cwd=tree, capture_output=True, text=True, check=False)
            m = COLLECTED.search(done.stderr)
            if done.returncode != 0 or m is None:
                raise SystemExit(f"{tree}: {name} failed:\n{done.stderr[-2000:]}")
            total.append(int(m.group(1)))
        finally:
            shutil.rmtree(d, ignore_errors=True)
    return (total[1] - total[0]) // turns


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.turn_instr", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trees", nargs="*", type=Path)
    p.add_argument("--mib", default="0,100")
    p.add_argument("--turns", type=int, default=40)
    p.add_argument("--only", action="append")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--build", help=argparse.SUPPRESS)
    p.add_argument("--dir", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.build:
        from bench.turn_costs import _preload
        from bench.turn_workload import turns_for

        if int(args.mib):
            _preload(args.build, args.dir, turns_for(int(args.mib)))
        return 0
    if args.child:
        _run(args.child, args.dir, args.turns)
        return 0
    if shutil.which("valgrind") is None:
        p.error("valgrind is not on the PATH")
    from bench.turn_costs import FLOOR_OF, TIMED

    names = [n for n in (args.only or TIMED) if n in TIMED]
    trees = [t.resolve() for t in args.trees] or [HERE]
    # A contender's ratio needs its floor counted too.
    wanted = list(dict.fromkeys([*names, *(FLOOR_OF[n] for n in names if n in FLOOR_OF)]))
    sizes = [int(x) for x in args.mib.split(",")]
    counts: dict[tuple[str, str, int], int] = {}
    with tempfile.TemporaryDirectory(prefix="turn-instr-") as tmp:
        for mib in sizes:
            for name in wanted:
                for tree in trees:
                    counts[str(tree), name, mib] = _count(tree, name, mib, args.turns, tmp)
                    print(f"{tree.name} {name} {mib} MiB: {counts[str(tree), name, mib]:,}",
                          file=sys.stderr, flush=True)
    head = " | ".join(f"{t.name} M / floor" for t in trees)
    print(f"| contender (floor) | MiB | {head} |")
    print("|---|---|" + "---|" * len(trees))
    for mib in sizes:
        for name in wanted:
            cells = []
            for tree in trees:
                n = counts[str(tree), name, mib]
                floor = FLOOR_OF.get(name)
                ratio = f" / {n / counts[str(tree), floor, mib]:.3f}" if floor else ""
                cells.append(f"{n / 1e6:.2f}{ratio}")
            label = f"{name} ({FLOOR_OF[name]})" if name in FLOOR_OF else name
            print(f"| {label} | {mib} | {' | '.join(cells)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
