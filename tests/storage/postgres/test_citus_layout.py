"""The engine's tables on Citus: created distributed by default, a plain
schema refused with the command that converts it, and ``tledger db
distribute`` converting it in place with every row kept."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from typing import Any

import pytest

from ledger import Store
from ledger.storage.postgres.admin import distribute
from ledger.storage.postgres.citus import NotDistributed
from ledger.storage.postgres.connect import close_pools
from tests.helpers import msg, subprocess_env

psycopg = pytest.importorskip("psycopg", reason="the [postgres] extra is not installed")

WORKSPACE_TABLES = ["tl_batches", "tl_head", "tl_quarantine", "tl_rows", "tl_recall_state",
                    "tl_recall_terms", "tl_recall_docs", "tl_recall_post", "tl_recall_echo",
                    "tl_vec_state", "tl_vec", "tl_lineage", "tl_forks"]


def tl(root: str, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "ledger.cli", "--root", root, *args],
                          input=stdin, capture_output=True, timeout=120, env=subprocess_env())


def citus_tables(root: str) -> dict[str, tuple[str, str, int]]:
    """table -> (citus_table_type, distribution column, colocation id)."""
    with psycopg.connect(root) as conn:
        got = conn.execute(
            "SELECT table_name::text, citus_table_type, distribution_column, colocation_id "
            "FROM public.citus_tables WHERE table_name::text LIKE 'tl\\_%'").fetchall()
    return {name: (kind, col, colo) for name, kind, col, colo in got}


def assert_distributed(root: str) -> None:
    tables = citus_tables(root)
    assert sorted(tables) == sorted([*WORKSPACE_TABLES, "tl_schema"])
    colocation = {tables[t][2] for t in WORKSPACE_TABLES}
    assert [tables[t][:2] for t in WORKSPACE_TABLES] == \
        [("distributed", "workspace")] * len(WORKSPACE_TABLES)
    assert len(colocation) == 1  # one shard group: a workspace's rows, head, recall index
    assert tables["tl_schema"][0] == "reference"


def test_a_new_store_creates_its_tables_distributed(citus_root: str) -> None:
    Store(citus_root).history("ws").append(msg("x"))
    assert_distributed(citus_root)
    p = tl(citus_root, "db", "status", "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["citus"] is True and out["problems"] == []
    shards = [n["tl_rows_shards"] for n in out["nodes"]]
    assert sorted(shards) == [0, 4, 4]  # none on the coordinator, half on each worker


def test_a_version_1_schema_gets_the_recall_tables_distributed(citus_root: str) -> None:
    h = Store(citus_root).history("ws")
    h.append(msg("the otter swims"))
    close_pools(citus_root)
    with psycopg.connect(citus_root, autocommit=True) as conn:
        conn.execute("DROP TABLE tl_recall_state, tl_recall_terms, tl_recall_docs, "
                     "tl_recall_post, tl_recall_echo")
        conn.execute("UPDATE tl_schema SET version = 1")
    h = Store(citus_root).history("ws")  # the upgrade: created distributed, colocated
    assert_distributed(citus_root)
    got = json.loads(h.session_history().call({"action": "search", "query": "otter",
                                               "mode": "ranked", "current": True}))
    assert [i["seq"] for i in got["items"]] == [1]


def _lines(root: str, ws: str) -> list[bytes]:
    return [r.line for r in Store(root).history(ws).rows()]


def test_a_plain_schema_is_refused_until_db_distribute_converts_it(citus_cluster: Any) -> None:
    name = "plain_" + uuid.uuid4().hex[:8]
    root = citus_cluster.add_database(name, citus=False)
    try:
        store = Store(root)  # plain PostgreSQL: plain tables
        for ws in ("alpha", "beta", "gamma"):
            h = store.history(ws)
            h.append_many([msg(f"{ws} one"), msg(f"{ws} two", "assistant")])
            h.clear_soft()
            h.append_many([msg(f"{ws} three"), msg(f"{ws} four", "assistant")])
            h.truncate_after(h.snapshot().next_seq - 3)  # a quarantine row as well
            h.append(msg(f"{ws} five"))
        store.history("alpha").fork("delta")  # on plain PostgreSQL: alpha's rows, shared
        before = {ws: (_lines(root, ws), store.history(ws).snapshot())
                  for ws in ("alpha", "beta", "gamma", "delta")}
        close_pools(root)
        citus_cluster.enable_citus(name)

        with pytest.raises(NotDistributed) as info:
            Store(root)
        assert "tledger --root URL db distribute" in str(info.value)
        status = tl(root, "db", "status")
        assert status.returncode == 1 and b"tl_rows: plain" in status.stdout

        p = tl(root, "db", "distribute", "--json")
        assert p.returncode == 0, p.stderr
        assert sorted(json.loads(p.stdout)["converted"]) == sorted([*WORKSPACE_TABLES,
                                                                    "tl_schema"])
        assert_distributed(root)
        for ws, (lines, snap) in before.items():
            assert _lines(root, ws) == lines  # every row, byte for byte
            h = Store(root).history(ws)
            assert h.snapshot() == snap  # head: next seq, epoch, window, floor
            assert h.append(msg("after")).seqs == [snap.next_seq]
        with psycopg.connect(root) as conn:  # the coordinator kept no copy of the rows
            assert conn.execute("SELECT pg_relation_size('tl_rows')").fetchone()[0] == 0
            # the fork holds its own copy now (a Citus statement reads one workspace)
            assert conn.execute("SELECT count(*) FROM tl_lineage").fetchone()[0] == 0
            assert conn.execute("SELECT count(*) FROM tl_rows WHERE workspace = 'delta'"
                                ).fetchone()[0] == len(before["delta"][0]) + 1
        assert distribute(root)["converted"] == []  # again: nothing left to do
    finally:
        close_pools(root)
        citus_cluster.drop_database(name)


def test_db_refuses_a_directory_and_a_database_without_citus(pg_root: str,
                                                            tmp_path: Any) -> None:
    p = tl(str(tmp_path / "files"), "db", "status")
    assert p.returncode == 2 and b"postgresql://" in p.stderr
    p = tl(pg_root, "db", "distribute")
    assert p.returncode == 1 and b"citus extension is not installed" in p.stderr
    p = tl(pg_root, "db", "status", "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["citus"] is False


def test_durability_off_reaches_the_worker(citus_root: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """``durability="off"`` is asynchronous commit where the batch commits:
    on the worker, not only on the coordinator (whose commit writes nothing)."""
    from urllib.parse import quote

    logged = citus_root.replace("&options=", "&options=" + quote(
        "-c citus.log_remote_commands=on -c client_min_messages=log ", safe=""), 1)
    remote: list[str] = []
    real = psycopg.Connection.execute

    def execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not getattr(self, "_tl_noted", False):
            self._tl_noted = True
            self.add_notice_handler(lambda d: remote.append(d.message_primary or ""))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", execute)
    store = Store(logged, durability="off")  # the tables first
    remote.clear()
    store.history("ws").append(msg("x"))
    begins = [m for m in remote if m.startswith("issuing BEGIN")]
    assert begins and all("SET LOCAL synchronous_commit TO off" in m for m in begins)
    store = Store(logged.replace("options=", "options=%20", 1))  # another pool, durability full
    remote.clear()
    store.history("ws").append(msg("y"))
    begins = [m for m in remote if m.startswith("issuing BEGIN")]
    assert begins and not any("synchronous_commit" in m for m in begins)  # full: as set
