"""Concurrency on PostgreSQL: 8 writer processes x 100 batches into one
workspace, and a follower reading ``rows(after_seq=last)`` all the while.

Seqs are assigned under the head row's lock inside each batch's transaction,
so commit order equals seq order: the follower can never skip a row that
commits later with a lower seq (the non-interleaving test).
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest

from ledger import Store
from tests.helpers import PYTHON, WRITER, check_log, dicts, subprocess_env

pytest.importorskip("psycopg", reason="the [postgres] extra is not installed")

PROCESSES = 8
BATCHES = 100


def test_eight_processes_and_a_follower(pg_root: str, tmp_path: Path) -> None:
    go = tmp_path / "go"
    procs = [subprocess.Popen([PYTHON, WRITER, "threads", pg_root, "ws", "1", str(BATCHES),
                               str(go), str(seed)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=subprocess_env())
             for seed in range(PROCESSES)]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline() == b"ready\n"
    seen: list[int] = []
    done = threading.Event()
    errors: list[BaseException] = []

    def follow() -> None:
        h = Store(pg_root).history("ws")
        last = 0
        try:
            while True:
                finished = done.is_set()
                if h.exists():
                    for row in h.rows(after_seq=last):
                        seen.append(row.seq)
                        last = row.seq
                if finished:
                    return
                time.sleep(0.002)
        except BaseException as exc:
            errors.append(exc)

    follower = threading.Thread(target=follow)
    follower.start()
    go.touch()
    acks: dict[str, list[int]] = {}
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err.decode()
        for line in out.decode().splitlines():
            bid, *seqs = line.split()
            acks[bid] = [int(s) for s in seqs]
    done.set()
    follower.join(timeout=60)
    assert errors == []
    rows = dicts(Store(pg_root).history("ws"))
    batches = check_log(rows, "8 processes")  # gap-free, every batch whole and adjacent
    assert len(acks) == PROCESSES * BATCHES
    assert batches == acks  # no lost, no duplicated batch
    assert seen == list(range(1, len(rows) + 1))  # each row once, in order, none skipped
