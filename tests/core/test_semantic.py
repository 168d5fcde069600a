"""The semantic channel's pure part (``ledger.core.semantic``) and the
wordllama embedder: what an embedder must return, how the channels fuse,
and the errors a caller sees."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from ledger import LedgerError, Store
from ledger.core import semantic
from ledger.core.embedders import WordLlamaEmbedder


class Fixed:
    """An embedder that returns what it is told to."""

    def __init__(self, out: Any, name: Any = "fixed", dimension: Any = 3) -> None:
        self.out, self.name, self.dimension = out, name, dimension

    def embed(self, texts: Sequence[str]) -> Any:
        return self.out(texts) if callable(self.out) else self.out


def test_embed_checks_and_normalises_what_an_embedder_returns() -> None:
    got = semantic.embed(Fixed(lambda ts: [[3.0, 0.0, 4.0] for _ in ts]), ["a", "b"])
    assert got == [[0.6, 0.0, 0.8], [0.6, 0.0, 0.8]]
    assert semantic.embed(Fixed([[0, 0, 0]]), ["a"]) == [[0.0, 0.0, 0.0]]
    bad = [
        ([[1.0, 2.0]], "has 2 values"),
        ([[1.0, 2.0, 3.0]] * 2, "2 vectors for 1 texts"),
        ([[1.0, math.nan, 0.0]], "finite"),
        ([[1.0, math.inf, 0.0]], "finite"),
        ([["x", 1, 2]], "not a sequence of numbers"),
        (7, "not a list of vectors"),
    ]
    for out, words in bad:
        with pytest.raises(LedgerError, match=words):
            semantic.embed(Fixed(out), ["a"])

    def boom(texts: Sequence[str]) -> Any:
        raise RuntimeError("model crashed")

    with pytest.raises(LedgerError, match="'fixed' failed on 1 texts: RuntimeError: model"):
        semantic.embed(Fixed(boom), ["a"])


def test_a_store_refuses_an_embedder_without_a_name_or_dimension(tmp_path: Path) -> None:
    for name, dim, words in (("", 3, "name"), (None, 3, "name"), ("x\ny", 3, "name"),
                             ("ok", 0, "dimension"), ("ok", True, "dimension"),
                             ("ok", 10_000, "dimension"), ("ok", "3", "dimension")):
        with pytest.raises(LedgerError, match=words):
            Store(tmp_path, embedder=Fixed([[1, 0, 0]], name, dim))
    assert semantic.key(Fixed([], "m", 3)) == "m/3"


def test_fuse_weighs_lexical_over_its_best_and_vectors_over_their_range() -> None:
    lexical = [(5, 0, 8.0, (1, 50)), (3, 0, 4.0, (1, 30))]
    vector = [(7, 0, 0.9, (7, 0)), (3, 0, 0.8, (3, 0)), (1, 0, 0.5, (1, 0))]
    got = semantic.fuse(lexical, vector, alpha=0.9)
    scores = {s: sc for s, _w, sc, _h in got}
    assert scores[5] == pytest.approx(0.9)
    assert scores[3] == pytest.approx(0.45 + 0.1 * 0.75)
    assert scores[7] == pytest.approx(0.1)
    assert 1 not in scores  # the worst of the vector channel adds nothing
    assert [s for s, *_ in got] == [5, 3, 7]
    assert dict((s, h) for s, _w, _sc, h in got)[3] == (1, 30)  # the index's hint wins
    # no lexical hit: the vectors alone, best first; ties to the newer row
    assert [s for s, *_ in semantic.fuse([], [(2, 0, 0.7, (2, 0)), (4, 0, 0.7, (4, 0)),
                                              (1, 0, 0.1, (1, 0))])] == [4, 2]
    assert semantic.fuse([], []) == []
    assert semantic.fuse(lexical, [], alpha=0.9) == [(5, 0, 0.9, (1, 50)), (3, 0, 0.45, (1, 30))]
    assert semantic.fuse(lexical, [])[0][2] == semantic.ALPHA  # the shipped weight


def test_wordllama_loads_offline_and_says_when_it_is_missing(monkeypatch: Any) -> None:
    pytest.importorskip("wordllama")
    e = WordLlamaEmbedder(64)
    a, b, c = semantic.embed(e, ["a kitten", "a cat", "a tax form"])
    cos = lambda x, y: sum(p * q for p, q in zip(x, y, strict=True))  # noqa: E731
    assert cos(a, b) > cos(a, c)
    assert len(a) == 64 and semantic.key(e) == "wordllama l2_supercat/64"
    with pytest.raises(LedgerError, match="dimension must be one of"):
        WordLlamaEmbedder(100)
    monkeypatch.setitem(sys.modules, "wordllama", None)  # as if not installed
    with pytest.raises(LedgerError, match=r"pip install 'transcript-ledger\[semantic\]'"):
        WordLlamaEmbedder(64)


def test_a_store_refuses_a_fusion_weight_out_of_range(tmp_path: Path) -> None:
    class Weighted:
        name, dimension = "weighted", 3

        def __init__(self, weight: Any) -> None:
            self.weight = weight

        def embed(self, texts: Any) -> list[list[float]]:
            return [[1.0, 0.0, 0.0] for _ in texts]

    for bad in (1.5, -0.1, "0.5", True):
        with pytest.raises(LedgerError, match=r"'weight' .* must be a number from 0 to 1"):
            Store(str(tmp_path / "s"), embedder=Weighted(bad))
    assert semantic.weight(Weighted(0.25)) == 0.25
    assert semantic.weight(Weighted(None)) == semantic.ALPHA


def test_ranked_search_fuses_with_the_embedders_own_weight() -> None:
    """An embedder's ``weight`` is the lexical weight of its store's fusion:
    with every vector alike (no vector part), the best lexical row scores
    exactly that weight; without one, ``ALPHA``."""
    import json

    from tests.helpers import msg

    class Same:
        name, dimension = "same", 3

        def __init__(self, weight: float | None) -> None:
            if weight is not None:
                self.weight = weight

        def embed(self, texts: Sequence[str]) -> list[list[float]]:
            return [[1.0, 0.0, 0.0] for _ in texts]

    for weight, want in ((0.25, 0.25), (None, semantic.ALPHA)):
        h = Store(f"memory://weight-{weight}", embedder=Same(weight)).history("w")
        h.append_many([msg("alpha beta"), msg("gamma delta"), msg("alpha gamma")])
        out = json.loads(h.session_history().call(
            {"action": "search", "query": "beta", "mode": "ranked", "current": True}))
        assert (out["items"][0]["seq"], out["items"][0]["score"]) == (1, want), out
