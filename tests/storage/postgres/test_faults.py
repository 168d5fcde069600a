"""PostgreSQL under faults: real writer processes SIGKILLed mid-transaction,
and the server itself stopped with ``pg_ctl stop -m immediate`` (a crash: no
checkpoint, clients cut off) and started again during a write load.

After each fault the history holds whole batches only, gap-free, with every
batch a writer acknowledged; writers that saw the server go away resume once
it is back, and a batch retried with its batch id is never written twice.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from ledger import Store
from tests.helpers import (
    PYTHON,
    WRITER,
    check_log,
    dicts,
    msg,
    read_acks,
    subprocess_env,
)

pytest.importorskip("psycopg", reason="the [postgres] extra is not installed")

KILLS = 60  # 6 workspaces x 10 kills




def _verify(root: str, ws: str, acks: dict[str, list[int]], where: str) -> int:
    h = Store(root).history(ws)
    if not h.exists():
        assert not acks, f"{where}: acknowledged batches but no workspace"
        return 0
    rows = dicts(h)
    batches = check_log(rows, where)
    for bid, seqs in acks.items():
        assert batches.get(bid) == seqs, f"{where}: acked {bid} {seqs} is {batches.get(bid)}"
    return len(rows)


@pytest.fixture
def zygote():  # type: ignore[no-untyped-def]
    proc = subprocess.Popen([PYTHON, WRITER, "zygote"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=subprocess_env())
    yield proc
    proc.stdin.close()  # type: ignore[union-attr]
    proc.wait(timeout=30)


def _ask(proc: subprocess.Popen[str], req: dict[str, Any]) -> int:
    proc.stdin.write(json.dumps(req) + "\n")  # type: ignore[union-attr]
    proc.stdin.flush()  # type: ignore[union-attr]
    line = proc.stdout.readline()  # type: ignore[union-attr]
    assert line, "writer zygote died"
    return int(line)


def test_sigkill_writers_mid_transaction(
    pg_root: str, zygote: subprocess.Popen[str], tmp_path: Path
) -> None:
    """60 writers forked from a warm interpreter, each killed 30-150 ms after
    it started (even kills: mid-connect, mid-transaction, mid-COMMIT) or that
    long after its first acknowledged batch (odd kills: mid-stream however
    slow the machine is): the server rolls back what was in flight, so no
    batch is ever partial."""
    rng = random.Random(0xD8)
    mid_stream = 0
    for k in range(KILLS):
        ws = f"kill-{k // 10}"
        ack = tmp_path / f"ack-{k}"
        spec = {"root": pg_root, "ws": ws, "durability": "full", "segment_bytes": 65536,
                "ack": str(ack), "seed": k}
        pid = _ask(zygote, {"spawn": spec})
        if k % 2:
            deadline = time.monotonic() + 30
            while not read_acks(ack):
                assert time.monotonic() < deadline, f"kill {k}: no batch acknowledged in 30 s"
                time.sleep(0.005)
        time.sleep(rng.uniform(0.030, 0.150))  # the fault's point in time, not a wait
        os.kill(pid, signal.SIGKILL)
        status = _ask(zygote, {"wait": pid})
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (
            f"kill {k}: the writer ended by itself (status {status})")
        acks = {}
        for j in range(k - k % 10, k + 1):
            acks.update(read_acks(tmp_path / f"ack-{j}"))
        n = _verify(pg_root, ws, acks, f"kill {k}")
        mid_stream += bool(read_acks(ack))
        if k % 10 == 9:  # the next append continues the seqs
            r = Store(pg_root).history(ws).append_many([msg("after"), msg("kills")])
            assert r.seqs == [n + 1, n + 2]
    assert mid_stream >= KILLS // 2  # half the kills landed after a batch, not before the first


def test_a_server_crash_and_restart_during_a_write_load(tmp_path: Path) -> None:
    """Three writers append 3-row batches while the server is stopped with
    ``-m immediate`` and started again: every acknowledged batch is there,
    each exactly once, and every writer finishes its batches after
    reconnecting."""
    import psycopg

    from ledger.storage.postgres.connect import close_pools
    from tests.helpers.pg_cluster import Cluster, PgUnavailable

    try:
        cluster = Cluster()
        server = cluster.start()
    except PgUnavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL is required in CI: {exc}")
        pytest.skip(str(exc))
    try:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute("CREATE DATABASE crash")
        root = cluster.dsn("crash")
        Store(root).history("ws").append(msg("first"))
        close_pools(root)
        writers = []
        for seed in range(3):
            ack = tmp_path / f"ack-{seed}"
            writers.append((ack, subprocess.Popen(
                [PYTHON, WRITER, "resilient", root, "ws", str(ack), str(seed), "120"],
                env=subprocess_env(), stderr=subprocess.PIPE)))
        deadline = time.monotonic() + 30
        while sum(len(read_acks(a)) for a, _ in writers) < 30:
            assert time.monotonic() < deadline, "writers acknowledged nothing"
            time.sleep(0.01)
        cluster.stop("immediate")
        # The outage lasts half a second: the fault's length, not a wait for
        # something. A writer then either failed an append (and retries it) or
        # waits in its pool for a connection; nothing signals the latter.
        time.sleep(0.5)
        cluster.start()
        for _ack, proc in writers:
            assert proc.wait(timeout=150) == 0, proc.stderr.read().decode()  # type: ignore[union-attr]
            proc.stderr.close()  # type: ignore[union-attr]
        acks: dict[str, list[int]] = {}
        for ack, _ in writers:
            acks.update(read_acks(ack))
        assert len(acks) == 360
        n = _verify(root, "ws", acks, "after the restart")
        assert n == 1 + 3 * 360  # each batch exactly once: retries never duplicated
        close_pools(root)
    finally:
        cluster.remove()
