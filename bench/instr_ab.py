"""``python -m bench.instr_ab BEFORE_TREE AFTER_TREE``: an A/B in instructions.

On a shared machine the wall-clock A/B of ``python -m bench --compare`` moves
by more than its 15% bound between two runs of the same commit (seen here at a
load of 8 to 14 on 2 cores: 11 to 13 numbers flagged comparing a commit with
itself). Instructions executed do not depend on the load: this runs a fixed
workload through the public API of each source tree under ``valgrind
--tool=callgrind`` and compares the instruction counts, phase by phase. What it
cannot see is time spent waiting (fsync, the disk), which the wall-clock
suites measure; it sees every change of CPU work on the hot paths.

Each phase runs in its own process on a history built for it beforehand
(``build``, the same rows each time, not counted), and the interpreter's start and the
package's imports (the ``noop`` phase, measured per tree) are subtracted:

- ``turns``: 40 turns of a 3-row append batch and the provider view.
- ``appends``: 40 appends of the files bench's batch (3 rows of about
  2 KiB), after 12 untimed ones (past the first sealed segment); minus
  ``appends0`` (the same process with the 12 only), so it is the appends alone.
- ``check``: ``tledger check`` of the workspace (the CLI's own entry point).
- ``view``: 10 provider views, each through a fresh ``Store`` as the files
  bench's view series makes them, of a window of real rows: the files bench's
  1 MiB window (``bench.corpus``, the real transcripts: ~635 rows, a third of
  them orphan tool results served as text), appended two rows a batch after a
  rollover on top of the usual history.
- ``search``: 20 ranked ``session_history`` searches.
- ``conversation``: 8 turns through ``ledger.Conversation`` (user message,
  tool call, tool result) in a 4,000-token budget, rolling over.

Rows are the synthetic corpus of ``bench.corpus`` (seeded), so both trees see
the same bytes. Run: ``python -m bench.instr_ab /path/to/before /path/to/after
[--mib 2]``; valgrind must be installed. The trees need not be installed nor
hold this file: each phase runs this file with ``PYTHONPATH`` set to its tree.

Each tree's packages (``ledger``, ``recovery``) are copied to a temporary
directory and byte-compiled there, and the phases run that copy, as an
installed package runs its bytecode: with ``PYTHONDONTWRITEBYTECODE`` set, as on
this project's machines, every phase compiled each module it imported from
source, about half of ``noop`` (1,165 M instructions against 586 M) and in a
phase's own count the modules it imports beyond noop's, so source grown by
comments or docstrings read as CPU work. The trees themselves get no
``__pycache__`` (modules imported from bytecode change other suites' numbers:
the files suite's ``rss_growth_mib_scan_big`` moves with the heap's layout).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

PHASES = ("noop", "turns", "appends0", "appends", "check", "search", "conversation", "view")
VIEW_WINDOW_BYTES = 1 << 20  # the files bench's window (bench.series.Config.window_bytes)
VIEWS = 10
WS = "ab"
COLLECTED = re.compile(r"Collected : (\d+)")


def _rows(n: int, seed: int) -> list[dict[str, object]]:
    import random

    rnd = random.Random(seed)
    words = ("ledger window floor rollover segment receipt tool call result "
             "approval search postgres citus fork rewind budget token index").split()
    out: list[dict[str, object]] = []
    for i in range(n):
        text = " ".join(rnd.choice(words) for _ in range(rnd.randint(20, 120)))
        role = "user" if i % 2 == 0 else "assistant"
        out.append({"role": role, "parts": [{"type": "text", "text": f"{i} {text}"}]})
    return out


def _sized(n: int, size: int, seed: int) -> list[dict[str, object]]:
    """``n`` rows of about ``size`` stored bytes (the files bench's append)."""
    import random

    rnd = random.Random(seed)
    words = ("ledger window floor rollover segment receipt tool call result "
             "approval search postgres citus fork rewind budget token index").split()
    out: list[dict[str, object]] = []
    for i in range(n):
        text = " ".join(rnd.choice(words) for _ in range((size - 240) // 7))[: size - 240]
        out.append({"kind": "message", "role": ("user", "assistant", "tool")[i % 3],
                    "parts": [{"type": "text", "text": text}]})
    return out


def build(root: str, mib: float, for_phase: str = "") -> None:
    from ledger import Store

    store = Store(root, durability="off")
    h = store.history(WS)
    size = 0
    batch = 0
    while size < mib * 1024 * 1024:
        rows = _rows(50, batch)
        h.append_many(rows)
        size += sum(len(json.dumps(r)) for r in rows)
        batch += 1
    h.rollover([{"role": "user", "parts": [{"type": "text", "text": "go on"}]}])
    h.append_many(_rows(200, 10_000))
    if for_phase == "view":
        rows = _real_window()
        h.rollover([{"role": "user", "parts": [{"type": "text", "text": "the real rows"}]}])
        for i in range(0, len(rows), 2):
            h.append_many(rows[i : i + 2])


def _real_window() -> list[dict[str, Any]]:
    """The files bench's window rows (``Corpus.window_of_bytes``, its seed),
    from the real transcripts beside the repository that holds this file
    (``bench`` is not in the trees' copies: its ``ledger`` stays the tree's)."""
    sys.path.append(str(Path(__file__).resolve().parent.parent))
    from bench.corpus import load_corpus

    corpus = load_corpus()
    if not corpus.source.startswith("real"):
        raise SystemExit(f"the view phase needs the real transcripts: {corpus.source}")
    return corpus.window_of_bytes(VIEW_WINDOW_BYTES, seed=42)


def phase(name: str, root: str) -> None:
    from ledger import Store

    if name == "noop":
        Store(root).history(WS).exists()
        return
    if name == "turns":
        h = Store(root).history(WS)
        for i in range(40):
            h.append_many(_rows(3, 20_000 + i))
            h.provider_view()
    elif name in ("appends0", "appends"):
        batches = [_sized(3, 2048, 40_000 + i) for i in range(52)]
        h = Store(root).history(WS)
        for rows in batches[:12]:
            h.append_many(rows)
        if name == "appends":
            for rows in batches[12:]:
                h.append_many(rows)
    elif name == "check":
        from ledger.cli import main

        code = main(["--root", root, "check", WS])
        if code not in (0, None):
            raise SystemExit(f"check exited {code}")
    elif name == "search":
        tool = Store(root).history(WS).session_history()
        for q in ("rollover receipt", "postgres fork", "approval budget", "segment index",
                  "tool call result") * 4:
            tool.call({"action": "search", "query": q})
    elif name == "view":
        for _ in range(VIEWS):
            Store(root).history(WS).provider_view()
    elif name == "conversation":
        from ledger.rollover.conversation import Conversation

        conv = Conversation.open(Store(root), "conv", model="gpt-4o", context_limit=4000,
                                 system="agent")
        for i, row in enumerate(_rows(8, 30_000)):
            conv.send({"role": "user", "parts": row["parts"]})
            conv.record({"role": "assistant", "parts": [{"type": "text", "text": f"ok {i}"}]})
    else:
        raise SystemExit(f"unknown phase {name!r}: {PHASES}")


PACKAGES = ("ledger", "recovery")  # what the phases import from a tree


def compiled_copy(tree: Path, dest: Path) -> Path:
    """``dest`` holding a copy of the tree's packages, byte-compiled (module
    doc): the phases run the bytecode, as an installed package does, not the
    compiler."""
    for package in PACKAGES:
        if (tree / package).is_dir():
            shutil.copytree(tree / package, dest / package,
                            ignore=shutil.ignore_patterns("__pycache__"))
            if not compileall.compile_dir(dest / package, quiet=1):
                raise SystemExit(f"{tree / package}: byte-compiling failed")
    return dest


def _count(tree: Path, name: str, root: str) -> int:
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
         sys.executable, str(Path(__file__).resolve()), "--phase", name, root],
        env=env, cwd=tree, capture_output=True, text=True, check=False)
    m = COLLECTED.search(done.stderr)
    if done.returncode != 0 or m is None:
        raise SystemExit(f"{tree}: phase {name} failed:\n{done.stderr[-2000:]}")
    return int(m.group(1))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.instr_ab", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trees", nargs="*", type=Path, help="BEFORE_TREE AFTER_TREE")
    p.add_argument("--mib", type=float, default=2.0, help="history size to build")
    p.add_argument("--phases", default=",".join(PHASES),
                   help="comma-separated phases to count (noop is always counted)")
    p.add_argument("--phase", help=argparse.SUPPRESS)
    p.add_argument("--build", help=argparse.SUPPRESS)
    p.add_argument("--for-phase", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.phase:
        phase(args.phase, args.trees[0].as_posix())  # the tree is PYTHONPATH's
        return 0
    if args.build:
        build(args.build, args.mib, args.for_phase)
        return 0
    if len(args.trees) != 2 or shutil.which("valgrind") is None:
        p.error("give BEFORE_TREE and AFTER_TREE, with valgrind installed")
    phases = [n for n in PHASES if n == "noop" or n in args.phases.split(",")
              or (n == "appends0" and "appends" in args.phases.split(","))]
    counts: dict[str, dict[str, int]] = {}
    with tempfile.TemporaryDirectory(prefix="instr-ab-") as tmp:
        for i, given in enumerate(args.trees):
            given = given.resolve()
            tree = compiled_copy(given, Path(tmp) / f"code-{i}")
            env = {**os.environ, "PYTHONPATH": str(tree)}
            counts[str(given)] = {}
            for name in phases:
                # Built afresh for each phase: a copy would change the segments'
                # stamps, and the first write would re-baseline the receipt.
                root = Path(tmp) / f"{tree.name}-{name}"
                subprocess.run([sys.executable, str(Path(__file__).resolve()), "--build",
                                str(root), "--mib", str(args.mib), "--for-phase", name],
                               env=env, cwd=tree,
                               check=True)
                counts[str(given)][name] = _count(tree, name, str(root))
                shutil.rmtree(root)
    before, after = (counts[str(t.resolve())] for t in args.trees)
    print("| phase | before (M instr) | after (M instr) | after/before |")
    print("|---|---|---|---|")
    for name in phases:
        if name == "appends0":
            continue
        base = "noop" if name != "appends" else "appends0"
        b = before[name] - (0 if name == "noop" else before[base])
        a = after[name] - (0 if name == "noop" else after[base])
        print(f"| {name}{'' if name == 'noop' else f' (minus {base})'} | {b / 1e6:,.1f} | "
              f"{a / 1e6:,.1f} | {a / b:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
