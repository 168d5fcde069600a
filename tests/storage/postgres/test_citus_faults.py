"""Citus under operations and faults, with writers running all along:

- shards moved (``citus_move_shard_placement``) and rebalanced
  (``citus_rebalance_start``): no acknowledged batch lost, none written
  twice, and the writers carry on;
- a worker stopped with ``pg_ctl stop -m immediate`` and started again:
  writers see only ``CommitFailed`` / ``CommitUncertain`` / ``Unavailable``,
  retry by batch id, and nothing is duplicated;
- a worker's transaction lost between the last statement and COMMIT: the
  coordinator answers COMMIT with "could not commit transaction for shard",
  which cannot tell whether the worker committed, so the engine says
  ``CommitUncertain`` (not ``CommitFailed``: "certainly not committed" would
  be a promise it cannot keep), and the retry by batch id writes the batch
  exactly once.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from ledger import Store
from ledger.core.errors import CommitUncertain
from tests.helpers import check_log, dicts, msg
from tests.helpers.citus import Roamers, node_of, verify_acks

psycopg = pytest.importorskip("psycopg", reason="the [postgres] extra is not installed")


def _placements(conn: Any) -> dict[int, int]:
    """shard id of each tl_rows shard -> port of the node holding it."""
    got = conn.execute(
        "SELECT s.shardid, n.nodeport FROM pg_dist_shard s JOIN pg_dist_placement p "
        "USING (shardid) JOIN pg_dist_node n USING (groupid) "
        "WHERE s.logicalrelid = 'tl_rows'::regclass").fetchall()
    return {int(s): int(port) for s, port in got}


def test_shard_moves_and_a_rebalance_under_writers(
    citus_root: str, citus_cluster: Any, tmp_path: Path
) -> None:
    Store(citus_root).history("warm").append(msg("tables first"))
    names = [f"mv-{i}" for i in range(8)]
    writers = Roamers(citus_root, tmp_path, "mv", len(names), n=4)
    sock = citus_cluster.socket_dir
    try:
        writers.wait_for(40)
        with psycopg.connect(citus_root, autocommit=True) as conn:
            where = node_of(conn)
            src = where("mv-0")
            dst = next(w.port for w in citus_cluster.workers if w.port != src)
            shard = conn.execute("SELECT get_shard_id_for_distribution_column('tl_rows', "
                                 "'mv-0'::text)").fetchone()[0]
            conn.execute("SELECT citus_move_shard_placement(%s, %s, %s, %s, %s)",
                         (shard, sock, src, sock, dst))  # logical: writes go on meanwhile
            assert where("mv-0") == dst
            writers.wait_for(20)  # the writers carry on after the move

            before = _placements(conn)
            job = conn.execute("SELECT citus_rebalance_start()").fetchone()[0]
            assert job is not None, "the move left nothing to rebalance"
            conn.execute("SELECT citus_rebalance_wait()")
            after = _placements(conn)
            assert after != before
            counts = [list(after.values()).count(w.port) for w in citus_cluster.workers]
            assert counts == [4, 4]
            writers.wait_for(20)  # and after the rebalance
    finally:
        seen = writers.finish()
    acks = writers.acked()
    rows = verify_acks(citus_root, acks, "after the moves", names)
    assert sum(rows.values()) >= sum(len(s) for s in acks.values())
    assert sum(seen.values()) < len(acks)  # a retry here and there at most


def test_a_worker_crash_and_restart_under_writers(
    citus_root: str, citus_cluster: Any, tmp_path: Path
) -> None:
    Store(citus_root).history("warm").append(msg("tables first"))
    names = [f"cr-{i}" for i in range(8)]
    with psycopg.connect(citus_root) as conn:
        where = node_of(conn)
        ports = {where(ws) for ws in names}
    assert len(ports) == 2  # writes go to both workers, and one of them will crash
    writers = Roamers(citus_root, tmp_path, "cr", len(names), n=4)
    try:
        writers.wait_for(30)
        victim = citus_cluster.workers[0]
        victim.stop("immediate")
        # Down until the writers kept going for a while (a dozen batches on the
        # live worker: each roams over both, so some met the dead one) or 5 s
        # passed; a fixed 0.5 s was sometimes all spent off the CPU at load.
        down_from, deadline = len(writers.acked()), time.monotonic() + 5
        time.sleep(0.5)
        while len(writers.acked()) < down_from + 12 and time.monotonic() < deadline:
            time.sleep(0.05)
        victim.start()
        writers.wait_for(40, timeout=90)  # everyone resumed after the restart
    finally:
        seen = writers.finish()
    acks = writers.acked()
    verify_acks(citus_root, acks, "after the worker crash", names)
    # The crash was felt: a batch failed in flight (CommitFailed/Uncertain) or
    # found the worker gone before it began (Unavailable), and was retried.
    assert seen["CommitFailed"] + seen["CommitUncertain"] + seen["Unavailable"] > 0, seen


def test_a_worker_lost_before_commit_is_commit_uncertain(
    citus_root: str, citus_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's backend of the transaction is terminated right before
    COMMIT: the append must not be acknowledged, nor called certainly failed."""
    h = Store(citus_root).history("lost")
    h.append(msg("first"))
    real = psycopg.Connection.execute
    killed: list[int] = []
    armed = [True]

    def execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        if query == "COMMIT" and armed[0]:
            armed[0] = False
            gpid = real(self, "SELECT citus_backend_gpid()").fetchone()[0]
            name = f"citus_internal gpid={gpid}"
            for node in citus_cluster.workers:
                with psycopg.connect(node.dsn(), autocommit=True) as w:
                    got = w.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                    "WHERE application_name = %s", (name,)).fetchall()
                    killed.extend(1 for (ok,) in got if ok)
                    deadline = time.monotonic() + 10  # gone before COMMIT reaches it
                    while w.execute("SELECT count(*) FROM pg_stat_activity WHERE "
                                    "application_name = %s", (name,)).fetchone()[0]:
                        assert time.monotonic() < deadline, "the worker backend lives on"
                        time.sleep(0.01)
        return real(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", execute)
    with pytest.raises(CommitUncertain) as info:
        h.append_many([msg("question"), msg("answer", "assistant")], batch_id="b-lost")
    assert killed and info.value.batch_id == "b-lost"
    assert "could not commit" in str(info.value)
    assert [r["seq"] for r in dicts(h)] == [1]  # the worker rolled it back
    for _ in range(2):  # the retry writes it once; the next retry finds it
        assert h.append_many([msg("question"), msg("answer", "assistant")],
                             batch_id="b-lost").seqs == [2, 3]
    assert check_log(dicts(h))["b-lost"] == [2, 3]
