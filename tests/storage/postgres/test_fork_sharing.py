"""A fork shares its source's rows on plain PostgreSQL and on Citus (issue 33,
schemas 5 and 6, ``ledger/storage/postgres/lineage.py`` and ``keys.py``):
what it stores, that every read of it is the same as a copy's, how rewrites
and deletes on either side turn the shared rows into copies first, forks of
forks, on Citus that a fork lives in its source's shard, and the upgrades of
schema 4 and schema 5 databases. The contract (tests/contract/forks.py)
checks the behaviour on every engine; this checks the storage a user pays
for. Real servers."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ledger import Store
from ledger.core.forks import ForkRefused
from ledger.storage.postgres.connect import close_pools
from ledger.storage.postgres.schema import SCHEMA_VERSION
from recovery.check import check
from tests.helpers import msg

psycopg = pytest.importorskip("psycopg", reason="the [postgres] extra is not installed")


def _turns(h: Any, n: int, tag: str = "turn") -> None:
    for i in range(n):
        h.append_many([msg(f"{tag} {i} question"), msg(f"{tag} {i} answer", "assistant")])


@pytest.fixture(params=["postgres", "citus"])
def root(request: pytest.FixtureRequest) -> str:
    """A new database on plain PostgreSQL, then on Citus."""
    return str(request.getfixturevalue("pg_root" if request.param == "postgres"
                                       else "citus_root"))


def _key(root: str, ws: str) -> str:
    """The key ``ws``'s rows are stored under (on Citus a fork's: keys.py)."""
    with psycopg.connect(root) as conn:
        got = conn.execute("SELECT alias FROM tl_head WHERE workspace = %s", (ws,)).fetchone()
    return str(got[0]) if got is not None and got[0] is not None else ws


def _own(root: str, ws: str) -> int:
    with psycopg.connect(root) as conn:
        return int(conn.execute("SELECT count(*) FROM tl_rows WHERE workspace = %s",
                                (_key(root, ws),)).fetchone()[0])


def _lineage(root: str) -> dict[str, tuple[str, int]]:
    """Each reference, by workspace ids (a key is its id, ``/`` and a salt)."""
    with psycopg.connect(root) as conn:
        got = conn.execute("SELECT workspace, source, upto FROM tl_lineage").fetchall()
    return {w.split("/")[0]: (s.split("/")[0], int(u)) for w, s, u in got}


def _on_citus(root: str) -> bool:
    from ledger.storage.postgres import citus

    with psycopg.connect(root) as conn:
        return citus.installed(conn)


def _shard(root: str, key: str) -> int:
    with psycopg.connect(root) as conn:
        return int(conn.execute("SELECT get_shard_id_for_distribution_column('tl_rows', %s::text)",
                                (key,)).fetchone()[0])


def _lines(h: Any) -> list[bytes]:
    return [r.line for r in h.rows()]


def _search(h: Any, query: str, mode: str = "literal") -> list[int]:
    got = json.loads(h.session_history().call(
        {"action": "search", "query": query, "mode": mode}))
    assert "error" not in got, got
    return [item["seq"] for item in got["items"]]


def test_a_fork_stores_its_event_and_a_reference_not_the_rows(root: str) -> None:
    store = Store(root)
    src = store.history("src")
    _turns(src, 300)
    src.rollover([msg("window starts")])
    _turns(src, 5, "late")
    before = _lines(src)
    fork = src.fork("f")
    assert _own(root, "f") == 1  # the origin event alone
    assert _lineage(root) == {"f": ("src", len(before))}
    assert _lines(fork)[:-1] == before  # every read is the copy's
    assert [r.line for r in fork.provider_view()] == [r.line for r in src.provider_view()]
    assert fork.get(3) is not None and fork.get(3).line == before[2]  # type: ignore[union-attr]
    assert _search(fork, "turn 7 answer") == _search(src, "turn 7 answer")
    assert _search(fork, "late answer", "ranked") == _search(src, "late answer", "ranked")
    assert not check(fork).findings
    fork.append(msg("only in the fork"))
    assert _own(root, "f") == 2 and len(_lines(src)) == len(before)
    assert fork.stat().rows == len(before) + 2


def test_rewrites_and_deletes_copy_the_shared_rows_before_they_change(root: str) -> None:
    store = Store(root)
    src = store.history("src")
    _turns(src, 10)  # seqs 1..20
    fork = src.fork("f", at=12)
    late = src.fork("late", at=20)
    kept_f, kept_late = _lines(fork), _lines(late)
    src.truncate_after(16)  # reaches rows "late" shares, not the ones "f" shares
    assert _lineage(root) == {"f": ("src", 12)}
    assert _lines(late) == kept_late and _own(root, "late") == 21
    assert store.delete("src")
    assert _lineage(root) == {} and _lines(fork) == kept_f and _own(root, "f") == 13
    with psycopg.connect(root) as conn:  # the source is gone whole
        assert conn.execute("SELECT count(*) FROM tl_rows WHERE workspace = 'src'"
                            ).fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM tl_forks").fetchone()[0] == 0


def test_a_rewrite_of_a_fork_copies_its_prefix_only_when_it_reaches_it(root: str) -> None:
    store = Store(root)
    src = store.history("src")
    _turns(src, 10)
    before = _lines(src)
    fork = src.fork("f", at=20)
    _turns(fork, 2, "own")  # seqs 22..25
    fork.truncate_after(23)  # its own rows only: the reference stays
    assert _lineage(root) == {"f": ("src", 20)} and _own(root, "f") == 3
    fork.reject(5)  # a shared row: the fork takes a copy, then rewrites it
    assert _lineage(root) == {} and _own(root, "f") == 23
    assert _lines(src) == before
    assert fork.get(5).to_dict()["parts"] == []  # type: ignore[union-attr]


def test_a_fork_of_a_fork_refers_to_the_first_source_and_copies_the_tail(
    root: str,
) -> None:
    store = Store(root)
    src = store.history("src")
    _turns(src, 10)  # 1..20
    a = src.fork("a", at=16)  # event 17
    _turns(a, 2, "a")  # 18..21
    inside = a.fork("inside", at=10)
    past = a.fork("past", at=19)
    assert _lineage(root) == {"a": ("src", 16), "inside": ("src", 10),
                                 "past": ("src", 16)}
    assert _own(root, "inside") == 1
    assert _own(root, "past") == 1 + 3  # a's event and two of its rows, then its event
    assert _lines(past)[:19] == _lines(a)[:19]
    assert _lines(inside)[:10] == _lines(src)[:10]
    assert past.origin is not None and past.origin.source == "a"
    kept = _lines(past)
    store.delete("a")  # past shares src's rows, not a's: nothing to copy
    assert _lines(past) == kept and _lineage(root)["past"] == ("src", 16)


def test_a_schema_4_database_is_upgraded_and_its_forks_share(pg_root: str) -> None:
    store = Store(pg_root)
    _turns(store.history("old"), 3)
    close_pools(pg_root)
    with psycopg.connect(pg_root, autocommit=True) as conn:
        conn.execute("DROP TABLE tl_lineage")
        conn.execute("UPDATE tl_schema SET version = 4")
    store = Store(pg_root)
    fork = store.history("old").fork("new")
    assert _lineage(pg_root) == {"new": ("old", 6)}
    assert len(_lines(fork)) == 7
    with psycopg.connect(pg_root) as conn:
        assert conn.execute("SELECT version FROM tl_schema").fetchone()[0] == SCHEMA_VERSION


def test_a_schema_5_database_is_upgraded_and_its_old_forks_read_the_same(root: str) -> None:
    """Schema 6 adds ``tl_head.alias`` and ``tl_forks``; the workspaces made
    before read byte for byte the same (on Citus a fork made then is the full
    copy it was, here a loaded copy), and the forks made after are
    references, on Citus in their source's shard."""
    store = Store(root)
    src = store.history("src")
    _turns(src, 5)
    if _on_citus(root):  # a fork made at schema 5 was a full copy under its id
        made = src.fork("made", at=6)
        store.history("old").engine.load_rows(made.rows())  # type: ignore[attr-defined]
        assert store.delete("made")
    else:  # on plain PostgreSQL a reference
        src.fork("old", at=6)
    store.history("copy").engine.load_rows(src.rows())  # type: ignore[attr-defined]
    before = {ws: _lines(store.history(ws)) for ws in ("src", "old", "copy")}
    close_pools(root)
    with psycopg.connect(root, autocommit=True) as conn:
        conn.execute("DROP TABLE tl_forks")
        conn.execute("ALTER TABLE tl_head DROP COLUMN alias")
        conn.execute("UPDATE tl_schema SET version = 5")
    store = Store(root)
    assert {ws: _lines(store.history(ws)) for ws in before} == before
    with psycopg.connect(root) as conn:
        assert conn.execute("SELECT version FROM tl_schema").fetchone()[0] == SCHEMA_VERSION
    new = store.history("copy").fork("new")
    assert _lines(new)[:-1] == before["copy"] and _own(root, "new") == 1
    again = store.history("old").fork("again")  # of the old fork: its tail, or all of it
    assert _lines(again)[:-1] == before["old"]
    if _on_citus(root):
        assert _own(root, "again") == 1  # the old fork is a full copy: all of it shared
        assert _shard(root, _key(root, "new")) == _shard(root, "copy")
        assert _shard(root, _key(root, "again")) == _shard(root, "old")
        from ledger.storage.postgres import citus

        with psycopg.connect(root) as conn:
            assert citus.problems(citus.layout(conn)) == []
    assert store.workspaces() == ["again", "copy", "new", "old", "src"]


def test_on_citus_a_fork_lives_in_its_source_shard_under_a_key(citus_root: str) -> None:
    store = Store(citus_root)
    src = store.history("src")
    _turns(src, 4)
    fork = src.fork("f", at=6)
    deeper = fork.fork("g")  # refers to src too, and copies f's event
    key_f, key_g = _key(citus_root, "f"), _key(citus_root, "g")
    assert key_f.startswith("f/") and key_g.startswith("g/")
    assert _shard(citus_root, key_f) == _shard(citus_root, key_g) == _shard(citus_root, "src")
    assert _own(citus_root, "f") == 1 and _lineage(citus_root) == {
        "f": ("src", 6), "g": ("src", 6)}
    assert store.workspaces() == ["f", "g", "src"]  # ids, never keys
    assert [b.workspace for b in store.branches("src")] == ["f"]
    assert fork.stat().rows == 7 and len(_lines(deeper)) == 8
    with pytest.raises(ForkRefused):
        src.fork("f")  # the pointer holds the id
    with pytest.raises(ForkRefused):
        store.history("f").fork("src")  # and a head row holds the source's
    kept = _lines(deeper)
    assert store.delete("src")  # f and g take their copies, in the same shard
    assert _lineage(citus_root) == {} and _lines(deeper) == kept
    assert _own(citus_root, "f") == 7 and len(_lines(fork)) == 7
    assert store.delete("f") and not store.history("f").exists()
    with psycopg.connect(citus_root) as conn:  # the pointer and the key both gone
        assert conn.execute("SELECT count(*) FROM tl_head WHERE workspace LIKE 'f%%'"
                            ).fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM tl_rows WHERE workspace LIKE 'f/%%'"
                            ).fetchone()[0] == 0
    store.history("f").append(msg("a new f, not a fork"))  # the id is free again
    assert _key(citus_root, "f") == "f" and len(_lines(store.history("f"))) == 1
    assert store.workspaces() == ["f", "g"]


def test_a_handle_follows_its_workspace_when_it_is_made_again(citus_root: str) -> None:
    """A handle keeps the key it resolved; when another one deletes the
    workspace and makes it again (as a fork, or not), the head read notices
    and resolves again (keys.py)."""
    a, b = Store(citus_root), Store(citus_root)
    _turns(a.history("src"), 2)
    held = b.history("w")
    held.append(msg("plain w"))
    assert a.delete("w")
    a.history("src").fork("w")  # w is a fork now, under a key
    assert [r.line for r in held.rows()] == _lines(a.history("w"))
    held.append(msg("through the old handle"))
    assert _lines(a.history("w"))[-1] == _lines(held)[-1] and _own(citus_root, "w") == 2
    assert a.delete("w")
    a.history("w").append(msg("plain again"))
    assert len(held.provider_view()) == 1 and _key(citus_root, "w") == "w"


def test_forks_made_while_the_source_is_rewritten_never_change_afterwards(
    root: str,
) -> None:
    """Forks (and forks of forks, which refer to the first source) made while
    another thread rejects rows of the source: what a fork reads right after
    it is made is what it reads at the end, and it checks clean."""
    import threading

    from ledger.core.errors import CommitFailed

    store = Store(root)
    src = store.history("src")
    _turns(src, 20)  # 1..40, batches end at even seqs
    made: list[tuple[str, list[bytes]]] = []
    errors: list[BaseException] = []
    rejects: list[int] = []
    stop = threading.Event()

    def forker() -> None:
        try:
            s = Store(root)
            for i in range(12):
                try:
                    f = s.history("src").fork(f"f{i}", at=30)
                    made.append((f.workspace, _lines(f)))
                    _turns(f, 1, "own")  # 32..33 after its event at 31
                    g = f.fork(f"g{i}", at=33)  # past f's reference: a copied tail
                    made.append((g.workspace, _lines(g)))
                except CommitFailed:
                    continue  # the source kept changing under it: nothing was forked
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            stop.set()

    def rewriter() -> None:
        try:
            h = Store(root).history("src")
            seq = 1
            while not stop.is_set():
                h.reject(seq)
                rejects.append(seq)
                seq = seq % 29 + 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=forker), threading.Thread(target=rewriter)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    assert len(made) >= 4 and len(rejects) >= 4, "too little ran side by side to say anything"
    for ws, first in made:
        fork = store.history(ws)
        assert _lines(fork)[:len(first)] == first, f"{ws} changed after it was made"
        assert not check(fork).findings, ws


def test_a_fork_and_its_source_rewritten_at_once_both_keep_every_byte(root: str) -> None:
    """The source and its fork each reject shared rows in their own thread,
    so both sides materialise the same reference at once (on Citus through
    ``tl_forks`` and ``tl_lineage``, taken in one order on both sides): no
    deadlock, no error, and each side ends with the rows a copy would hold."""
    import threading

    store = Store(root)
    src = store.history("src")
    _turns(src, 10)  # 1..20
    errors: list[BaseException] = []
    rounds = 6
    for r in range(rounds):
        fork = src.fork(f"f{r}", at=20)
        expected = _lines(fork)
        barrier = threading.Barrier(2)

        def reject(ws: str, seq: int, barrier: threading.Barrier = barrier) -> None:
            try:
                barrier.wait(timeout=30)
                Store(root).history(ws).reject(seq)
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=reject, args=("src", 2 * r + 1)),
                   threading.Thread(target=reject, args=(f"f{r}", 2 * r + 2))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not errors, errors
        got = _lines(fork)
        assert "f" + str(r) not in _lineage(root) and len(got) == len(expected)
        changed = [i for i, (a, b) in enumerate(zip(got, expected, strict=True)) if a != b]
        assert changed == [2 * r + 1], changed  # only the fork's own reject shows in it
        assert not check(fork).findings
    assert not check(src).findings
