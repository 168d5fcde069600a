"""On Citus, every statement of the hot paths runs on one shard.

The hot paths (appends of every kind, the provider view, ``get``, ``rows``,
``session_history`` pages, ranked search with its index catch-up, the
rewrites, delete) run against a Citus cluster
with every statement the engine sends captured at the psycopg cursor. Each
captured statement is then EXPLAINed with its own parameters: the plan must
be a Citus plan with exactly one task and no subplan pulled through the
coordinator. The same workload also runs with
``citus.multi_task_query_log_level = error``, so a statement that fanned out
at run time (with its parameters bound by the server) would fail it.
``ls`` is the one multi-shard query, and the same setting proves it.

A fork (schema 6, ``ledger/storage/postgres/keys.py``) is stored in its
source's shard, so its statements -- which read its own rows and its
source's -- are one task too: the same proof over a fork's hot paths, and
the strict setting over making forks, forks of forks, and the rewrites and
deletes that give forks their copies.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest

from ledger import Store
from ledger.core.errors import LedgerError
from tests.helpers import msg

psycopg = pytest.importorskip("psycopg", reason="the [postgres] extra is not installed")

UTILITY = ("BEGIN", "COMMIT", "ROLLBACK", "SET", "SAVEPOINT", "RELEASE")
STRICT = quote("-c citus.multi_task_query_log_level=error ", safe="")


def hot_paths(store: Store) -> None:
    """Every hot path once, on two workspaces."""
    h = store.history("ws-a")
    h.append(msg("hello"))  # the first write creates the head row
    h.append_many([msg("question"), msg("answer", "assistant")], batch_id="b-1")
    assert h.append_many([msg("question"), msg("answer", "assistant")],
                         batch_id="b-1").seqs == [2, 3]  # the retry path
    h.append(msg("conditional"), expect_next_seq=h.snapshot().next_seq)
    h.append(msg("same window"), expect_window=h.window)
    h.compact([msg("a summary")])
    h.clear_soft()
    for i in range(12):
        h.append(msg(f"needle {i} " + "x" * 100))
    h.rollover([msg("next window")])
    h.append(msg("needle late"))
    assert [r.to_dict()["kind"] for r in h.provider_view()][:1] == ["lead_in"]
    assert h.get(3) is not None and h.get(999) is None
    assert len(list(h.rows())) == len(list(h.rows(after_seq=0)))
    assert h.exists() and h.stat().rows > 0

    tool = h.session_history()
    listed = json.loads(tool.call({"action": "list"}))
    window = listed["items"][0]["window"]
    tool.call({"action": "list", "window": window})
    tool.call({"action": "read", "seq": h.snapshot().next_seq - 1})
    cursor = None
    for _ in range(4):  # paged search, each page resumes from its cursor
        args: dict[str, Any] = {"action": "search", "query": "needle", "limit": 3}
        if cursor:
            args["cursor"] = cursor
        cursor = json.loads(tool.call(args))["cursor"]

    # Ranked search: the recall index built by the first search (its catch-up
    # chunk), caught up after an append, then read (terms, postings, docs,
    # the rows read back with their windows), and a page down the ranking.
    first = json.loads(tool.call({"action": "search", "query": "needle late window",
                                  "mode": "ranked", "current": True, "limit": 2}))
    assert first["items"] and first["cursor"]
    h.append(msg("needle after the index"))
    again = json.loads(tool.call({"action": "search", "query": "needle", "mode": "ranked",
                                  "window": h.window, "limit": 2}))
    assert again["items"]
    tool.call({"action": "search", "query": "needle late window", "mode": "ranked", "current": True,
               "limit": 2, "cursor": first["cursor"]})

    late = h.snapshot().next_seq - 1
    h.reject(late)
    h.truncate_after(late - 1)
    h.purge_before_floor()
    h.rebaseline()
    store.history("ws-b").append(msg("other"))
    assert store.delete("ws-b") is True


def fork_paths(store: Store, made: bool = False) -> None:
    """A fork's hot paths (``made``: make the forks first): appends, the
    provider view, reads, literal and ranked search, a rewrite of its own
    rows and one of shared rows, a fork of it, deleting its source."""
    src = store.history("fsrc")
    if made:
        for i in range(6):
            src.append_many([msg(f"needle {i} question"), msg(f"answer {i}", "assistant")])
        src.fork("fork", at=8)
    h = store.history("fork")
    h.append_many([msg("needle own"), msg("own answer", "assistant")])
    h.append(msg("conditional"), expect_next_seq=h.snapshot().next_seq)
    assert len(h.provider_view()) >= 9 and h.get(3) is not None and h.get(999) is None
    assert len(list(h.rows())) == h.stat().rows
    tool = h.session_history()
    for args in ({"mode": "literal"}, {"mode": "ranked", "current": True}):
        got = json.loads(tool.call({"action": "search", "query": "needle", **args}))
        assert got["items"], got
    tool.call({"action": "read", "seq": 2})
    if made:
        h.fork("deeper")  # past its reference: refers to fsrc, copies its tail
    h.truncate_after(h.snapshot().next_seq - 2)  # its own rows: the reference stays
    src.reject(2)  # a shared row: the forks take their copies first
    h.reject(3)
    assert store.delete("fsrc") and store.delete("deeper") is made


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, Any]]]:
    """Every (query, params) a psycopg cursor executes in this process."""
    seen: list[tuple[str, Any]] = []
    real = psycopg.Cursor.execute

    def execute(self: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        seen.append((str(query), params))
        return real(self, query, params, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", execute)
    yield seen


def plan(conn: Any, query: str, params: Any) -> str:
    cur = psycopg.ClientCursor(conn)  # parameters inlined, as the router sees them
    cur.execute("EXPLAIN " + query, params)
    return "\n".join(row[0] for row in cur.fetchall())


def tasks(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"Task Count: (\d+)", text)]


def each_one_task(dsn: str, statements: list[tuple[str, Any]]) -> set[str]:
    """Assert that each statement's plan is distributed and runs as one task
    on one shard (no subplan); returns the distinct statements proven."""
    checked: set[str] = set()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for query, params in statements:
            got = plan(conn, query, params)
            assert "Citus" in got, f"not a distributed plan:\n{query}\n{got}"
            assert tasks(got) == [1] and "Subplan" not in got, \
                f"not one task on one shard:\n{query}\n{got}"
            checked.add(query)
    return checked


def test_every_hot_statement_runs_as_one_task(citus_root: str,
                                              captured: list[tuple[str, Any]]) -> None:
    store = Store(citus_root)
    store.history("warm").append(msg("x"))  # the tables exist before capturing
    captured.clear()
    hot_paths(store)
    statements = [(q, p) for q, p in captured if q.split(None, 1)[0].upper() not in UTILITY]
    text = " ".join(q for q, _ in statements)
    for needle in ("FOR UPDATE", "INSERT INTO tl_rows", "INSERT INTO tl_batches",
                   "UPDATE tl_head", "INSERT INTO tl_quarantine", "DELETE FROM tl_rows",
                   "octet_length(raw)", "boundary IS NOT NULL", "FROM tl_recall_state",
                   "INSERT INTO tl_recall_terms", "FROM tl_recall_post", "FROM tl_recall_docs",
                   "UPDATE tl_recall_state", "array_position"):
        assert needle in text, f"the workload never sent {needle!r}"
    checked = each_one_task(citus_root, statements)
    assert len(checked) >= 25  # distinct statements, each proven


def test_a_forks_statements_run_as_one_task(citus_root: str,
                                             captured: list[tuple[str, Any]]) -> None:
    store = Store(citus_root)
    src = store.history("fsrc")
    for i in range(6):
        src.append_many([msg(f"needle {i} question"), msg(f"answer {i}", "assistant")])
    src.fork("fork", at=8)
    with psycopg.connect(citus_root) as conn:
        key = conn.execute("SELECT alias FROM tl_head WHERE workspace = 'fork'").fetchone()[0]
        same = conn.execute(
            "SELECT get_shard_id_for_distribution_column('tl_rows', %s::text) = "
            "get_shard_id_for_distribution_column('tl_rows', 'fsrc')", (key,)).fetchone()[0]
    assert key.startswith("fork/") and same
    captured.clear()
    fork_paths(store)
    statements = [(q, p) for q, p in captured if q.split(None, 1)[0].upper() not in UTILITY]
    assert any("UNION ALL" in q and "tl_lineage" in q for q, _ in statements)
    assert any("tl_forks" in q for q, _ in statements)
    each_one_task(citus_root, statements)


def test_ls_is_the_only_multi_shard_query(citus_root: str) -> None:
    strict = citus_root.replace("&options=", "&options=" + STRICT, 1)
    assert strict != citus_root
    Store(citus_root).history("warm").append(msg("x"))
    hot_paths(Store(strict))  # would raise on any statement that fans out
    fork_paths(Store(strict), made=True)  # and so would a fork's, or making one
    with pytest.raises(LedgerError, match="multi-task query"):
        Store(strict).workspaces()
    assert Store(citus_root).workspaces() == ["fork", "warm", "ws-a"]
    with psycopg.connect(citus_root, autocommit=True) as conn:
        assert tasks(plan(conn, "SELECT workspace FROM tl_head ORDER BY workspace", None)) \
            == [8]  # every shard of the test cluster (citus.shard_count = 8)
