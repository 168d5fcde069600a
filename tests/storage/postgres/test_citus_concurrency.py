"""Concurrency on Citus: writer processes over many workspaces through the
coordinator, and writers SIGKILLed mid-transaction.

Each workspace's head row, rows and batches are one shard group on one
worker, so its batches are single-node transactions under the head row's
lock there: seqs stay gap-free and batches whole whichever worker holds it.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from ledger import Store
from tests.helpers import PYTHON, WRITER, msg, read_acks, subprocess_env
from tests.helpers.citus import Roamers, node_of, verify_acks
from tests.storage.postgres.test_faults import _ask, _verify

psycopg = pytest.importorskip("psycopg", reason="the [postgres] extra is not installed")

WORKSPACES = 16


def test_eight_processes_over_sixteen_workspaces_on_two_workers(
    citus_root: str, citus_cluster: Any, tmp_path: Path
) -> None:
    Store(citus_root).history("warm").append(msg("tables first"))
    writers = Roamers(citus_root, tmp_path, "cc", WORKSPACES, n=8, batches=50)
    seen = writers.finish(timeout=180)
    acks = writers.acked()
    assert len(acks) == 8 * 50 and seen == {"CommitFailed": 0, "CommitUncertain": 0,
                                            "Unavailable": 0}
    names = [f"cc-{i}" for i in range(WORKSPACES)]
    rows = verify_acks(citus_root, acks, "8 processes", names)
    assert sum(rows.values()) == sum(len(s) for s in acks.values())  # nothing unacknowledged
    with psycopg.connect(citus_root) as conn:
        where = node_of(conn)
        ports = {where(ws) for ws in names}
    assert ports == {w.port for w in citus_cluster.workers}  # histories on both workers


def test_sigkill_writers_mid_transaction(citus_root: str, tmp_path: Path) -> None:
    """Writers forked from a warm interpreter and SIGKILLed: every other one
    30-150 ms after it started (connecting, or in its first batches), the
    others 0-40 ms after their first acknowledged batch, so they die
    mid-transaction or mid-COMMIT however slow the machine is. What was in
    flight is rolled back on the worker: no batch is ever partial."""
    Store(citus_root).history("warm").append(msg("tables first"))
    zygote = subprocess.Popen([PYTHON, WRITER, "zygote"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=subprocess_env())
    rng = random.Random(0xC1)
    kills, per_ws = 20, 5
    acked_total = 0
    try:
        for k in range(kills):
            ws = f"kill-{k // per_ws}"
            ack = tmp_path / f"ack-{k}"
            spec = {"root": citus_root, "ws": ws, "durability": "full",
                    "segment_bytes": 65536, "ack": str(ack), "seed": k}
            pid = _ask(zygote, {"spawn": spec})
            if k % 2:
                deadline = time.monotonic() + 30
                while not read_acks(ack):
                    assert time.monotonic() < deadline, f"kill {k}: the writer never acked"
                    time.sleep(0.002)
                time.sleep(rng.uniform(0, 0.040))
            else:
                time.sleep(rng.uniform(0.030, 0.150))
            os.kill(pid, signal.SIGKILL)
            status = _ask(zygote, {"wait": pid})
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (
                f"kill {k}: the writer ended by itself (status {status})")
            acks = {}
            for j in range(k - k % per_ws, k + 1):
                acks.update(read_acks(tmp_path / f"ack-{j}"))
            n = _verify(citus_root, ws, acks, f"kill {k}")
            acked_total += len(read_acks(ack))
            if k % per_ws == per_ws - 1:  # the next append continues the seqs
                r = Store(citus_root).history(ws).append_many([msg("after"), msg("kills")])
                assert r.seqs == [n + 1, n + 2]
    finally:
        zygote.stdin.close()  # type: ignore[union-attr]
        zygote.wait(timeout=30)
    assert acked_total >= kills // 2  # half the kills landed mid-stream at least
