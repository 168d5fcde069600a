"""The row engines' rewrite primitive under its condition (``ledger.storage.
primitives``), on memory and PostgreSQL: a ``replace`` against a head that
moved changes nothing, and the rules over it (``ledger.storage.rewrites``)
read again and succeed when a writer came between their reads and their
change. What each rewrite does is the engine contract's
(``tests/contract/rewrites.py``)."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest

from ledger import Store
from ledger.core.errors import CommitFailed, Conflict
from ledger.storage import rewrites
from ledger.storage.memory import discard
from ledger.storage.primitives import LAST_SEQ, Edit
from ledger.transcript.history import History
from tests.helpers import msg


@pytest.fixture(params=["memory", "postgresql"])
def history(request: pytest.FixtureRequest) -> Any:
    if request.param == "memory":
        name = f"rows-{uuid.uuid4().hex}"
        yield Store(f"memory://{name}").history("ws")
        discard(name)
    else:
        yield Store(request.getfixturevalue("pg_root")).history("ws")


def _lines(h: History) -> list[bytes]:
    return [r.line for r in h.rows()]


def test_a_replace_against_a_head_that_moved_changes_nothing(history: History) -> None:
    h, p = history, history.engine
    h.append_many([msg("a"), msg("b", "assistant")])
    for move in (lambda: h.rebaseline(), lambda: h.clear_soft()):  # a rewrite; a new floor
        stale = p.head()  # type: ignore[attr-defined]
        move()
        before, epoch = _lines(h), h.epoch
        with pytest.raises(Conflict):
            p.replace(stale, [Edit(1, LAST_SEQ)], "test")  # type: ignore[attr-defined]
        assert _lines(h) == before and h.epoch == epoch
        assert h.engine.stat().quarantine_bytes == 0


def test_a_plain_append_in_between_is_no_conflict(history: History) -> None:
    h, p = history, history.engine
    h.append_many([msg("a"), msg("b", "assistant")])
    head = p.head()  # type: ignore[attr-defined]
    h.append(msg("c"))
    done = p.replace(head, [Edit(3, LAST_SEQ)], "test")  # type: ignore[attr-defined]
    assert done.removed_rows == 1 and done.epoch != head.epoch
    assert [r.seq for r in h.rows()] == [1, 2]


def test_a_rewrite_reads_again_when_another_rewrite_came_in_between(
    history: History, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = history
    h.append(msg("hi"))
    asked = h.append(msg("too big")).seqs[0]
    engine = type(h.engine)
    read = engine.read  # type: ignore[attr-defined]
    raced: list[int] = []

    def read_then_write(self: Any, first: int, last: int) -> Any:
        got = read(self, first, last)
        if not raced:  # other writers commit between the rule's reads and its change
            raced.extend(h.append(msg("meanwhile")).seqs)
            h.rebaseline()
        return got

    monkeypatch.setattr(engine, "read", read_then_write)
    done = h.reject(asked)
    assert done.rejected == [asked] and done.epoch == h.epoch
    assert [r.seq for r in h.rows()] == [1, asked, raced[0]]  # the racing append kept
    assert h.get(asked).to_dict()["parts"] == []  # type: ignore[union-attr]
    assert h.get(raced[0]).to_dict()["parts"][0]["text"] == "meanwhile"  # type: ignore[union-attr]


def test_a_rewrite_that_never_holds_says_so_and_changes_nothing(
    history: History, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = history
    h.append(msg("a"))
    h.append(msg("b"))
    before, epoch = _lines(h), h.epoch
    engine = type(h.engine)

    def always_moved(self: Any, *args: Any) -> Any:
        raise Conflict("moved")

    monkeypatch.setattr(engine, "replace", always_moved)
    with pytest.raises(CommitFailed, match="changed under it"):
        h.truncate_after(1)
    assert _lines(h) == before and h.epoch == epoch


def test_rewrites_racing_appends_lose_no_committed_row(history: History) -> None:
    h = history
    h.append(msg("first"))
    stop = threading.Event()
    appended: list[int] = []
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            while not stop.is_set():
                appended.extend(h.append(msg("more")).seqs)
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=writer)
    t.start()
    try:
        for _ in range(5):
            rewrites.rebaseline(h.engine)  # type: ignore[arg-type]
            h.reject(1) if h.get(1) is not None else None
    finally:
        stop.set()
        t.join()
    assert not errors
    seqs = [r.seq for r in h.rows()]
    assert seqs == sorted(seqs) and set(appended) <= set(seqs)
    assert h.get(1).to_dict()["parts"] == []  # type: ignore[union-attr]
