"""The Recall v2 harness (bench/recall_v2.py) on tiny sets, so it cannot rot.

Run: ``python -m pytest bench/test_recall_v2.py -q`` (``bench/`` is outside
the suite's ``testpaths``). Checks the metric arithmetic, that the lexical
variant is today's ``ranking.rank``, and that each variant does what its
name says on a set built so that it must.
"""

from __future__ import annotations

import hashlib
import importlib.util
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pytest

from bench import recall_bench, recall_v2
from bench.recall_data import QuestionSet, Turn, agent_set
from ledger.core import ranking


def _mini() -> QuestionSet:
    """Three windows; the last is the current view."""
    texts = [
        # window 1
        ["Shall we deploy the billing service today?",
         "I looked at the logs of the billing service.",
         "The billing deploy went to the eu-west-1 region with a 10% canary.",
         "Thanks, noted."],
        # window 2
        ["What port does the thumbnailer use?",
         "kubectl get svc output follows",
         "NAME thumbnailer PORT 8443/TCP",
         "The gateway listens on 9000."],
        # window 3 (current view)
        ["Let us plan the next sprint.",
         "The billing region question came up again."],
    ]
    turns: list[Turn] = []
    seq = 1
    for w in texts:
        window = seq
        seq += 1
        for i, t in enumerate(w):
            turns.append(Turn(seq, window, ("user", "assistant")[i % 2], t))
            seq += 1
    by_text = {t.text: t.seq for t in turns}
    questions = [
        ("Which region did the billing deploy go to?",
         {by_text["The billing deploy went to the eu-west-1 region with a 10% canary."]}),
        ("kubectl thumbnailer port",
         {by_text["NAME thumbnailer PORT 8443/TCP"]}),
    ]
    return QuestionSet("mini", "test", turns, questions)


def test_score_arithmetic() -> None:
    qs = [("a", {1}), ("b", {2, 3}), ("c", {9}), ("d", {4})]
    lists = {"a": [1, 5, 6], "b": [7, 7, 7, 7, 7, 3, 2], "c": [1, 2, 3], "d": [8] * 9 + [4]}
    m = recall_v2.score(qs, lambda q: lists[q])
    assert m["hit@1"] == pytest.approx(1 / 4)
    assert m["hit@5"] == pytest.approx(1 / 4)
    assert m["hit@10"] == pytest.approx(3 / 4)
    # evidence turns: 1 + 2 + 1 + 1 = 5; found at 10: 1 + 2 + 0 + 1
    assert m["all@1"] == pytest.approx(1 / 5)
    assert m["all@10"] == pytest.approx(4 / 5)


def test_lexical_equals_the_shipped_ranking() -> None:
    """The pure variants are ``ranking.rank`` as the engines call it: the
    neighbour field at the shipped weights, and without it (the variant
    ``lexical``) at field weight 0."""
    qs = agent_set(questions=24, windows=4, turns_per_window=40, seed=3)
    ix = recall_v2.build_index(qs.turns)
    shipped = recall_v2.Lexical(ranking.FIELD, ranking.WINDOW, ranking.NB_AVG)
    pairs = [(recall_v2.lexical(ix, shipped), recall_bench.exact(qs)),
             (recall_v2.lexical(ix), recall_bench.exact(qs, ranking.Weights(0.0)))]
    for ours, theirs in pairs:
        for q, _ in qs.questions:
            assert ours(q) == theirs(q)[:10], q


def test_neighbour_field_finds_a_turn_by_its_context() -> None:
    qs = _mini()
    ix = recall_v2.build_index(qs.turns)
    ev = qs.questions[1][1]
    q = "kubectl svc output"  # words only of the turn before the answer
    plain = recall_v2.lexical(ix, recall_v2.Lexical(0.0, 0.0))(q)
    expanded = recall_v2.lexical(ix, recall_v2.Lexical(0.5, 0.0))(q)
    assert not set(plain) & ev
    assert set(expanded[:3]) & ev
    assert expanded[0] == plain[0]  # the turn that has the words keeps the lead
    # the previous-turn field: a window's first turn has none, the answer has the turn before
    prev = recall_v2.build_index(qs.turns, (-1,))
    firsts = [i for i, t in enumerate(qs.turns) if i == 0 or qs.turns[i - 1].window != t.window]
    assert all(prev.nb_len[i] == 0 for i in firsts)
    at = next(i for i, t in enumerate(qs.turns) if t.seq in ev)
    assert prev.nb_len[at] == prev.own_len[at - 1] < ix.nb_len[at]
    found = recall_v2.lexical(prev, recall_v2.Lexical(0.5, 0.0))(q)
    assert set(found[:2]) & ev
    # the mean neighbour length may be given as a factor of avgdl: the exact factor changes nothing
    factor = float(ix.nb_len.mean() / ix.own_len.mean())
    exact = recall_v2.lexical_scores(ix, ["thumbnail", "kubectl"], recall_v2.Lexical(0.5, 0.3))
    given = recall_v2.lexical_scores(ix, ["thumbnail", "kubectl"],
                                     recall_v2.Lexical(0.5, 0.3, factor))
    assert exact.any() and given == pytest.approx(exact)
    # the neighbour field only adds score: a row with no term anywhere stays out
    s = recall_v2.lexical_scores(ix, ["quokka"], recall_v2.Lexical(1.0, 0.3))
    assert not s.any()


def test_scope_skips_the_current_view() -> None:
    qs = _mini()
    ix = recall_v2.build_index(qs.turns)
    q, ev = qs.questions[0]
    question_row = int(ix.seqs.max()) + 1
    seen = recall_v2.in_view(ix, recall_v2.Lexical(), scope=False)(q)
    assert seen[0] == question_row  # the model's own question wins without scope
    scoped = recall_v2.in_view(ix, recall_v2.Lexical(), scope=True)(q)
    last = {t.seq for t in qs.turns if t.window == qs.turns[-1].window}
    assert scoped[0] in ev and not set(scoped) & (last | {question_row})
    m = recall_v2.score(qs.questions[:1], recall_v2.in_view(ix, recall_v2.Lexical(), True))
    assert m["hit@1"] == 1.0


def test_fusion_arithmetic() -> None:
    a = np.array([3.0, 0.0, 1.0, 2.0])
    b = np.array([0.0, 4.0, 2.0, 0.0])
    rrf = recall_v2.fuse([a, b], "rrf")
    k = recall_v2.RRF_K
    assert rrf == pytest.approx([1 / (k + 1), 1 / (k + 1), 1 / (k + 3) + 1 / (k + 2), 1 / (k + 2)])
    comb = recall_v2.fuse([a, b], "score", [1.0, 0.5])
    assert comb == pytest.approx([1.0, 0.5, 1 / 3 + 0.25, 2 / 3])


def test_phrasings_are_bounded_and_deterministic() -> None:
    qs = _mini()
    ix = recall_v2.build_index(qs.turns)
    q = "Which region did the billing deploy go to?"
    ps = recall_v2.phrasings(q, ix, recall_v2.Lexical())
    assert ps[0] == q and 2 <= len(ps) <= 4
    assert ps == recall_v2.phrasings(q, ix, recall_v2.Lexical())
    assert all(p.strip() for p in ps)


class HashEmbedder:
    """Bag of hashed words: a real (weak) embedder, enough for the plumbing."""

    name = "hash-bow"
    dimension = 64

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().split():
                out[i, hashlib.blake2b(w.strip("?.,").encode(), digest_size=2).digest()[0]
                    % self.dimension] += 1
        n = np.linalg.norm(out, axis=1, keepdims=True)
        return (out / np.where(n == 0, 1, n)).astype(np.float32)


def test_hybrid_with_alpha_one_is_lexical() -> None:
    qs = _mini()
    ix = recall_v2.build_index(qs.turns)
    emb = HashEmbedder()
    v = recall_v2.embed_turns(ix, emb)
    assert v.own.shape == (ix.n, emb.dimension)
    lex = recall_v2.Lexical(0.5, 0.0)
    for q, _ in qs.questions:
        assert recall_v2.semantic(ix, v.own, emb, lex, 1.0)(q) == recall_v2.lexical(ix, lex)(q)
        alone = recall_v2.semantic(ix, v.own, emb, None, 0.0)(q)
        assert len(alone) == min(10, ix.n)


def test_run_set_reports_every_variant() -> None:
    qs = agent_set(questions=16, windows=4, turns_per_window=30, seed=5)
    lines: list[str] = []
    rows = recall_v2.run_set(qs, HashEmbedder(), quick=True, out=lines.append)
    names = [n for n, _ in rows]
    for want in ("plain BM25", "lexical (", "+neighbours field", "+scope",
                 "+multi-query rrf", "+multi-query score", "+semantic", "all: "):
        assert any(n.startswith(want) or want in n for n in names), want
    for _, m in rows:
        for k in recall_v2.KS:
            assert 0.0 <= m[f"hit@{k}"] <= 1.0
        assert m["hit@1"] <= m["hit@5"] <= m["hit@10"]
    assert any("bytes per row" in line for line in lines)
    kinds = next(line for line in lines if "by kind" in line)
    assert "| port (2) |" in kinds and "| rename (2) |" in kinds


@pytest.mark.skipif(importlib.util.find_spec("wordllama") is None,
                    reason="wordllama not installed (the bench extra)")
def test_wordllama_loads_from_its_wheel() -> None:
    emb = recall_v2.wordllama_embedder(64)
    assert emb is not None and emb.dimension == 64
    v = emb.embed(["the billing deploy region", "which region did billing deploy to",
                   "a recipe for lemon cake"])
    assert v.shape == (3, 64)
    assert np.linalg.norm(v, axis=1) == pytest.approx(1.0, abs=1e-4)
    assert v[0] @ v[1] > v[0] @ v[2]
