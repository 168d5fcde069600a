"""``python -m bench.recall_v2``: the variants of issue 32 (Recall v2), offline.

Every variant ranks the same turns of a dev set (``bench/recall_data``) for
each question, one ranked list per question, beside plain BM25 in the same
run; ``hit@k`` (the goals' recall@k) and ``all@k`` as in
``bench/recall_bench.py``. Nothing here touches a store: the variants are
pure functions over the turns, so the winners can be carried into the
engines' index afterwards.

- ``lexical``: today's ranking (``ledger.core.ranking``: our terms, BM25,
  ``WINDOW`` times the best own score of the row's window), computed with
  numpy over every row; it equals ``ranking.rank`` (the test checks).
- ``+neighbours``: document expansion, BM25F-style. Each turn has two fields,
  its own terms and the terms of up to two neighbouring turns of the same
  window (the one before and the one after); a term's pseudo frequency is
  ``tf_own / norm_own + w * tf_nb / norm_nb`` (each field length-normalised
  against its own average), saturated once with k1; idf stays the own
  field's (rows containing the term), so an engine needs no new statistics.
  ``w`` is measured on a grid. ``+previous turn``: the same with the turn
  before only, a field fixed when the row is appended (an append-only index).
- ``+scope``: the question is also a row of the current provider view (the
  last window), as in a live session where the model's question was just
  appended. Without scope that row competes (and lifts its window); with
  scope every row of the last window is skipped.
- ``+multi-query``: up to four phrasings, generated deterministically (the
  question; its rarer half of terms; its names and numbers; the question
  plus five terms of the first three hits, i.e. pseudo-relevance feedback),
  fused by RRF (k=60) or by score fusion (each list's scores divided by its
  best, summed).
- ``+semantic``: an ``Embedder`` (texts -> unit vectors, a name, a
  dimension); ``wordllama`` when installed (weights inside its wheel, no
  download). Vector alone, and hybrid: ``a * lex / max(lex) + (1 - a) *
  (cos - cos100) / (cos1 - cos100)`` (vector scores min-max normalised over
  the 100 best, clipped at 0) on a grid of ``a``, against RRF.

``--quick`` runs the small grids only. Sets without their package are
skipped with the reason.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
from rank_bm25 import BM25Okapi  # type: ignore[import-untyped]

from bench.recall_data import QuestionSet, Turn
from ledger.core import ranking

KS = (1, 5, 10)
TOP = 10
RRF_K = 60
Floats = npt.NDArray[np.float64]
Ranker = Callable[[str], list[int]]


# -- metrics -------------------------------------------------------------------

def score(questions: Sequence[tuple[str, set[int]]], ranker: Ranker) -> dict[str, float]:
    """hit@k (a question counts when one of its evidence turns is in the
    first k) and all@k (share of all evidence turns in the first k)."""
    hit: Counter[int] = Counter()
    found: Counter[int] = Counter()
    total = 0
    t0 = time.perf_counter()
    for question, evidence in questions:
        got = ranker(question)[:TOP]
        total += len(evidence)
        for k in KS:
            top = set(got[:k])
            hit[k] += bool(top & evidence)
            found[k] += len(top & evidence)
    n = max(len(questions), 1)
    out = {f"hit@{k}": hit[k] / n for k in KS}
    out.update({f"all@{k}": found[k] / max(total, 1) for k in KS})
    out["ms/query"] = (time.perf_counter() - t0) * 1000 / n
    return out


# -- the lexical projection ---------------------------------------------------

Postings = dict[str, tuple[npt.NDArray[np.int64], Floats]]


def _postings(counts: Sequence[Counter[str]]) -> Postings:
    acc: dict[str, tuple[list[int], list[float]]] = {}
    for i, c in enumerate(counts):
        for t, tf in c.items():
            ids, tfs = acc.setdefault(t, ([], []))
            ids.append(i)
            tfs.append(float(tf))
    return {t: (np.array(i, dtype=np.int64), np.array(f)) for t, (i, f) in acc.items()}


@dataclass
class Index:
    """Every turn's own terms and its neighbours' terms, as postings."""

    turns: list[Turn]
    seqs: npt.NDArray[np.int64]
    windows: npt.NDArray[np.int64]  # dense window number per turn
    last_window: int
    own_counts: list[Counter[str]]
    own: Postings
    nb: Postings
    own_len: Floats
    nb_len: Floats
    df: dict[str, int]
    nb_len_floor: Floats | None = None  # nb_len with each neighbour at least MIN_LENGTH long

    @property
    def n(self) -> int:
        return len(self.turns)


def build_index(turns: list[Turn], sides: tuple[int, ...] = (-1, 1)) -> Index:
    """``sides``: which neighbours fill the neighbour field, (-1, 1) for the
    turn before and after, (-1,) for the turn before only."""
    own_counts: list[Counter[str]] = []
    lengths: list[int] = []
    for t in turns:
        c, n = ranking.term_counts(t.text)
        own_counts.append(c)
        lengths.append(n)
    nb_counts: list[Counter[str]] = []
    nb_len: list[int] = []
    nb_floor: list[int] = []
    for i, t in enumerate(turns):
        near: Counter[str] = Counter()
        n = nf = 0
        for j in (i + d for d in sides):
            if 0 <= j < len(turns) and turns[j].window == t.window:
                near.update(own_counts[j])
                n += lengths[j]
                nf += max(lengths[j], ranking.MIN_LENGTH)
        nb_counts.append(near)
        nb_len.append(n)
        nb_floor.append(nf)
    dense: dict[int, int] = {}
    windows = [dense.setdefault(t.window, len(dense)) for t in turns]
    df: Counter[str] = Counter()
    for c in own_counts:
        df.update(c.keys())
    return Index(
        turns, np.array([t.seq for t in turns], dtype=np.int64),
        np.array(windows, dtype=np.int64), len(dense) - 1, own_counts,
        _postings(own_counts), _postings(nb_counts),
        np.array(lengths, dtype=np.float64), np.array(nb_len, dtype=np.float64), dict(df),
        np.array(nb_floor, dtype=np.float64),
    )


@dataclass(frozen=True)
class Lexical:
    """A lexical scorer's settings: neighbour field weight, window weight."""

    neighbour_field: float = 0.0
    window: float = ranking.WINDOW
    nb_avg_factor: float | None = None  # mean neighbour length as this x avgdl (else measured)


def lexical_scores(ix: Index, qterms: Sequence[str], cfg: Lexical,
                   extra: tuple[Counter[str], int, int] | None = None) -> Floats:
    """Scores of every turn (and of one ``extra`` row appended to the last
    window, given as (own counts, own length, index of its one neighbour),
    as the last element) for the query terms."""
    n = ix.n + (1 if extra else 0)
    own_len = ix.own_len if not extra else np.append(ix.own_len, extra[1])
    nb_len = ix.nb_len
    if extra:
        nb_len = np.append(nb_len, ix.own_len[extra[2]])
    avg_own = float(own_len.mean()) or 1.0
    avg_nb = (cfg.nb_avg_factor * avg_own if cfg.nb_avg_factor
              else float(nb_len.mean()) or 1.0)
    # as ranking: a row, and each neighbour in the field, at least MIN_LENGTH long
    floor = float(ranking.MIN_LENGTH)
    nb_floor = ix.nb_len_floor if ix.nb_len_floor is not None else nb_len
    if extra:
        nb_floor = np.append(nb_floor, max(float(ix.own_len[extra[2]]), floor))
    norm_own = 1 - ranking.B + ranking.B * np.maximum(own_len, floor) / avg_own
    norm_nb = 1 - ranking.B + ranking.B * nb_floor / avg_nb
    docs = n
    own_scores = np.zeros(n)
    scores = np.zeros(n)
    w = cfg.neighbour_field
    for t in dict.fromkeys(qterms):
        post = ix.own.get(t)
        e_tf = float(extra[0].get(t, 0)) if extra else 0.0
        df = ix.df.get(t, 0) + (1 if e_tf else 0)
        if post is None and not e_tf:
            continue
        idf = ranking.idf(df, docs)
        pseudo = np.zeros(n)
        if post is not None:
            ids, tfs = post
            pseudo[ids] = tfs / norm_own[ids]
        if e_tf:
            pseudo[-1] = e_tf / norm_own[-1]
        own_part = idf * pseudo * (ranking.K1 + 1) / (pseudo + ranking.K1)
        own_scores += own_part
        if w:
            nbp = ix.nb.get(t)
            if nbp is not None:
                ids, tfs = nbp
                pseudo[ids] += w * tfs / norm_nb[ids]
            if extra and ix.own_counts[extra[2]].get(t):
                pseudo[-1] += w * ix.own_counts[extra[2]][t] / norm_nb[-1]
            scores += idf * pseudo * (ranking.K1 + 1) / (pseudo + ranking.K1)
    if not w:
        scores = own_scores.copy()
    if cfg.window:
        windows = ix.windows if not extra else np.append(ix.windows, ix.last_window)
        best = np.zeros(ix.last_window + 1)
        np.maximum.at(best, windows, own_scores)
        scores = np.where(scores > 0, scores + cfg.window * best[windows], 0.0)
    return scores


def top(scores: Floats, seqs: npt.NDArray[np.int64], k: int = TOP) -> list[int]:
    """The seqs of the k best positive scores, ties to the newer row (as
    ``ranking.rank``)."""
    cand = np.flatnonzero(scores > 0)
    if len(cand) > 4 * k:
        part = np.argpartition(-scores[cand], 4 * k)[: 4 * k]
        # keep every row tied with the k-th best
        kth = np.sort(scores[cand][part])[-k] if len(part) >= k else 0.0
        cand = cand[scores[cand] >= kth]
    order = sorted(cand.tolist(), key=lambda i: (-round(float(scores[i]), 6), -int(seqs[i])))
    return [int(seqs[i]) for i in order[:k]]


# -- the variants ---------------------------------------------------------------

def plain_bm25(ix: Index) -> Ranker:
    bm = BM25Okapi([t.text.lower().split() or [""] for t in ix.turns])

    def run(q: str) -> list[int]:
        return top(np.asarray(bm.get_scores(q.lower().split()), dtype=np.float64), ix.seqs)

    return run


def lexical(ix: Index, cfg: Lexical = Lexical()) -> Ranker:
    def run(q: str) -> list[int]:
        return top(lexical_scores(ix, ranking.parse_query(q).terms, cfg), ix.seqs)

    return run


def in_view(ix: Index, cfg: Lexical, scope: bool) -> Ranker:
    """The question is also the newest row of the last window (the model's
    current provider view); ``scope`` skips that window."""
    seqs = np.append(ix.seqs, ix.seqs.max() + 1)
    last = ix.windows == ix.last_window

    def run(q: str) -> list[int]:
        qt = ranking.parse_query(q).terms
        if scope:
            s = lexical_scores(ix, qt, cfg)
            return top(np.where(last, 0.0, s), ix.seqs)
        c, n = ranking.term_counts(q)
        return top(lexical_scores(ix, qt, cfg, (c, n, ix.n - 1)), seqs)

    return run


_NAME = re.compile(r"\b(?:[A-Z][\w.-]*|\w*\d[\w.-]*|\w+_\w+)\b")


def phrasings(q: str, ix: Index, cfg: Lexical) -> list[str]:
    """Up to four deterministic phrasings of ``q``: as asked; its rarer half
    of words (keywords); its names, numbers and identifiers; and the question
    with five terms of its first three hits (pseudo-relevance feedback)."""
    out = [q]
    ws = [w for w in re.findall(r"[\w.-]+", q) if ranking.terms(w)]
    if len(ws) > 1:
        by_df = sorted(ws, key=lambda w: min(ix.df.get(t, 0) for t in ranking.terms(w)))
        kw = " ".join(w for w in ws if w in by_df[: max(1, len(ws) // 2)])
        if kw and kw not in out:
            out.append(kw)
    names = [m for m in _NAME.findall(q) if m != q.split(" ", 1)[0]]
    if names and " ".join(names) not in out:
        out.append(" ".join(names))
    qt = set(ranking.parse_query(q).terms)
    first = lexical_scores(ix, list(qt), cfg)
    hits = np.argsort(-first)[:3]
    gain: dict[str, float] = {}
    surface: dict[str, str] = {}
    for i in hits:
        if first[i] <= 0:
            continue
        for w in ranking.words(ix.turns[int(i)].text):
            surface.setdefault(ranking.terms(w)[0] if ranking.terms(w) else "", w)
        c = ix.own_counts[int(i)]
        for t, tf in c.items():
            if t not in qt and len(t) > 2 and t in surface:
                gain[t] = gain.get(t, 0.0) + tf * ranking.idf(ix.df.get(t, 0), ix.n)
    if gain:
        best = sorted(gain, key=lambda t: (-gain[t], t))[:5]
        out.append(q + " " + " ".join(surface[t] for t in best))
    return out[:4]


def fuse(lists: Sequence[Floats], how: str, weights: Sequence[float] | None = None) -> Floats:
    """RRF (k=60, over each list's 100 best) or score fusion (each list over
    its best, summed), optionally weighted."""
    weights = weights or [1.0] * len(lists)
    out = np.zeros_like(lists[0])
    for s, w in zip(lists, weights, strict=True):
        if how == "rrf":
            cand = np.flatnonzero(s > 0)
            order = cand[np.argsort(-s[cand], kind="stable")][:100]
            out[order] += w / (RRF_K + np.arange(1, len(order) + 1))
        else:
            m = float(s.max())
            if m > 0:
                out += w * s / m
    return out


def multi_query(ix: Index, cfg: Lexical, how: str, feedback: bool = True) -> Ranker:
    def run(q: str) -> list[int]:
        ps = phrasings(q, ix, cfg)
        if not feedback and len(ps) > 1 and ps[-1].startswith(q + " "):
            ps = ps[:-1]
        lists = [lexical_scores(ix, ranking.parse_query(p).terms, cfg) for p in ps]
        return top(fuse(lists, how), ix.seqs)

    return run


def combined(ix: Index, cfg: Lexical, how: str = "score", feedback: bool = False,
             vecs: npt.NDArray[np.float32] | None = None, emb: Embedder | None = None,
             alpha: float = 1.0) -> Ranker:
    """Every kept variant at once, as the index would run it: phrasings
    fused, optionally with the vector channel (weighted score fusion), the
    current view (the last window) skipped."""
    last = ix.windows == ix.last_window

    def run(q: str) -> list[int]:
        ps = phrasings(q, ix, cfg)
        if not feedback and len(ps) > 1 and ps[-1].startswith(q + " "):
            ps = ps[:-1]
        fused = fuse([lexical_scores(ix, ranking.parse_query(p).terms, cfg) for p in ps], how)
        if vecs is not None and emb is not None and alpha < 1:
            m = float(fused.max())
            cos = (vecs @ emb.embed([q])[0]).astype(np.float64)
            fused = (alpha * fused / m if m > 0 else 0.0) + (1 - alpha) * vector_norm(cos)
        return top(np.where(last, 0.0, fused), ix.seqs)

    return run


# -- the semantic channel -------------------------------------------------------

class Embedder(Protocol):
    """Texts to unit vectors (rows of a float32 matrix), with a name and a
    dimension: what an engine's vector projection would be computed with."""

    name: str
    dimension: int

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]: ...


class WordLlamaEmbedder:
    """``wordllama`` (MIT): static token embeddings pooled, weights in its
    wheel (256 dimensions; 64 or 128 are its Matryoshka truncations)."""

    def __init__(self, dim: int = 256) -> None:
        from pathlib import Path

        import wordllama  # type: ignore[import-untyped]
        from wordllama import WordLlama

        self._wl = WordLlama.load(cache_dir=Path(wordllama.__file__).parent,
                                  disable_download=True, dim=256,
                                  trunc_dim=dim if dim < 256 else None)
        self.name = f"wordllama l2_supercat {dim}"
        self.dimension = dim

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        v = np.asarray(self._wl.embed(list(texts), norm=True), dtype=np.float32)
        return v


def wordllama_embedder(dim: int = 256) -> Embedder | None:
    try:
        return WordLlamaEmbedder(dim)
    except ImportError:
        return None


@dataclass
class Vectors:
    own: npt.NDArray[np.float32]
    seconds: float
    chars: int


def embed_turns(ix: Index, emb: Embedder, max_chars: int = 4000) -> Vectors:
    texts = [t.text[:max_chars] for t in ix.turns]
    t0 = time.perf_counter()
    v = emb.embed(texts)
    return Vectors(v, time.perf_counter() - t0, sum(len(t) for t in texts))


def with_neighbours(ix: Index, v: npt.NDArray[np.float32], beta: float) -> npt.NDArray[np.float32]:
    """Each turn's vector plus ``beta`` times the mean of its neighbours'
    vectors (same window), re-normalised: document expansion for vectors."""
    out = v.astype(np.float32)
    for i in range(ix.n):
        near = [j for j in (i - 1, i + 1) if 0 <= j < ix.n and ix.windows[j] == ix.windows[i]]
        if near and beta:
            out[i] = v[i] + beta * v[near].mean(axis=0)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return (out / np.where(norms == 0, 1, norms)).astype(np.float32)


def vector_norm(cos: Floats) -> Floats:
    """Min-max over the 100 best, clipped at 0 (so the long tail adds nothing)."""
    k = min(100, len(cos))
    floor = float(np.partition(cos, -k)[-k])
    span = float(cos.max()) - floor
    return np.clip((cos - floor) / span, 0.0, None) if span > 0 else np.zeros_like(cos)


def semantic(ix: Index, vecs: npt.NDArray[np.float32], emb: Embedder,
             cfg: Lexical | None, alpha: float, how: str = "score") -> Ranker:
    """Vector alone (``cfg`` None or alpha 0), or fused with the lexical
    ranking: weighted score fusion or RRF."""
    qcache: dict[str, npt.NDArray[np.float32]] = {}

    def run(q: str) -> list[int]:
        qv = qcache.get(q)
        if qv is None:
            qv = qcache[q] = emb.embed([q])[0]
        cos = (vecs @ qv).astype(np.float64)
        if cfg is None or alpha == 0:
            return top(cos - cos.min() + 1e-9, ix.seqs)
        lex = lexical_scores(ix, ranking.parse_query(q).terms, cfg)
        if how == "rrf":
            return top(fuse([lex, cos - cos.min() + 1e-9], "rrf", [alpha, 1 - alpha]), ix.seqs)
        m = float(lex.max())
        fused = (alpha * lex / m if m > 0 else 0.0) + (1 - alpha) * vector_norm(cos)
        return top(fused, ix.seqs)

    return run


# -- the report -------------------------------------------------------------------

Row = tuple[str, dict[str, float]]


def table(rows: Sequence[Row]) -> str:
    head = ("| variant | " + " | ".join(f"hit@{k}" for k in KS) + " | "
            + " | ".join(f"all@{k}" for k in KS) + " | ms/query |")
    lines = [head, "|---" * (2 * len(KS) + 2) + "|"]
    for name, m in rows:
        cells = [f"{m[f'hit@{k}']:.3f}" for k in KS] + [f"{m[f'all@{k}']:.3f}" for k in KS]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {m['ms/query']:.1f} |")
    return "\n".join(lines)


def by_kind(qs: QuestionSet, picks: Sequence[tuple[str, Ranker]]) -> str:
    """hit@5 / hit@10 per kind of question for a few variants."""
    kinds = sorted(set(qs.kinds))
    head = "| kind (questions) | " + " | ".join(n for n, _ in picks) + " |"
    lines = [head, "|---" * (len(picks) + 1) + "|"]
    for kind in kinds:
        sub = [q for q, k in zip(qs.questions, qs.kinds, strict=True) if k == kind]
        cells = []
        for _, r in picks:
            m = score(sub, r)
            cells.append(f"{m['hit@5']:.2f} / {m['hit@10']:.2f}")
        lines.append(f"| {kind} ({len(sub)}) | " + " | ".join(cells) + " |")
    return "hit@5 / hit@10 by kind:\n\n" + "\n".join(lines)


def best_of(rows: Sequence[Row], prefix: str) -> Row:
    cands = [r for r in rows if r[0].startswith(prefix)]
    return max(cands, key=lambda r: (r[1]["hit@10"] + r[1]["hit@5"], r[1]["hit@1"]))


NB_GRID = (0.1, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0)
NB_GRID_QUICK = (0.3, 0.5)
PREV_GRID = (0.3, 0.5, 0.75, 1.0)
ALPHA_GRID = (0.5, 0.7, 0.8, 0.9, 0.95)
ALPHA_GRID_QUICK = (0.8, 0.9)


def engine_rows(qs: QuestionSet, ix: Index) -> list[Row]:
    """The engines' ranked search as shipped (the ``session_history`` tool
    over a file store holding the set, ``bench.recall_bench.tool_ranker``;
    every engine ranks alike) beside plain BM25 and the pure variants."""
    import tempfile

    from bench.recall_bench import tool_ranker
    from ledger.transcript.retrieval.args import ALLOWED_ARGS

    questions = qs.questions
    engine: list[Row] = []
    configs: list[tuple[str, dict[str, Any]]] = [("defaults", {})]
    if "current" in ALLOWED_ARGS["search"]:  # scope (issue 32) skips the last window
        configs.insert(0, ("current: true", {"current": True}))
    nb = Lexical(ranking.FIELD, ranking.WINDOW, ranking.NB_AVG)

    def rephrased(q: str) -> list[str]:
        """The question as asked, its rarer half of words and its names
        (``phrasings`` without feedback), '"' dropped from each."""
        ps = phrasings(q, ix, nb)
        if len(ps) > 1 and ps[-1].startswith(q + " "):
            ps = ps[:-1]
        return list(dict.fromkeys(p.replace('"', " ") for p in ps))

    for name, extra in configs:
        with tempfile.TemporaryDirectory() as d, tempfile.TemporaryDirectory() as d2:
            tool = tool_ranker(qs, d, **extra)
            engine.append((f"engine: session_history ranked, {name} (file store)",
                           score(questions, tool)))
            # The tool-output questions quote commands that hold '"': the tool
            # requires such phrases in the row itself, the pure variants ignore them.
            engine.append((f"engine, {name}, '\"' dropped from the question",
                           score(questions, _unquoted(tool))))
            many = tool_ranker(qs, d2, query_of=rephrased, **extra)
            saved = ranking.FUSION
            try:
                for how in ("score", "rrf"):
                    ranking.FUSION = how
                    engine.append((f"engine, {name}, +multi-query {how} (phrasings as a "
                                   "list, '\"' dropped)", score(questions, many)))
            finally:
                ranking.FUSION = saved
    return [
        ("plain BM25 (rank_bm25, white-space tokens)", score(questions, plain_bm25(ix))),
        ("lexical (pure, window 0.3)", score(questions, lexical(ix))),
        ("+neighbours field 0.3 (pure, mean field length 2 x avgdl)",
         score(questions, lexical(ix, nb))),
        ("+neighbours, question in view, no scope (pure)",
         score(questions, in_view(ix, nb, False))),
        ("+neighbours +scope, question in view (pure)",
         score(questions, in_view(ix, nb, True))),
        *engine,
    ]


def widen_rows(qs: QuestionSet, widths: Sequence[int]) -> list[Row]:
    """The shipped tool (``current: true``; '"' dropped from the questions,
    as the engine rows do) at each ``ranking.WIDEN`` of ``widths`` (-1:
    every hit widened): what widening fewer hits costs in recall."""
    import tempfile

    from bench.recall_bench import tool_ranker

    rows: list[Row] = []
    saved = ranking.WIDEN
    try:
        with tempfile.TemporaryDirectory() as d:
            tool = _unquoted(tool_ranker(qs, d, current=True))
            for n in widths:
                ranking.WIDEN = n
                rows.append((f"engine, WIDEN {'every hit' if n < 0 else n}",
                             score(qs.questions, tool)))
    finally:
        ranking.WIDEN = saved
    return rows


def _unquoted(tool: Ranker) -> Ranker:
    return lambda q: tool(q.replace('"', " "))


def run_set(qs: QuestionSet, emb: Embedder | None, quick: bool = False,
            out: Callable[[str], None] = print, engine_only: bool = False) -> list[Row]:
    """Every variant on one set; returns the rows printed."""
    ix = build_index(qs.turns)
    questions = qs.questions
    in_last = sum(1 for _, ev in questions
                  if all(ix.windows[ix.seqs.searchsorted(s)] == ix.last_window for s in ev))
    out(f"\n### {qs.name}\n\nsource: {qs.source}; {'; '.join(qs.notes)}; "
        f"{len(questions)} questions ({qs.skipped} without evidence skipped; {in_last} with "
        f"every evidence turn in the last window)\n")
    if engine_only:
        shipped = engine_rows(qs, ix)
        out(table(shipped))
        return shipped
    rows: list[Row] = [
        ("plain BM25 (rank_bm25, white-space tokens)", score(questions, plain_bm25(ix))),
        ("lexical (ledger.core.ranking, window 0.3)", score(questions, lexical(ix))),
        ("lexical, window 0", score(questions, lexical(ix, Lexical(0.0, 0.0)))),
    ]
    for w in NB_GRID_QUICK if quick else NB_GRID:
        for win in (ranking.WINDOW, 0.0):
            rows.append((f"+neighbours field {w} window {win}",
                         score(questions, lexical(ix, Lexical(w, win)))))
    name, _ = best_of(rows, "+neighbours")
    w_nb, w_win = (float(x) for x in re.findall(r"[\d.]+", name)[:2])
    nb = Lexical(w_nb, w_win)
    rows.append((f"+neighbours field {w_nb} window {w_win}, mean field length 2 x avgdl",
                 score(questions, lexical(ix, Lexical(w_nb, w_win, 2.0)))))
    prev_ix = build_index(qs.turns, (-1,))
    for w in NB_GRID_QUICK if quick else PREV_GRID:
        rows.append((f"+previous turn field {w} window {ranking.WINDOW}",
                     score(questions, lexical(prev_ix, Lexical(w, ranking.WINDOW)))))
    prev_name, _ = best_of(rows, "+previous")
    prev = Lexical(float(re.findall(r"[\d.]+", prev_name)[0]), ranking.WINDOW)
    rows += [
        ("lexical, question in view (no scope)", score(questions, in_view(ix, Lexical(), False))),
        ("lexical +scope", score(questions, in_view(ix, Lexical(), True))),
        (f"+neighbours {w_nb}/{w_win}, question in view", score(questions, in_view(ix, nb, False))),
        (f"+neighbours {w_nb}/{w_win} +scope", score(questions, in_view(ix, nb, True))),
    ]
    for how in ("rrf", "score"):
        rows.append((f"+neighbours +multi-query {how} (4 phrasings)",
                     score(questions, multi_query(ix, nb, how))))
        rows.append((f"+neighbours +multi-query {how} (3, no feedback)",
                     score(questions, multi_query(ix, nb, how, feedback=False))))
    if emb is None:
        out(table(rows))
        out("\n+semantic skipped: wordllama is not installed (pip install wordllama)")
        return rows
    vec = embed_turns(ix, emb)
    rate = ix.n / vec.seconds if vec.seconds else float("inf")
    sem: list[Row] = []
    for beta in (0.0, 0.5):
        vv = with_neighbours(ix, vec.own, beta) if beta else vec.own
        tag = f"vectors+nb {beta}" if beta else "vectors"
        sem.append((f"+semantic: {tag} alone", score(questions, semantic(ix, vv, emb, None, 0))))
        for a in ALPHA_GRID_QUICK if quick else ALPHA_GRID:
            sem.append((f"+semantic: {tag}, score fusion a={a}",
                        score(questions, semantic(ix, vv, emb, nb, a))))
        sem.append((f"+semantic: {tag}, RRF",
                    score(questions, semantic(ix, vv, emb, nb, 0.5, "rrf"))))
    rows += sem
    a_best, _ = best_of(sem, "+semantic: vectors, score")
    alpha = float(a_best.rsplit("=", 1)[1])
    rows += [
        (f"all: +neighbours {w_nb}/{w_win} +scope +multi-query score (3)",
         score(questions, combined(ix, nb))),
        (f"all: +neighbours {w_nb}/{w_win} +scope +multi-query score (3) +semantic a={alpha}",
         score(questions, combined(ix, nb, vecs=vec.own, emb=emb, alpha=alpha))),
    ]
    out(table(rows))
    if qs.kinds:
        picks: list[tuple[str, Ranker]] = [
            ("plain BM25", plain_bm25(ix)), ("lexical", lexical(ix)),
            (f"+neighbours {w_nb}/{w_win}", lexical(ix, nb)),
            (f"+previous {prev.neighbour_field}", lexical(prev_ix, prev)),
            (f"+neighbours +semantic a={alpha}", semantic(ix, vec.own, emb, nb, alpha)),
            ("all (+scope +multi-query)", combined(ix, nb)),
        ]
        out("\n" + by_kind(qs, picks))
    out(f"\nembedder {emb.name}: {ix.n} turns in {vec.seconds:.2f} s = {rate:,.0f} turns/s, "
        f"{vec.chars / vec.seconds / 1e6 if vec.seconds else 0:.2f} M chars/s (1 core, nice 19); "
        f"{emb.dimension * 4} bytes per row as float32 ({emb.dimension} bytes as int8, "
        f"{math.ceil(emb.dimension / 8)} as sign bits)")
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.recall_v2")
    p.add_argument("--quick", action="store_true", help="small grids")
    p.add_argument("--sets", default="longmemeval,agent,transcripts",
                   help="comma-separated: longmemeval, agent, transcripts")
    p.add_argument("--dim", type=int, default=256, help="wordllama dimension: 256, 128 or 64")
    p.add_argument("--engine", action="store_true",
                   help="only plain BM25, the pure lexical rows and the engines' ranked search")
    p.add_argument("--widen", metavar="N,N", default=None,
                   help="only the shipped tool's recall at each ranking.WIDEN (-1: every hit)")
    args = p.parse_args(argv)
    from bench import recall_data

    if args.widen:
        for name in args.sets.split(","):
            qs, why = recall_data.by_name(name.strip())
            if qs is None:
                print(f"\n### {name}: skipped: {why}")
                continue
            print(f"\n### {qs.name}\n")
            print(table(widen_rows(qs, [int(n) for n in args.widen.split(",")])))
        return 0

    emb = None if args.engine else wordllama_embedder(args.dim)
    for name in args.sets.split(","):
        qs, why = recall_data.by_name(name.strip())
        if qs is None:
            print(f"\n### {name}: skipped: {why}")
            continue
        run_set(qs, emb, args.quick, engine_only=args.engine)
    return 0


if __name__ == "__main__":
    sys.exit(main())
