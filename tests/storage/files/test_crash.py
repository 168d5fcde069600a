"""Crash tests: real writer processes SIGKILLed at seeded random moments.

After every kill the log must hold whole batches only, as a gap-free prefix
of seqs, including every batch the writer acknowledged, and the next append
(from this process) must work and continue the seqs.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ledger import Store
from ledger.core.format import files as ffmt
from tests.helpers import (
    PYTHON,
    WRITER,
    check_log,
    dicts,
    msg,
    read_acks,
    subprocess_env,
    temps,
)

KILLS_FORKED = 216  # 24 workspaces x 9 kills
KILLS_PER_WORKSPACE = 9
KILLS_SPAWNED = 12




def _verify_after_kill(root: Path, ws: str, ack: Path, where: str) -> None:
    h = Store(root, durability="off").history(ws)
    if not h.exists():
        assert not read_acks(ack), f"{where}: acknowledged batches but no workspace"
        return
    rows = dicts(h)
    batches = check_log(rows, where)
    for bid, seqs in read_acks(ack).items():
        assert batches.get(bid) == seqs, (
            f"{where}: acknowledged batch {bid} {seqs} is {batches.get(bid)} in the log"
        )
    n = len(rows)
    r = h.append_many([msg(f"after kill {where} #{i}") for i in range(3)])
    assert r.seqs == [n + 1, n + 2, n + 3], f"{where}: next append got {r.seqs} after {n} rows"
    assert temps(root / ws) == [], f"{where}: temp files left after the next append"
    assert [d["seq"] for d in dicts(h, after_seq=n)] == r.seqs


@pytest.fixture
def zygote():
    proc = subprocess.Popen(
        [PYTHON, WRITER, "zygote"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True, env=subprocess_env(),
    )
    yield proc
    proc.stdin.close()
    proc.wait(timeout=30)


def _ask(proc: subprocess.Popen, req: dict) -> int:
    proc.stdin.write(json.dumps(req) + "\n")
    proc.stdin.flush()
    line = proc.stdout.readline()
    assert line, "writer zygote died"
    return int(line)


LANES = 2  # writers alive at once, in different workspaces (their kill delays overlap)


def test_sigkill_forked_writers(zygote: subprocess.Popen, tmp_path: Path) -> None:
    """216 writers forked from a warm interpreter: the even kills 5-60 ms
    after the writer started (with a new workspace every 9 kills, early kills
    also land in the creation of a history), the odd ones 5-60 ms after the
    writer acknowledged its first batch, so half the kills land among
    acknowledged writes however slow the machine is. Two lanes of workspaces
    run side by side: kill ``r`` of each lane in round ``r``, so two writers
    (never of one workspace) wait out their delays together."""
    rng = random.Random(0x5EED)
    plans = []  # per kill, in order: (segment bytes, delay): the draws of one lane-less loop
    for _k in range(KILLS_FORKED):
        plans.append((rng.choice([512, 4096, 65536]), rng.uniform(0.005, 0.060)))
    root = tmp_path / "store"
    per_lane = KILLS_FORKED // LANES
    assert per_lane % KILLS_PER_WORKSPACE == 0  # a workspace's kills stay in one lane, in order
    deaths = 0
    for r in range(per_lane):
        kills = [lane * per_lane + r for lane in range(LANES)]
        started = []
        for k in kills:
            ws = f"crash-{k // KILLS_PER_WORKSPACE}"
            durability = "full" if k % 8 == 7 else "off"
            spec = {"root": str(root), "ws": ws, "durability": durability,
                    "segment_bytes": plans[k][0], "ack": str(tmp_path / f"ack-{k}"), "seed": k}
            pid = _ask(zygote, {"spawn": spec})
            started.append((time.monotonic() + plans[k][1], k, pid, ws, durability))
        for due, k, pid, _ws, _d in sorted(started):
            if k % 2:  # after its first acknowledged batch
                ack = tmp_path / f"ack-{k}"
                deadline = time.monotonic() + 20
                while not (ack.exists() and ack.stat().st_size):
                    assert time.monotonic() < deadline, (
                        f"kill {k}: the writer acknowledged nothing in 20 s")
                    time.sleep(0.002)
                due = time.monotonic() + plans[k][1]
            time.sleep(max(0.0, due - time.monotonic()))
            os.kill(pid, signal.SIGKILL)
        for _due, k, pid, ws, durability in started:
            status = _ask(zygote, {"wait": pid})
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (
                f"kill {k}: the writer ended by itself (status {status}) -- it failed before "
                "the kill"
            )
            deaths += 1
            _verify_after_kill(root, ws, tmp_path / f"ack-{k}",
                               f"kill {k} ({ws}, durability={durability})")
    assert deaths == KILLS_FORKED
    # The writers really wrote: every odd kill came after an acknowledged batch,
    # and the acknowledgements survived the kill (read back above, checked here).
    assert all(read_acks(tmp_path / f"ack-{k}") for k in range(1, KILLS_FORKED, 2))


def test_sigkill_spawned_writers(tmp_path: Path) -> None:
    """A few kills of freshly started interpreters (durability full), the
    plain way a runtime would run the writer; killed once it has acknowledged
    its first batch plus 5-60 ms."""
    rng = random.Random(1234)
    root = tmp_path / "store"
    ws = "spawned"
    env = subprocess_env()
    for k in range(KILLS_SPAWNED):
        ack = tmp_path / f"ack-{k}"
        proc = subprocess.Popen(
            [PYTHON, WRITER, "spawn", str(root), ws, "full", str(rng.choice([600, 8192])),
             str(ack), str(10_000 + k)], env=env, stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 20
        while not (ack.exists() and ack.stat().st_size) and proc.poll() is None:
            assert time.monotonic() < deadline, "spawned writer acknowledged nothing in 20 s"
            time.sleep(0.002)
        time.sleep(rng.uniform(0.005, 0.060))
        proc.kill()
        proc.wait(timeout=10)
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()
        proc.stderr.close()
        _verify_after_kill(root, ws, ack, f"spawned kill {k}")


def test_interrupted_creation_still_gets_format(store_root: Path) -> None:
    """A writer killed between creating the workspace directory and writing
    FORMAT leaves an empty directory; the next write must still write FORMAT
    (the version stamp that makes a newer build's history refuse to load)."""
    (store_root / "ws").mkdir(parents=True, mode=0o700)
    h = Store(store_root, durability="off").history("ws")
    h.append(msg())
    assert (store_root / "ws" / ffmt.FORMAT_NAME).read_bytes() == ffmt.FORMAT_TEXT
