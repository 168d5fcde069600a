"""PostgreSQL's vectors of the semantic channel (``tl_vec_state``, ``tl_vec``:
``ledger.storage.postgres.vectors``): a damaged record or a forged one for a
row before the floor answers as a fresh projection and never lets that row
out; ``check`` reports it (a notice) and ``repair`` removes the vectors; a
rewrite deletes them in its own transaction."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ledger import Store
from ledger.storage.postgres.connect import close_pools
from recovery.check import check
from recovery.repair import repair
from tests.helpers import msg

psycopg = pytest.importorskip("psycopg", reason="the [postgres] extra is not installed")
pytest.importorskip("wordllama")  # the semantic extra (.ci/run installs it)

ROWS = ["the database migration failed on postgres", "we adopted a kitten named whiskers",
        "deploy to the kubernetes cluster tomorrow", "my favourite fruit is mango",
        "our tabby cat sleeps on the sofa"]
CALL = {"action": "search", "query": "pet cat", "mode": "ranked", "current": True, "limit": 25}


def sql(root: str, query: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(root, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def history(root: str) -> Any:
    from ledger.core.embedders import WordLlamaEmbedder

    return Store(root, embedder=WordLlamaEmbedder(64)).history("w")


def ask(h: Any) -> list[int]:
    return [i["seq"] for i in json.loads(h.session_history().call(CALL))["items"]]


def test_damaged_and_forged_vectors(pg_root: str) -> None:
    h = history(pg_root)
    h.append_many([msg(t) for t in ROWS])
    fresh = ask(h)
    assert fresh[0] == 5 and 2 in fresh  # "cat", then the kitten by meaning alone
    assert sql(pg_root, "SELECT count(*) FROM tl_vec")[0][0] == len(ROWS)
    # one byte of one record's vector changed: the checksum fails
    sql(pg_root, "UPDATE tl_vec SET rec = set_byte(rec, 50, get_byte(rec, 50) # 1) "
        "WHERE seq = 3")
    assert {f.code for f in check(h).findings} == {"recall_vectors_damaged"} and check(h).ok
    close_pools(pg_root)
    h = history(pg_root)  # as a new process: nothing cached
    assert ask(h) == fresh  # the set is started again
    assert not check(h).findings
    sql(pg_root, "UPDATE tl_vec SET rec = set_byte(rec, 50, get_byte(rec, 50) # 1) "
        "WHERE seq = 3")
    repair(h)
    assert sql(pg_root, "SELECT count(*) FROM tl_vec")[0][0] == 0 and not check(h).findings
    assert ask(h) == fresh
    # a clear: the vectors of the rows before it, put back beside the new
    # state's: never returned (their records name another set), reported by check
    old = sql(pg_root, "SELECT seq, rec FROM tl_vec ORDER BY seq")
    nonce = sql(pg_root, "SELECT nonce FROM tl_vec_state")[0][0]
    floor = h.clear_soft().seqs[0]
    h.append(msg("a kitten video went viral"))
    assert ask(h) == [floor + 1]
    assert sql(pg_root, "SELECT floor FROM tl_vec_state")[0][0] == floor
    assert sql(pg_root, "SELECT nonce FROM tl_vec_state")[0][0] != nonce  # a new set
    for seq, rec in old:
        sql(pg_root, "INSERT INTO tl_vec (workspace, seq, rec) VALUES ('w', %s, %s)",
            (seq, bytes(rec)))
    assert "recall_vectors_damaged" in {f.code for f in check(h).findings}
    close_pools(pg_root)
    h = history(pg_root)
    assert ask(h) == [floor + 1]
    assert [s for (s,) in sql(pg_root, "SELECT seq FROM tl_vec")] == [floor + 1]


def test_a_rewrite_deletes_the_vectors_in_its_transaction(pg_root: str) -> None:
    h = history(pg_root)
    h.append_many([msg(t) for t in ROWS])
    h.append(msg("cats purr"))
    assert 6 in ask(h)
    assert sql(pg_root, "SELECT count(*) FROM tl_vec")[0][0] == len(ROWS) + 1
    h.truncate_after(5)
    assert sql(pg_root, "SELECT count(*) FROM tl_vec")[0][0] == 0
    assert sql(pg_root, "SELECT count(*) FROM tl_vec_state")[0][0] == 0
    assert 6 not in ask(h)
    h.clear_soft()
    h.append(msg("kittens"))
    ask(h)
    h.purge_before_floor()
    assert sql(pg_root, "SELECT count(*) FROM tl_vec")[0][0] == 0
    assert ask(h) == [h.snapshot().next_seq - 1]
    assert [s for (s,) in sql(pg_root, "SELECT seq FROM tl_vec")] == [h.snapshot().next_seq - 1]
