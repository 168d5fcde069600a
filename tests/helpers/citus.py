"""Helpers of the Citus tests: writer processes over many workspaces, and
checks of what they acknowledged (``tests/helpers/writer_proc.py roam``)."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ledger import Store
from tests.helpers import PYTHON, WRITER, check_log, dicts, read_acks, subprocess_env


class Roamers:
    """``n`` writer processes appending to workspaces ``prefix-0..nws-1``
    until each acknowledged ``batches`` batches (0: until ``stop()``)."""

    def __init__(self, root: str, tmp: Path, prefix: str, nws: int, n: int,
                 batches: int = 0) -> None:
        self.root, self.prefix, self.nws, self.batches = root, prefix, nws, batches
        self.go, self.stop_file = tmp / f"{prefix}-go", tmp / f"{prefix}-stop"
        self.acks = [tmp / f"{prefix}-ack-{i}" for i in range(n)]
        self.procs = [subprocess.Popen(
            [PYTHON, WRITER, "roam", root, prefix, str(nws), str(ack), str(seed),
             str(batches), str(self.go), str(self.stop_file)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=subprocess_env())
            for seed, ack in enumerate(self.acks)]
        for p in self.procs:
            assert p.stdout is not None and p.stdout.readline() == b"ready\n"
        self.go.touch()

    def acked(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for ack in self.acks:
            out.update(read_acks(ack))
        return out

    def wait_for(self, more: int, timeout: float = 60) -> int:
        """Block until ``more`` batches more than now are acknowledged."""
        target = len(self.acked()) + more
        deadline = time.monotonic() + timeout
        while (got := len(self.acked())) < target:
            dead = [p.returncode for p in self.procs if p.poll() is not None and p.returncode]
            assert not dead, f"a writer failed: {self.errors()}"
            assert time.monotonic() < deadline, f"writers stalled at {got} of {target} acks"
            time.sleep(0.02)
        return got

    def errors(self) -> str:
        return " | ".join(p.stderr.read().decode()[-2000:] for p in self.procs  # type: ignore[union-attr]
                          if p.poll() is not None and p.returncode)

    def finish(self, timeout: float = 120) -> dict[str, int]:
        """Stop (when unbounded), wait for every writer to exit 0; returns the
        failures they saw and retried, summed."""
        if not self.batches:
            self.stop_file.touch()
        seen: dict[str, int] = {}
        for p, ack in zip(self.procs, self.acks, strict=True):
            _, err = p.communicate(timeout=timeout)
            assert p.returncode == 0, err.decode()[-3000:]
            for k, v in json.loads(Path(str(ack) + ".stats").read_text()).items():
                seen[k] = seen.get(k, 0) + v
        return seen


def verify_acks(root: str, acks: dict[str, list[int]], where: str,
                workspaces: list[str]) -> dict[str, int]:
    """Every workspace gap-free with whole batches, each batch once; every
    acknowledged batch there with its seqs. Returns rows per workspace."""
    out: dict[str, int] = {}
    store = Store(root)
    for ws in workspaces:
        h = store.history(ws)
        mine = {b: s for b, s in acks.items() if b.split(":", 1)[0] == ws}
        if not h.exists():
            assert not mine, f"{where}: {ws} acknowledged batches but has no history"
            continue
        rows = dicts(h)
        batches = check_log(rows, f"{where} {ws}")
        for bid, seqs in mine.items():
            assert batches.get(bid) == seqs, f"{where}: acked {bid} {seqs} is {batches.get(bid)}"
        out[ws] = len(rows)
    return out


def node_of(conn: Any) -> Callable[[str], int]:
    """workspace -> the port of the node holding its shard group."""
    def port(ws: str) -> int:
        got = conn.execute(
            "SELECT n.nodeport FROM pg_dist_placement p JOIN pg_dist_node n USING (groupid) "
            "WHERE p.shardid = get_shard_id_for_distribution_column('tl_rows', %s::text)",
            (ws,)).fetchone()
        return int(got[0])
    return port
