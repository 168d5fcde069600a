"""Ranked recall, the pure part: how text becomes terms and how rows are scored.

No I/O here. Each engine's index stores what ``terms`` makes of a row (its
term frequencies and length); at query time the engine fetches a bounded set
of candidate postings and ``rank`` orders them. The bench (bench/recall_bench.py)
measures every choice below against plain BM25.

- Terms: NFKD + case folding with combining marks dropped (so "Café" and
  "cafe" meet), words split at anything that is not a letter or a digit
  (``snake_case`` and ``camelCase`` identifiers give their parts too), a short
  English stop list, then the Snowball English stemmer (PyStemmer).
- Scoring: BM25F (k1, b below) over two fields of a row: its own terms and
  its neighbours' terms, the indexed rows just before and just after it in
  the same window and the query's range (``FIELD`` is the neighbour field's
  weight, its mean length is taken as ``NB_AVG`` times the rows'; idf is the
  own field's), plus ``WINDOW`` times the best own score of its window:
  evidence sits in a conversation about the topic (bench/RESULTS.md, "Recall
  v2"). So a row can be found by the words around it: the rows ranked are the
  posting hits and their neighbours. Quoted phrases in the query must occur
  (case- and accent-folded) in the row's text. Ties go to the newer row.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import Stemmer

from ledger.core.bounds import SCAN_ROWS
from ledger.core.errors import BadRequest

K1 = 1.2
B = 0.75
FIELD = 0.3  # weight of the neighbour field (measured: bench/RESULTS.md, "Recall v2")
NB_AVG = 2.0  # the neighbour field's mean length, as this times the rows' mean length
WINDOW = 0.3  # weight of the best own score in the row's window
AVGDL_IMPACT = 64.0  # the fixed length that orders a term's postings by impact
MAX_TERMS = 32  # query terms kept (the rarest when there are more)
QUERY_TERMS = 64  # distinct terms a query is parsed into, at most (the first ones)
MAX_PHRASES = 16  # distinct quoted phrases a query may hold (more: refused)
WORD_MAX = 64  # a longer word is never a term (and never stemmed, so never cached)
EXAMINE = 8 * SCAN_ROWS  # postings an index examines per query, at most (all terms)
SNIPPET_SCAN = 16_384  # code points of a row searched for the snippet's centre

_WORD = re.compile(r"[^\W_]+")
_CAMEL = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_PHRASE = re.compile(r'"([^"]+)"')

# A short stop list: function words that carry no topic. Question words are
# here too: a question's "what", "when" and "how" never help to find its answer.
STOP = frozenset(
    """a about above after again against all am an and any are as at be because been
    before being below between both but by can could did do does doing down during each
    few for from further had has have having he her here hers herself him himself his how
    i if in into is it its itself just me might more most my myself no nor not now of off
    on once only or other our ours ourselves out over own same she should so some such
    than that the their theirs them themselves then there these they this those through
    to too under until up very was we were what when where which while who whom why will
    with would you your yours yourself yourselves s t d ll m re ve also us let""".split()
)

_stemmer = Stemmer.Stemmer("english")


def fold(text: str) -> str:
    """Case- and accent-folded text: NFKD, combining marks dropped, casefold."""
    decomposed = unicodedata.normalize("NFKD", text)
    if not decomposed.isascii():
        decomposed = "".join(c for c in decomposed if not unicodedata.combining(c))
    return decomposed.casefold()


@lru_cache(maxsize=65536)
def _stem_cached(word: str) -> str:
    return str(_stemmer.stemWord(word))


def _stem(word: str) -> str:
    """The stem of a word; the cache keeps only words that can be terms
    (shorter than WORD_MAX), so it holds at most 65,536 short keys."""
    return _stem_cached(word) if len(word) < WORD_MAX else word


def words(text: str) -> list[str]:
    """The folded words of ``text`` before stop words and stemming; an
    identifier like ``parseHTTPRequest`` or ``max_retries`` yields its parts
    as well as itself."""
    out: list[str] = []
    decomposed = unicodedata.normalize("NFKD", text)
    if not decomposed.isascii():
        decomposed = "".join(c for c in decomposed if not unicodedata.combining(c))
    for m in _WORD.finditer(decomposed):
        w = m.group()
        folded = w.casefold()
        out.append(folded)
        if len(w) > 3 and not w.islower() and not w.isupper():
            parts = _CAMEL.findall(w)
            if len(parts) > 1:
                out.extend(p.casefold() for p in parts)
    return out


def terms(text: str) -> list[str]:
    """The indexed terms of ``text``, in order (repeats kept)."""
    return [_stem(w) for w in words(text) if w not in STOP and len(w) < WORD_MAX]


def term_counts(text: str) -> tuple[Counter[str], int]:
    """A row's term frequencies and its length in terms (what an index stores)."""
    ts = terms(text)
    return Counter(ts), len(ts)


def postings_plan(dfs: Mapping[str, int]) -> tuple[list[str], int, int]:
    """What an index reads for a query, given the document frequencies ``dfs``
    (not empty) of the query terms it holds: the rarest ``MAX_TERMS`` terms,
    how many of each term's best postings in the query's seq range it takes
    (``SCAN_ROWS`` in all, at least one each), and how many of each term's
    best postings it examines to find them (``EXAMINE`` in all: a range that
    excludes most of a term's postings, a window or rows newer than the
    query, costs no more than that). Every engine reads so, and so finds the
    same candidates."""
    kept = sorted(dfs, key=lambda t: dfs[t])[:MAX_TERMS]
    return kept, max(SCAN_ROWS // len(kept), 1), max(EXAMINE // len(kept), 1)


@dataclass(frozen=True)
class Query:
    """A parsed query: distinct stemmed terms (query order) and folded phrases."""

    terms: tuple[str, ...]
    phrases: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.terms


def parse_query(text: str) -> Query:
    """Terms of the whole query (phrases included; the first QUERY_TERMS
    distinct ones) and its distinct quoted phrases (``BadRequest`` past
    MAX_PHRASES: dropping one would serve rows without it)."""
    phrases = tuple(dict.fromkeys(
        " ".join(fold(p).split()) for p in _PHRASE.findall(text) if p.strip()
    ))
    if len(phrases) > MAX_PHRASES:
        raise BadRequest(f"'query' has {len(phrases)} distinct quoted phrases; at most "
                             f"{MAX_PHRASES} are searched for")
    seen: dict[str, None] = {}
    for t in terms(text):
        seen.setdefault(t, None)
    qterms = tuple(seen)
    if not qterms:  # a query of stop words only: search them as terms
        qterms = tuple(dict.fromkeys(_stem(w) for w in words(text) if len(w) < WORD_MAX))
    return Query(qterms[:QUERY_TERMS], phrases)


def idf(df: int, n: int) -> float:
    """BM25's idf, kept positive (Lucene's form)."""
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


def impact(tf: int, dl: int) -> float:
    """The order of a term's postings in an index: its BM25 term-frequency
    part at a fixed average length, so the first postings are the best."""
    return tf * (K1 + 1) / (tf + K1 * (1 - B + B * dl / AVGDL_IMPACT))


@dataclass
class Doc:
    """What ranking needs of one candidate row: its frequencies of the query
    terms and, for a row that may be ranked, the indexed rows just before
    and after it within the query's seq range (``prev``, ``next``; 0: none or
    not known). An engine names them from its index: its rows are those after
    the floor, so a row before the floor is never a neighbour."""

    seq: int
    window: int
    length: int
    tfs: dict[str, int] = field(default_factory=dict)
    prev: int = 0
    next: int = 0


@dataclass(frozen=True)
class Corpus:
    """Collection statistics at query time."""

    docs: int
    total_length: int
    df: Mapping[str, int]

    @property
    def avgdl(self) -> float:
        return self.total_length / self.docs if self.docs else 1.0


def bm25(doc: Doc, query: Query, corpus: Corpus) -> float:
    avgdl = corpus.avgdl or 1.0
    norm = K1 * (1 - B + B * doc.length / avgdl)
    score = 0.0
    for t in query.terms:
        tf = doc.tfs.get(t)
        if tf:
            score += idf(corpus.df.get(t, 0), corpus.docs) * tf * (K1 + 1) / (tf + norm)
    return score


def bm25f(doc: Doc, near: Sequence[Doc], query: Query, corpus: Corpus, weight: float) -> float:
    """BM25F over the row's own field and its neighbours' (``near``) field:
    per term the pseudo frequency ``tf/norm + weight * tf_near/norm_near``
    (each field normalised by its length against its mean), saturated once;
    without neighbours, ``bm25``."""
    if not near or not weight:
        return bm25(doc, query, corpus)
    avgdl = corpus.avgdl or 1.0
    norm = 1 - B + B * doc.length / avgdl
    norm_near = 1 - B + B * sum(n.length for n in near) / (NB_AVG * avgdl)
    score = 0.0
    for t in query.terms:
        pseudo = doc.tfs.get(t, 0) / norm + weight * sum(
            n.tfs.get(t, 0) for n in near) / norm_near
        if pseudo:
            score += idf(corpus.df.get(t, 0), corpus.docs) * pseudo * (K1 + 1) / (pseudo + K1)
    return score


@dataclass(frozen=True)
class Weights:
    field: float = FIELD
    window: float = WINDOW


def neighbours(doc: Doc, by: Mapping[int, Doc]) -> list[Doc]:
    """The row's neighbours among ``by``: its ``prev`` and ``next`` when
    they are in its window."""
    out = []
    for s in (doc.prev, doc.next):
        n = by.get(s) if s else None
        if n is not None and n.window == doc.window:
            out.append(n)
    return out


def ranked_rows(docs: Sequence[Doc], hits: Collection[int] | None = None) -> list[Doc]:
    """The rows ``rank`` scores: the hits (every doc when None) and their
    neighbours, in seq order."""
    by = {d.seq: d for d in docs}
    chosen = {s: by[s] for s in (by if hits is None else hits) if s in by}
    for d in list(chosen.values()):
        for n in neighbours(d, by):
            chosen.setdefault(n.seq, n)
    return [chosen[s] for s in sorted(chosen)]


def rank(
    docs: Sequence[Doc],
    query: Query,
    corpus: Corpus,
    hits: Collection[int] | None = None,
    weights: Weights = Weights(),
) -> list[tuple[int, float]]:
    """Rows best first as (seq, score): the ``hits`` (the rows an index's
    postings found; every doc when None) and their neighbours, each scored
    by ``bm25f`` with its neighbours among ``docs`` plus ``weights.window``
    times the best own score in its window among them. Rows of score 0 are
    dropped; ties go to the newer row."""
    by = {d.seq: d for d in docs}
    rows = ranked_rows(docs, hits)
    own = {d.seq: bm25(d, query, corpus) for d in rows}
    best: dict[int, float] = {}
    for d in rows:
        if own[d.seq] > best.get(d.window, 0.0):
            best[d.window] = own[d.seq]
    out: list[tuple[int, float]] = []
    for d in rows:
        s = bm25f(d, neighbours(d, by), query, corpus, weights.field)
        if s <= 0.0:
            continue
        total = s + weights.window * best.get(d.window, 0.0)
        out.append((d.seq, round(total, 6)))
    out.sort(key=lambda p: (-p[1], -p[0]))
    return out


def has_phrases(text: str, query: Query) -> bool:
    """Whether every quoted phrase of the query occurs in ``text`` (folded,
    runs of white space as one space)."""
    if not query.phrases:
        return True
    folded = " ".join(fold(text).split())
    return all(p in folded for p in query.phrases)


def best_offset(text: str, query: Query) -> int:
    """Where a snippet of ``text`` should centre: the first phrase, else the
    densest spot of query terms (a code point offset)."""
    if query.phrases:
        folded = fold(text)
        if len(folded) == len(text):
            at = folded.find(query.phrases[0].split(" ")[0])
            if at >= 0:
                return at
    wanted = set(query.terms)
    hits = []
    for m in _WORD.finditer(text, 0, SNIPPET_SCAN):
        w = m.group()
        lw = w.lower() if w.isascii() else fold(w)
        if _stem(lw) in wanted or (
            len(w) > 3 and not w.islower() and not w.isupper()
            and wanted.intersection(_stem(p.lower()) for p in _CAMEL.findall(w))
        ):
            hits.append(m.start())
    if not hits:
        return 0
    # The hit with the most other hits within 150 code points after it.
    best, count = hits[0], 0
    j = 0
    for i, h in enumerate(hits):
        while j < len(hits) and hits[j] - h <= 150:
            j += 1
        if j - i > count:
            best, count = h, j - i
    return best
