"""Contract: ranked search's semantic channel (issue 32), with the real
wordllama model (64 dimensions, its weights in its wheel: no download).

A store with an ``embedder`` fuses the lexical ranking with the vectors of
the rows (``ledger.core.semantic``): it finds rows by meaning where no word
matches, ranks exactly as the in-memory reference engine does, never returns
a row at or before the privacy floor (not even from vectors computed before
the floor moved), forgets the rows a rewrite removes, and never mixes the
vectors of two embedders. Without an embedder nothing changes (the rest of
the contract runs without one).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from ledger import History, Store
from tests.contract.retrieval import ranked, seqs
from tests.contract.support import RANKED_SEARCH, ContractBase, MakeStore, call
from tests.helpers import msg

ROWS = [
    "the database migration failed on postgres with a lock timeout",
    "we adopted a kitten last week and named her whiskers",
    "deploy the service to the kubernetes cluster tomorrow morning",
    "my favourite fruit is mango, especially in summer",
    "the quarterly budget review moved to thursday",
    "she plays the violin in a string quartet",
]
MEANING = "pet cat"  # no word in common with any row: only the vectors can find it


def _embedder(dim: int = 64) -> Any:
    from ledger.core.embedders import WordLlamaEmbedder

    return _EMBEDDERS.setdefault(dim, WordLlamaEmbedder(dim))


_EMBEDDERS: dict[int, Any] = {}


def _fill(h: History, rows: list[str] = ROWS) -> None:
    h.append_many([msg(t, "user" if i % 2 == 0 else "assistant") for i, t in enumerate(rows)])


def _reference(rows_of: Any, query: str | list[str], dim: int = 64, **kw: Any) -> dict[str, Any]:
    """The in-memory engine's answer for the same rows and query."""
    h = Store(f"memory://semantic-ref-{uuid.uuid4().hex}", embedder=_embedder(dim)).history("w")
    rows_of(h)
    return ranked(h.session_history(), query, **kw)


class SemanticContract(ContractBase):
    def _store(self, make_store: MakeStore, dim: int = 64) -> Store | None:
        if not self.can(RANKED_SEARCH):
            return None
        pytest.importorskip("wordllama")  # the semantic extra (.ci/run installs it)
        return make_store(embedder=_embedder(dim))

    def _filled(self, make_store: MakeStore, ws: str) -> History | None:
        """``ws`` filled (``_fill``) in a store with the embedder; None where
        the engine has no ranked search."""
        store = self._store(make_store)
        if store is None:
            return None
        h = store.history(ws)
        _fill(h)
        return h

    def test_semantic_finds_by_meaning_and_ranks_as_the_reference(
        self, make_store: MakeStore, ws: str
    ) -> None:
        h = self._filled(make_store, ws)
        if h is None:
            return
        plain = make_store().history(ws).session_history()
        assert seqs(ranked(plain, MEANING)) == []  # no word matches
        tool = h.session_history()
        got = ranked(tool, MEANING)
        assert seqs(got)[0] == 2, got  # the kitten
        assert got == _reference(_fill, MEANING)
        for query in ("postgres migration", "summer fruit", "kubernetes deploy"):
            mine = ranked(tool, query, limit=25)
            assert mine == _reference(_fill, query, limit=25), query
            # the lexical hit stays first: the vectors reorder, they do not override
            assert seqs(mine)[0] == seqs(ranked(plain, query))[0], query

    def test_semantic_with_several_phrasings(self, make_store: MakeStore, ws: str) -> None:
        """A list of phrasings with the semantic channel: the lexical rankings
        fused, then the vectors of the phrasings as one text; every engine
        answers as the reference, and a cursor pages the same order."""
        h = self._filled(make_store, ws)
        if h is None:
            return
        tool = h.session_history()
        query = [MEANING, "postgres migration"]
        got = ranked(tool, query, limit=25)
        assert {2, 1} <= set(seqs(got)[:3]), got  # the kitten by meaning, the migration by words
        assert got == _reference(_fill, query, limit=25)
        first = ranked(tool, query, limit=2)
        rest = call(tool, {"action": "search", "query": query, "current": True, "limit": 25,
                           "cursor": first["cursor"]})
        assert seqs(first) + seqs(rest) == seqs(got)

    def test_semantic_catches_up_after_appends_and_pages_stably(
        self, make_store: MakeStore, ws: str
    ) -> None:
        h = self._filled(make_store, ws)
        if h is None:
            return
        tool = h.session_history()
        assert seqs(ranked(tool, MEANING))[0] == 2
        h.append(msg("the dog chased the neighbour's cat up a tree"))
        got = seqs(ranked(tool, MEANING, limit=25))
        assert 7 in got[:2], got  # the new row has its vector (and shares a word)
        first = ranked(tool, MEANING, limit=2)
        rest = call(tool, {"action": "search", "query": MEANING, "mode": "ranked",
                           "current": True, "limit": 2, "cursor": first["cursor"]})
        assert seqs(first) + seqs(rest) == got[:4]

    def test_semantic_never_crosses_the_floor(self, make_store: MakeStore, ws: str) -> None:
        """Rows before a clear are never returned, though their vectors were
        computed before the floor moved (the projection is then stale)."""
        h = self._filled(make_store, ws)
        if h is None:
            return
        tool = h.session_history()
        assert seqs(ranked(tool, MEANING))[0] == 2  # vectors of rows 1-6 computed
        floor = h.clear_soft().seqs[0]
        assert seqs(ranked(tool, MEANING)) == []  # nothing after the floor yet
        h.append_many([msg("our cat knocked a glass off the table"),
                       msg("the release notes mention the new api")])
        got = seqs(ranked(tool, MEANING, limit=25))
        assert got and all(s > floor for s in got), got
        assert got[0] == floor + 1
        for window in (0, floor):
            res = ranked(tool, MEANING, window=window)
            assert "error" in res or all(s > floor for s in seqs(res))

    def test_semantic_forgets_what_rewrites_remove(self, make_store: MakeStore, ws: str) -> None:
        h = self._filled(make_store, ws)
        if h is None:
            return
        h.append(msg("a tabby cat sleeps on the sofa"))
        h.append(msg("unrelated: tax forms"))
        h.append(msg("cats purr when they are happy"))
        tool = h.session_history()
        assert {2, 7, 9} <= set(seqs(ranked(tool, MEANING, limit=25)))
        h.truncate_after(8)
        assert 9 not in seqs(ranked(tool, MEANING, limit=25))
        h.reject(7)
        assert 7 not in seqs(ranked(tool, MEANING, limit=25))
        late = h.append(msg("the kitten sleeps all day")).seqs[0]
        assert late in seqs(ranked(tool, MEANING, limit=25))
        h.rewind(to=8)
        got = seqs(ranked(tool, MEANING, limit=25))
        assert got and late not in got and 7 not in got, got
        h.clear_soft()
        h.append(msg("kittens need vaccinations"))
        h.purge_before_floor()
        got = seqs(ranked(tool, MEANING, limit=25))
        assert got == [h.snapshot().next_seq - 1], got

    def test_semantic_never_mixes_two_embedders(self, make_store: MakeStore, ws: str) -> None:
        """Vectors are keyed by the embedder's name and dimension: another
        embedder recomputes them, and ranks as a store that only ever had it."""
        small = self._store(make_store, 64)
        if small is None:
            return
        _fill(small.history(ws))
        assert seqs(ranked(small.history(ws).session_history(), MEANING))[0] == 2
        large = make_store(embedder=_embedder(128))
        got = ranked(large.history(ws).session_history(), MEANING, limit=25)
        assert got == _reference(_fill, MEANING, dim=128, limit=25)
        assert got != _reference(_fill, MEANING, dim=64, limit=25)
        again = ranked(small.history(ws).session_history(), MEANING, limit=25)
        assert again == _reference(_fill, MEANING, dim=64, limit=25)
