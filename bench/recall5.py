"""``python -m bench.recall5``: issue 32, third round: ranking ideas on a
conversational dev set, every variant beside plain BM25 in one run.

The sets are ``bench/recall_data``'s; REALTALK (real multi-session
conversations, ``REALTALK=path``) is ranked one history per conversation (a
question searches only its own conversation, as the held-out harness asks one
store per conversation) and its counts pooled over the ten. Every variant is
a pure function over the turns (numpy, as ``bench/recall_v2``); ``shipped``
is today's engine ranking (``ledger.core.ranking``: our terms, BM25F with the
neighbour field 0.3 and its mean length 2 x avgdl, window weight 0.3), which
the engines equal up to their bounded candidates (``bench/recall_v2``'s
``--engine`` rows). The question is not in the history, so scope changes
nothing here (the last window stays searchable).

Variants (weights on small grids, reported whole so nothing is picked
silently):

- ``neighbours w / window v``: the neighbour field and window weight on a grid.
- ``wide neighbours``: the field holds two turns either side (four in all).
- ``session doc``: each row also gets ``s`` times its session's BM25 score
  over the session's concatenated text (normalised by the best session), a
  session-level retrieval mixed into the turn ranking.
- ``expansion``: query terms expanded with their nearest corpus words by the
  embedder's static word vectors (wordllama), each added term weighted
  ``g x cosine`` (cosine at least ``tau``; the three nearest per word).
- ``RM3``: pseudo-relevance feedback (Lavrenko and Croft 2001; Abdul-Jaleel
  et al. 2004): the ``fb_docs`` best rows' term distribution (their terms
  weighted by the row's score), its ``fb_terms`` best terms added with
  weight ``lam`` against the query's own ``1 - lam``.
- ``second hop``: a second query built from the first hits (the question's
  terms that the best hit lacks plus the best hit's five rarest terms), its
  ranking fused with the first by score (``hop`` the second's weight).
- ``semantic a``: wordllama 64 d vectors fused by weighted score fusion, as
  shipped in ``ledger.core.semantic`` (a = 0.95), over the adopted lexical
  ranking (``recall_v2.lexical_scores``, which mirrors ``ranking``).

Every other variant is measured against round 2's ranking (``BASE``: no
short-row floor), the ranking shipped when this round began; ``ADOPTED``
is round 2 with ``ranking.MIN_LENGTH``.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

import numpy as np
import numpy.typing as npt

from bench import recall_data, recall_v2
from bench.recall_data import QuestionSet
from bench.recall_v2 import Floats, Index, Lexical, Ranker, build_index, top
from ledger.core import ranking

KS = (1, 5, 10)
Factory = Callable[["Ctx"], Ranker]


@dataclass
class Ctx:
    """One history's index and what the variants share over it."""

    qs: QuestionSet
    ix: Index
    wide: Index | None = None
    emb: recall_v2.Embedder | None = None
    vecs: npt.NDArray[np.float32] | None = None
    near: dict[str, list[tuple[str, float]]] | None = None
    sess: dict[str, tuple[npt.NDArray[np.int64], Floats]] | None = None
    sess_len: Floats | None = None
    tmp: list[str] = field(default_factory=list)


ON_ADOPTED: list[tuple[str, float]] = []  # set by --on-adopted: the default ``length``


def weighted_scores(ix: Index, qw: dict[str, float], cfg: Lexical,
                    bs: tuple[float, float] | None = None,
                    length: tuple[str, float] | None = None) -> Floats:
    """``recall_v2.lexical_scores`` with a weight per query term (each term's
    idf multiplied by it); all weights 1 gives the same scores. ``bs``: BM25's
    b for the own field and for the neighbour field (both ``ranking.B``
    when None). ``length``: ("floor", f) normalises a row's own field as if
    it had at least f terms; ("pad", p) as if every row had p more terms
    (its length and the mean both)."""
    n = ix.n
    if length is None and ON_ADOPTED:
        length = ON_ADOPTED[0]
    own_len = ix.own_len
    avg_own = float(own_len.mean()) or 1.0
    nb_len = ix.nb_len
    if length is not None and length[0] == "floor":
        own_len = np.maximum(own_len, length[1])
    elif length is not None and length[0] == "floor<=avg":
        own_len = np.maximum(own_len, min(length[1], avg_own))
    elif length is not None and length[0] == "floor both":
        own_len = np.maximum(own_len, length[1])
        if length[1] == ranking.MIN_LENGTH and ix.nb_len_floor is not None:
            nb_len = ix.nb_len_floor
        else:
            nb_len = np.zeros(n)
            for i in range(n):
                for j in (i - 1, i + 1):
                    if 0 <= j < n and ix.windows[j] == ix.windows[i]:
                        nb_len[i] += own_len[j]
    elif length is not None:
        own_len = own_len + length[1]
        avg_own += length[1]
    avg_nb = (cfg.nb_avg_factor * avg_own if cfg.nb_avg_factor
              else float(ix.nb_len.mean()) or 1.0)
    b_own, b_nb = bs if bs is not None else (ranking.B, ranking.B)
    norm_own = 1 - b_own + b_own * own_len / avg_own
    norm_nb = 1 - b_nb + b_nb * nb_len / avg_nb
    own_scores = np.zeros(n)
    scores = np.zeros(n)
    w = cfg.neighbour_field
    for t, qwt in qw.items():
        post = ix.own.get(t)
        if post is None or qwt <= 0:
            continue
        idf = ranking.idf(ix.df.get(t, 0), n) * qwt
        pseudo = np.zeros(n)
        ids, tfs = post
        pseudo[ids] = tfs / norm_own[ids]
        own_scores += idf * pseudo * (ranking.K1 + 1) / (pseudo + ranking.K1)
        if w:
            nbp = ix.nb.get(t)
            if nbp is not None:
                nids, ntfs = nbp
                pseudo[nids] += w * ntfs / norm_nb[nids]
            scores += idf * pseudo * (ranking.K1 + 1) / (pseudo + ranking.K1)
    if not w:
        scores = own_scores.copy()
    if cfg.window:
        best = np.zeros(ix.last_window + 1)
        np.maximum.at(best, ix.windows, own_scores)
        scores = np.where(scores > 0, scores + cfg.window * best[ix.windows], 0.0)
    return scores


def qweights(q: str) -> dict[str, float]:
    return dict.fromkeys(ranking.parse_query(q).terms, 1.0)


SHIPPED = Lexical(ranking.FIELD, ranking.WINDOW, ranking.NB_AVG)
BASE = "round 2 (shipped before): neighbours 0.3, window 0.3"
ADOPTED = (f"**adopted**: round 2 + a row and each neighbour at least {ranking.MIN_LENGTH} "
           "terms long (ranking.MIN_LENGTH)")


# -- variants -------------------------------------------------------------------

def v_plain(c: Ctx) -> Ranker:
    return recall_v2.plain_bm25(c.ix)


def v_lex(cfg: Lexical, wide: bool = False) -> Factory:
    def make(c: Ctx) -> Ranker:
        ix = c.wide if wide and c.wide is not None else c.ix
        return lambda q: top(weighted_scores(ix, qweights(q), cfg), ix.seqs)
    return make


def _session_index(c: Ctx) -> None:
    """Each window's concatenated terms as one document (postings over windows)."""
    if c.sess is not None:
        return
    counts: list[Counter[str]] = [Counter() for _ in range(c.ix.last_window + 1)]
    for i, oc in enumerate(c.ix.own_counts):
        counts[int(c.ix.windows[i])].update(oc)
    post: dict[str, tuple[list[int], list[float]]] = {}
    for wi, cnt in enumerate(counts):
        for t, tf in cnt.items():
            ids, tfs = post.setdefault(t, ([], []))
            ids.append(wi)
            tfs.append(float(tf))
    c.sess = {t: (np.array(i, dtype=np.int64), np.array(f)) for t, (i, f) in post.items()}
    c.sess_len = np.array([sum(x.values()) for x in counts], dtype=np.float64)


def session_scores(c: Ctx, qw: dict[str, float]) -> Floats:
    """BM25 of each window (its concatenated text) for the query, per row."""
    _session_index(c)
    assert c.sess is not None and c.sess_len is not None
    nwin = len(c.sess_len)
    avg = float(c.sess_len.mean()) or 1.0
    norm = 1 - ranking.B + ranking.B * c.sess_len / avg
    out = np.zeros(nwin)
    for t, w in qw.items():
        p = c.sess.get(t)
        if p is None:
            continue
        ids, tfs = p
        pseudo = tfs / norm[ids]
        out[ids] += w * ranking.idf(len(ids), nwin) * pseudo * (ranking.K1 + 1) / (
            pseudo + ranking.K1)
    return out[c.ix.windows]


def v_session(cfg: Lexical, s: float) -> Factory:
    def make(c: Ctx) -> Ranker:
        def run(q: str) -> list[int]:
            qw = qweights(q)
            lex = weighted_scores(c.ix, qw, cfg)
            ss = session_scores(c, qw)
            m, ms = float(lex.max()), float(ss.max())
            if m <= 0 or ms <= 0:
                return top(lex, c.ix.seqs)
            return top(np.where(lex > 0, lex / m + s * ss / ms, 0.0), c.ix.seqs)
        return run
    return make


def _nearest_words(c: Ctx, k: int = 3) -> None:
    """Each corpus term's (stem's) nearest other corpus terms by the cosine
    of the embedder's vectors of their most frequent surface words."""
    if c.near is not None or c.emb is None:
        return
    surface: dict[str, Counter[str]] = {}
    for t in c.ix.turns:
        for w in ranking.words(t.text):
            if w in ranking.STOP or len(w) < 3 or len(w) >= 64 or w.isdigit():
                continue
            surface.setdefault(ranking._stem(w), Counter())[w] += 1
    stems = sorted(surface)
    wordsv = [surface[s].most_common(1)[0][0] for s in stems]
    v = c.emb.embed(wordsv).astype(np.float32)
    sims = v @ v.T
    np.fill_diagonal(sims, -1.0)
    best = np.argsort(-sims, axis=1)[:, :k]
    c.near = {s: [(stems[j], float(sims[i, j])) for j in best[i]] for i, s in enumerate(stems)}


def expanded(c: Ctx, q: str, g: float, tau: float) -> dict[str, float]:
    _nearest_words(c)
    qw = qweights(q)
    if c.near is None:
        return qw
    out = dict(qw)
    for t in qw:
        for u, cos in c.near.get(t, []):
            if cos >= tau and u not in qw:
                out[u] = max(out.get(u, 0.0), g * cos)
    return out


def v_expand(cfg: Lexical, g: float, tau: float) -> Factory:
    def make(c: Ctx) -> Ranker:
        return lambda q: top(weighted_scores(c.ix, expanded(c, q, g, tau), cfg), c.ix.seqs)
    return make


def rm3(c: Ctx, q: str, cfg: Lexical, fb_docs: int, fb_terms: int, lam: float) -> Floats:
    qw = qweights(q)
    first = weighted_scores(c.ix, qw, cfg)
    hits = [int(i) for i in np.argsort(-first)[:fb_docs] if first[i] > 0]
    if not hits:
        return first
    rel: defaultdict[str, float] = defaultdict(float)
    for i in hits:
        oc = c.ix.own_counts[i]
        ln = sum(oc.values()) or 1
        for t, tf in oc.items():
            rel[t] += float(first[i]) * tf / ln
    total = sum(rel.values()) or 1.0
    fb = sorted(rel, key=lambda t: (-rel[t], t))[:fb_terms]
    out = {t: (1 - lam) / len(qw) for t in qw} if qw else {}
    for t in fb:
        out[t] = out.get(t, 0.0) + lam * rel[t] / total
    m = max(out.values())
    return weighted_scores(c.ix, {t: x / m for t, x in out.items()}, cfg)


def v_rm3(cfg: Lexical, fb_docs: int, fb_terms: int, lam: float) -> Factory:
    def make(c: Ctx) -> Ranker:
        return lambda q: top(rm3(c, q, cfg, fb_docs, fb_terms, lam), c.ix.seqs)
    return make


def v_hop(cfg: Lexical, hop: float) -> Factory:
    def make(c: Ctx) -> Ranker:
        def run(q: str) -> list[int]:
            qw = qweights(q)
            first = weighted_scores(c.ix, qw, cfg)
            b = int(np.argmax(first))
            if first[b] <= 0:
                return top(first, c.ix.seqs)
            have = c.ix.own_counts[b]
            rare = sorted((t for t in have if t not in qw),
                          key=lambda t: (c.ix.df.get(t, 0), t))[:5]
            second = dict.fromkeys([t for t in qw if t not in have] + rare, 1.0)
            s2 = weighted_scores(c.ix, second, cfg)
            m2 = float(s2.max())
            fused = first / float(first[b]) + (hop * s2 / m2 if m2 > 0 else 0.0)
            return top(np.where(first > 0, fused, hop * s2 / m2 if m2 > 0 else 0.0),
                       c.ix.seqs)
        return run
    return make


def v_bm25(cfg: Lexical, k1: float, b: float) -> Factory:
    """The shipped ranking with other BM25 constants (set around each call)."""
    def make(c: Ctx) -> Ranker:
        def run(q: str) -> list[int]:
            saved = ranking.K1, ranking.B
            ranking.K1, ranking.B = k1, b
            try:
                return top(weighted_scores(c.ix, qweights(q), cfg), c.ix.seqs)
            finally:
                ranking.K1, ranking.B = saved
        return run
    return make


_CAP = re.compile(r"(?<![\w.])[A-Z][a-z]+(?:'s)?")


def name_weighted(q: str, w: float) -> dict[str, float]:
    """The query's terms, those of its capitalised words after the first
    (names, in a conversational question) weighted ``w``."""
    qw = qweights(q)
    first = q.split(None, 1)[0] if q.split() else ""
    for m in _CAP.finditer(q):
        if m.start() == 0 or m.group() == first:
            continue
        for t in ranking.terms(m.group()):
            if t in qw:
                qw[t] = w
    return qw


def v_names(cfg: Lexical, w: float) -> Factory:
    def make(c: Ctx) -> Ranker:
        return lambda q: top(weighted_scores(c.ix, name_weighted(q, w), cfg), c.ix.seqs)
    return make


def v_length(cfg: Lexical, how: str, x: float) -> Factory:
    def make(c: Ctx) -> Ranker:
        return lambda q: top(weighted_scores(c.ix, qweights(q), cfg, None, (how, x)), c.ix.seqs)
    return make


def v_split(cfg: Lexical, b_own: float, b_nb: float) -> Factory:
    def make(c: Ctx) -> Ranker:
        return lambda q: top(weighted_scores(c.ix, qweights(q), cfg, (b_own, b_nb)), c.ix.seqs)
    return make


def grid() -> list[tuple[str, Factory]]:
    """The field weights and BM25 constants on a finer grid."""
    out: list[tuple[str, Factory]] = [
        ("plain BM25 (rank_bm25, white-space tokens)", v_plain),
        (BASE, v_lex(SHIPPED)),
    ]
    for w in (0.1, 0.2, 0.3, 0.4):
        for win in (0.0, 0.15, 0.3, 0.45):
            if (w, win) != (0.3, 0.3):
                out.append((f"neighbours {w}, window {win}", v_lex(Lexical(w, win, 2.0))))
    for bo, bn in ((0.3, 0.75), (0.5, 0.75), (0.3, 0.9), (0.5, 0.9), (0.75, 0.3), (0.3, 0.5)):
        out.append((f"shipped, b own={bo} b neighbours={bn}", v_split(SHIPPED, bo, bn)))
    for k1 in (0.9, 1.2, 1.6):
        for b in (0.3, 0.5, 0.75, 0.9):
            if (k1, b) != (1.2, 0.75):
                out.append((f"shipped, k1={k1} b={b}", v_bm25(SHIPPED, k1, b)))
    return out


def v_semantic(cfg: Lexical, alpha: float) -> Factory:
    def make(c: Ctx) -> Ranker:
        if c.emb is None or c.vecs is None:
            raise RuntimeError("no embedder")
        return recall_v2.semantic(c.ix, c.vecs, c.emb, cfg, alpha)
    return make


def date_words(when: str) -> str:
    """A turn's date as words an index could add from a row's ``ts``: day,
    month name and abbreviation, year, weekday, and the numeric date
    (REALTALK's ``29.12.2023, 22:42:04``)."""
    try:
        d = datetime.strptime(when.split(",")[0].strip(), "%d.%m.%Y")
    except ValueError:
        return ""
    return f"{d:%d %B %b %Y %A %d.%m.%Y}"


_PAD = " ".join(f"zzpad{i}" for i in range(9))  # as many terms as date_words gives


def v_dated(cfg: Lexical, pad: bool = False) -> Factory:
    """Each turn's own terms with its date's words (``date_words``); with
    ``pad``, nine terms no query holds instead (the same added length, so
    what the dates add beyond a softer length normalisation shows)."""
    def make(c: Ctx) -> Ranker:
        turns = [replace(t, text=f"{t.text} {_PAD if pad else date_words(t.when)}")
                 for t in c.qs.turns]
        ix = build_index(turns)
        return lambda q: top(weighted_scores(ix, qweights(q), cfg), ix.seqs)
    return make


def v_engine(semantic: bool = False) -> Factory:
    """The shipped ``session_history`` ranked search over a file store
    holding the history (``current: true``: the question is not in it),
    optionally with the store's wordllama 64 d embedder (ALPHA as shipped)."""
    def make(c: Ctx) -> Ranker:
        import tempfile

        from bench.recall_bench import tool_ranker

        emb = None
        if semantic:
            from ledger.core.embedders import WordLlamaEmbedder

            emb = WordLlamaEmbedder(64)
        d = tempfile.mkdtemp(prefix="recall5-")
        c.tmp.append(d)
        return tool_ranker(c.qs, d, embedder=emb, current=True)
    return make


def variants(quick: bool) -> list[tuple[str, Factory]]:
    s = SHIPPED
    out: list[tuple[str, Factory]] = [
        ("plain BM25 (rank_bm25, white-space tokens)", v_plain),
        ("lexical, no neighbour field (window 0.3)", v_lex(Lexical(0.0, 0.3))),
        (BASE, v_lex(s)),
        (ADOPTED, v_length(s, "floor both", ranking.MIN_LENGTH)),
        ("engine: session_history ranked, current: true (file store)", v_engine()),
        ("engine, + the store's semantic channel (wordllama 64 d, ALPHA 0.95)",
         v_engine(True)),
    ]
    for w in (0.5, 1.0) if quick else (0.5, 0.75, 1.0, 1.5):
        for win in (0.3, 0.0, 0.6):
            out.append((f"neighbours {w}, window {win}", v_lex(Lexical(w, win, 2.0))))
    for w in (0.3, 0.5, 1.0):
        out.append((f"wide neighbours (2 each side) {w}, window 0.3",
                    v_lex(Lexical(w, 0.3, 4.0), wide=True)))
    for how, xs in (("floor", (4, 8, 10, 12, 14, 16, 20)), ("pad", (4, 8, 16)),
                    ("floor<=avg", (12, 16)), ("floor both", (8, 12, 16))):
        for x in xs:
            out.append((f"shipped, own length {how} {x}", v_length(s, how, x)))
    out.append(("shipped + the turn's date as words", v_dated(s)))
    out.append(("shipped + nine padding terms a row (the dates' length, no dates)",
                v_dated(s, pad=True)))
    for sw in (0.1, 0.3, 0.6):
        out.append((f"shipped + session doc {sw}", v_session(s, sw)))
    for g, tau in ((0.3, 0.6), (0.5, 0.6), (0.5, 0.75), (1.0, 0.75)):
        out.append((f"shipped + expansion g={g} tau={tau}", v_expand(s, g, tau)))
    for fd, ft, lam in ((3, 10, 0.3), (5, 10, 0.5), (10, 20, 0.3)):
        out.append((f"shipped + RM3 docs={fd} terms={ft} lam={lam}", v_rm3(s, fd, ft, lam)))
    for w in (0.0, 0.3, 0.6):
        out.append((f"shipped, names in the question weighted {w}", v_names(s, w)))
    for hop in (0.3, 0.6):
        out.append((f"shipped + second hop {hop}", v_hop(s, hop)))
    for a in (0.95, 0.8):
        out.append((f"adopted + semantic 64 d a={a}", v_semantic(s, a)))
    return out


@dataclass
class Tally:
    n: int = 0
    hit: Counter[int] | None = None
    ms: float = 0.0

    def add(self, ranked: list[int], evidence: set[int]) -> None:
        if self.hit is None:
            self.hit = Counter()
        self.n += 1
        for k in KS:
            self.hit[k] += bool(set(ranked[:k]) & evidence)

    def cells(self) -> str:
        h = self.hit or Counter()
        return " / ".join(f"{h[k] / max(self.n, 1):.3f}" for k in KS)


def run(histories: Sequence[QuestionSet], emb: recall_v2.Embedder | None,
        quick: bool, only: set[str] | None = None, fine: bool = False
        ) -> tuple[dict[str, Tally], dict[tuple[str, str], Tally]]:
    """Each variant (``grid()`` when ``fine``) over every history, pooled;
    and per kind of question."""
    vs = grid() if fine else variants(quick)
    total: dict[str, Tally] = {name: Tally() for name, _ in vs}
    kinds: dict[tuple[str, str], Tally] = {}
    for qs in histories:
        ix = build_index(qs.turns)
        c = Ctx(qs, ix, build_index(qs.turns, (-2, -1, 1, 2)), emb)
        if emb is not None:
            c.vecs = recall_v2.embed_turns(ix, emb).own
        kind_of = qs.kinds or ["all"] * len(qs.questions)
        for name, make in vs:
            if only and not any(o in name for o in only):
                continue
            if "semantic" in name and emb is None:
                continue
            r = make(c)
            t0 = time.perf_counter()
            for (q, ev), kind in zip(qs.questions, kind_of, strict=True):
                got = r(q)[:10]
                total[name].add(got, ev)
                kinds.setdefault((name, kind), Tally()).add(got, ev)
            total[name].ms += time.perf_counter() - t0
        for d in c.tmp:
            shutil.rmtree(d, ignore_errors=True)
    return total, kinds


def report(title: str, histories: Sequence[QuestionSet], total: dict[str, Tally],
           kinds: dict[tuple[str, str], Tally]) -> str:
    nq = sum(len(h.questions) for h in histories)
    lines = [f"\n### {title}: {nq} questions, {sum(len(h.turns) for h in histories)} turns, "
             f"{len(histories)} histor{'y' if len(histories) == 1 else 'ies'}\n",
             "| variant | hit@1 / hit@5 / hit@10 | ms/query |", "|---|---|---|"]
    for name, t in total.items():
        if t.n:
            lines.append(f"| {name} | {t.cells()} | {1000 * t.ms / t.n:.1f} |")
    ks = sorted({k for _, k in kinds})
    ran = [name for name, t in total.items() if t.n]
    if len(ks) > 1 and ran:
        lines += ["", "| variant | " + " | ".join(
            f"{k} ({kinds[(ran[0], k)].n})" for k in ks) + " |",
            "|---" * (len(ks) + 1) + "|"]
        for name, t in total.items():
            if t.n:
                lines.append(f"| {name} | " + " | ".join(
                    kinds[(name, k)].cells() for k in ks) + " |")
    return "\n".join(lines)


def set_histories(name: str) -> list[QuestionSet] | None:
    """The histories of dev set ``name`` as the recall benches search them
    (REALTALK one per conversation; the transcripts' questions without
    ``"``, as the engine rows), or None after printing why it is skipped."""
    if name in ("realtalk", "realtalk-speakers"):
        convs = recall_data.realtalk_conversations(name.endswith("speakers"))
        if convs is None:
            print(f"\n### {name}: skipped: REALTALK is not set "
                  "(REALTALK=path/to/a/clone/of/the/REALTALK/repository)")
        return convs
    qs, why = recall_data.by_name(name)
    if qs is None:
        print(f"\n### {name}: skipped: {why}")
        return None
    if name == "transcripts":  # as the engine rows: '"' dropped
        qs.questions = [(q.replace('"', " "), ev) for q, ev in qs.questions]
    return [qs]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.recall5")
    p.add_argument("--sets", default="realtalk,realtalk-speakers,transcripts,agent,longmemeval")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--only", default="", help="comma-separated parts of variant names")
    p.add_argument("--no-embedder", action="store_true")
    p.add_argument("--on-adopted", action="store_true",
                   help="every variant over the adopted ranking (the short-row floor) "
                   "instead of round 2's")
    p.add_argument("--grid", action="store_true",
                   help="only the field weights and BM25 constants on a finer grid")
    args = p.parse_args(argv)
    emb = None if args.no_embedder else recall_v2.wordllama_embedder(64)
    only = {o for o in args.only.split(",") if o} or None
    if args.on_adopted:
        ON_ADOPTED.append(("floor both", float(ranking.MIN_LENGTH)))
    for name in args.sets.split(","):
        histories = set_histories(name)
        if histories is None:
            continue
        total, kinds = run(histories, emb, args.quick, only, args.grid)
        print(report(name, histories, total, kinds), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
