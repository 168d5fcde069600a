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
  v2"). So a row can be found by the words around it. Two stages, so a
  call reads and scores few neighbours (``widen``): the posting hits are
  scored without the field first, and only the best ``WIDEN`` of them are
  read with their neighbours; the rows ranked are the hits and the
  neighbours of those, a widened hit and each row next to one with the field,
  any other hit without it (its score a lower bound). Quoted phrases in the
  query must occur (case- and accent-folded) in the row's text. Ties go to
  the newer row.
- Short rows: a row is length-normalised as if it had at least
  ``MIN_LENGTH`` terms (in its own field, and each neighbour in the
  neighbour field), so "Hi Kate!" is not a better match for a question
  about Kate than a sentence about her (real conversations are full of such
  rows; bench/RESULTS.md, "Issue 32, third round (recall5)"). The postings'
  order (``impact``) is unchanged, so stored indexes stay valid.
"""

from __future__ import annotations

import heapq
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import chain
from operator import itemgetter
from typing import TypeVar

import Stemmer

from ledger.core.bounds import SCAN_ROWS
from ledger.core.errors import BadRequest

K1 = 1.2
B = 0.75
FUSION = "score"  # how the rankings of several phrasings are fused (measured: "rrf" loses)
RRF_K = 60  # reciprocal rank fusion's constant (Cormack et al. 2009)
WIDEN = 32  # hits scored with their neighbours: the best by the score without them
FIELD = 0.3  # weight of the neighbour field (measured: bench/RESULTS.md, "Recall v2")
NB_AVG = 2.0  # the neighbour field's mean length, as this times the rows' mean length
WINDOW = 0.3  # weight of the best own score in the row's window
MIN_LENGTH = 12  # a row (own field, and each neighbour in the field) counts at least this long
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


def _plain_ranges(blocks: Sequence[tuple[int, int]]) -> str:
    """A character class body: the code points of ``blocks`` that are no
    combining mark (computed here, so exact for this Python's Unicode)."""
    out: list[str] = []
    for lo, hi in blocks:
        start = None
        for cp in range(lo, hi + 2):
            plain = cp <= hi and not unicodedata.combining(chr(cp))
            if plain and start is None:
                start = cp
            elif not plain and start is not None:
                out.append(f"\\U{start:08x}-\\U{cp - 1:08x}")
                start = None
    return "".join(out)


# The runs of characters that may be combining marks: not ASCII, and not in
# the blocks most prose uses beside it (Latin-1 and Latin Extended, general
# punctuation, symbols, arrows, CJK punctuation, emoji) minus the marks
# those blocks hold; ``_unmarked`` looks at these runs only.
_NON_ASCII = re.compile("[^\\x00-\\x7f" + _plain_ranges(
    ((0x80, 0x2FF), (0x2000, 0x2BFF), (0x3000, 0x303F), (0x1F300, 0x1FAFF))) + "]+")

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


def _drop_marks(run: re.Match[str]) -> str:
    return "".join(c for c in run.group() if not unicodedata.combining(c))


def _unmarked(decomposed: str) -> str:
    """NFKD text without its combining marks (only its runs of non-ASCII
    characters are looked at: most text has a few)."""
    return decomposed if decomposed.isascii() else _NON_ASCII.sub(_drop_marks, decomposed)


def fold(text: str) -> str:
    """Case- and accent-folded text: NFKD, combining marks dropped, casefold."""
    return _unmarked(unicodedata.normalize("NFKD", text)).casefold()


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
    add = out.append
    for w in _WORD.findall(_unmarked(unicodedata.normalize("NFKD", text))):
        add(w.casefold())
        if len(w) > 3 and not w.islower() and not w.isupper():
            parts = _CAMEL.findall(w)
            if len(parts) > 1:
                out.extend(p.casefold() for p in parts)
    return out


def _word_terms(word: str) -> tuple[str, ...]:
    """The terms one word of ``_WORD`` gives (``terms`` of that word alone):
    itself and, for an identifier, its parts (``words``), folded, stop
    words and words of WORD_MAX or more dropped, stemmed."""
    ws = [word.casefold()]
    if len(word) > 3 and not word.islower() and not word.isupper():
        parts = _CAMEL.findall(word)
        if len(parts) > 1:
            ws.extend(p.casefold() for p in parts)
    return tuple(_stem_cached(w) for w in ws if w not in STOP and len(w) < WORD_MAX)


# The terms of each word seen (``_word_terms``), keyed by the word as it
# appears (str) or, for ASCII text, by its bytes; only words shorter than
# WORD_MAX are kept, and a full cache starts again: at most _WORDS_KEPT keys.
_WORDS_KEPT = 65536
_Key = TypeVar("_Key", str, bytes)
_V = TypeVar("_V")
# ASCII letters and digits kept, every other byte a space: for ASCII text,
# ``text.encode().translate(_ASCII_WORDS).split()`` is ``_WORD.findall(text)``.
_ASCII_WORDS = bytes(c if chr(c).isascii() and chr(c).isalnum() else 0x20 for c in range(256))
# The same, but every byte of a multi-byte UTF-8 sequence kept: the pieces
# ``split`` then gives are ASCII words or runs holding non-ASCII characters.
_PIECES = bytes(c if c >= 0x80 or chr(c).isalnum() else 0x20 for c in range(256))


def _keep(cache: dict[_Key, _V], key: _Key, value: _V) -> _V:
    """``value``, kept in ``cache`` under ``key`` when the word is shorter
    than WORD_MAX (a full cache starts again): the bound of every word cache."""
    if len(key) < WORD_MAX:
        if len(cache) >= _WORDS_KEPT:
            cache.clear()
        cache[key] = value
    return value


class _AsciiWords(dict[bytes, tuple[str, ...]]):
    """The terms of each ASCII word (its bytes), worked out when first asked
    for (``cache[word]``: in C for a word held, so a text's words are looked
    up with ``map``, no Python per word) and kept (``_keep``)."""

    def __missing__(self, word: bytes) -> tuple[str, ...]:
        return _keep(self, word, _word_terms(word.decode()))


class _Pieces(dict[bytes, tuple[str, ...]]):
    """The terms of each piece of NFKD text between ASCII separators (its
    UTF-8 bytes): an ASCII word's from ``_ascii_words``, a piece holding
    non-ASCII characters through the marks and the regular expression, each
    of its words' terms kept in ``_str_words``; kept like a word."""

    def __missing__(self, piece: bytes) -> tuple[str, ...]:
        if piece.isascii():
            return _keep(self, piece, _ascii_words[piece])
        found: list[str] = []
        cache_s = _str_words
        for w in _WORD.findall(_unmarked(piece.decode("utf-8", "surrogatepass"))):
            known = cache_s.get(w)
            if known is None:
                known = _keep(cache_s, w, _word_terms(w))
            found.extend(known)
        return _keep(self, piece, tuple(found))


_str_words: dict[str, tuple[str, ...]] = {}
_ascii_words = _AsciiWords()
_pieces = _Pieces()


def _word_keys(text: str) -> tuple[list[bytes], dict[bytes, tuple[str, ...]]]:
    """``text`` split in C into the keys of a word cache, and that cache:
    ASCII text (NFKD leaves it as it is) into its words; other text, after
    NFKD, at its ASCII separators into pieces: ASCII words, and runs holding
    non-ASCII characters (often a symbol beside a number, ``12→``) that only
    the marks and the regular expression split (``_Pieces``). Every ASCII
    separator is a separator of ``_WORD`` and no combining mark is ASCII, so
    the words are the same."""
    if text.isascii():
        return text.encode().translate(_ASCII_WORDS).split(), _ascii_words
    return unicodedata.normalize("NFKD", text).encode(
        "utf-8", "surrogatepass").translate(_PIECES).split(), _pieces


def terms(text: str) -> list[str]:
    """The indexed terms of ``text``, in order (repeats kept): the terms of
    each of its words (``words``) that is no stop word and shorter than
    WORD_MAX, stemmed. Each distinct word's terms are worked out once and
    kept (``_word_terms``), and looked up in C (``_word_keys``)."""
    keys, cache = _word_keys(text)
    return list(chain.from_iterable(map(cache.__getitem__, keys)))


def term_counts(text: str) -> tuple[Counter[str], int]:
    """A row's term frequencies and its length in terms (what an index
    stores): ``Counter(terms(text))`` and its length, the terms counted as
    they are looked up (keys in the order the text first names them)."""
    keys, cache = _word_keys(text)
    tfs = Counter(chain.from_iterable(map(cache.__getitem__, keys)))
    return tfs, sum(tfs.values())


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


def complete(df: int, taken: int, per_term: int, examine: int) -> bool:
    """Whether the postings an index took of a term (``postings_plan``) are
    all it has in the query's range: fewer than ``per_term`` taken from a
    list no longer than ``examine``. Then a row in range that holds the term
    is among them, and no row's entry needs reading for it."""
    return taken < per_term and df <= examine


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


def _weights(query: Query, corpus: Corpus) -> list[tuple[str, float]]:
    """Each query term with its idf times (K1 + 1): what every score of one
    query multiplies by, computed once."""
    return [(t, idf(corpus.df.get(t, 0), corpus.docs) * (K1 + 1)) for t in query.terms]


def _own(doc: Doc, weighted: Sequence[tuple[str, float]], avgdl: float) -> float:
    norm = K1 * (1 - B + B * max(doc.length, MIN_LENGTH) / avgdl)
    tfs = doc.tfs
    score = 0.0
    for t, w in weighted:
        tf = tfs.get(t)
        if tf:
            score += w * tf / (tf + norm)
    return score


def _fielded(doc: Doc, near: Sequence[Doc], weighted: Sequence[tuple[str, float]],
             avgdl: float, weight: float) -> float:
    if not near or not weight:
        return _own(doc, weighted, avgdl)
    norm = 1 - B + B * max(doc.length, MIN_LENGTH) / avgdl
    near_len = sum(max(n.length, MIN_LENGTH) for n in near)
    near_w = weight / (1 - B + B * near_len / (NB_AVG * avgdl))
    tfs = doc.tfs
    score = 0.0
    for t, w in weighted:
        pseudo = tfs.get(t, 0) / norm
        for n in near:
            got = n.tfs.get(t)
            if got:
                pseudo += near_w * got
        if pseudo:
            score += w * pseudo / (pseudo + K1)
    return score


def bm25(doc: Doc, query: Query, corpus: Corpus) -> float:
    return _own(doc, _weights(query, corpus), corpus.avgdl or 1.0)


def bm25f(doc: Doc, near: Sequence[Doc], query: Query, corpus: Corpus, weight: float) -> float:
    """BM25F over the row's own field and its neighbours' (``near``) field:
    per term the pseudo frequency ``tf/norm + weight * tf_near/norm_near``
    (each field normalised by its length against its mean), saturated once;
    without neighbours, ``bm25``."""
    return _fielded(doc, near, _weights(query, corpus), corpus.avgdl or 1.0, weight)


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


@dataclass(frozen=True)
class FirstStage:
    """What ``widen`` learns from the hits alone: each hit's own score, each
    window's best own score among them, and the hits to widen."""

    own: dict[int, float]
    best: dict[int, float]
    wide: frozenset[int]


def widen(
    docs: Sequence[Doc], query: Query, corpus: Corpus, hits: Collection[int] | None = None,
    weights: Weights = Weights(), limit: int | None = None,
) -> FirstStage:
    """The first stage of ``rank``, over the hits among ``docs`` (every doc
    when None; their entries are all it needs): their own BM25 scores, the
    best per window, and the ``limit`` (``WIDEN`` when None; every hit when
    negative) best hits by the score without the neighbour field (own plus
    ``weights.window`` times the window's best, ties to the newer row). Only
    those are read and scored with their neighbours: an engine reads the
    links and entries of ``wide`` and of the rows next to them, not of every
    hit."""
    weighted = _weights(query, corpus)
    avgdl = corpus.avgdl or 1.0
    if hits is None:
        chosen: Sequence[Doc] = docs
    else:
        wanted = hits if isinstance(hits, (set, frozenset, dict)) else set(hits)
        chosen = [d for d in docs if d.seq in wanted]
    # ``_own`` of each, inlined (a call per candidate was a fifth of this
    # stage): the same operations in the same order, so the same floats.
    own: dict[int, float] = {}
    best: dict[int, float] = {}
    one_b = 1 - B
    for d in chosen:
        norm = K1 * (one_b + B * max(d.length, MIN_LENGTH) / avgdl)
        tfs = d.tfs
        score = 0.0
        for t, w in weighted:
            tf = tfs.get(t)
            if tf:
                score += w * tf / (tf + norm)
        own[d.seq] = score
        if score > best.get(d.window, 0.0):
            best[d.window] = score
    n = WIDEN if limit is None else limit
    if n < 0 or n >= len(chosen):
        wide = frozenset(own)
    else:
        win = weights.window
        keyed = heapq.nlargest(n, [(own[d.seq] + win * best.get(d.window, 0.0), d.seq)
                                   for d in chosen])
        wide = frozenset(s for _, s in keyed)
    return FirstStage(own, best, wide)


def ranked_rows(docs: Sequence[Doc], hits: Collection[int] | None = None,
                wide: Collection[int] | None = None) -> list[Doc]:
    """The rows ``rank`` scores: the hits (every doc when None) and the
    neighbours of ``wide`` (of every hit when None), in seq order."""
    by = {d.seq: d for d in docs}
    chosen = {s: by[s] for s in (by if hits is None else hits) if s in by}
    for s in list(chosen) if wide is None else wide:
        d = by.get(s)
        if d is not None:
            for n in neighbours(d, by):
                chosen.setdefault(n.seq, n)
    return [chosen[s] for s in sorted(chosen)]


def rank(
    docs: Sequence[Doc],
    query: Query,
    corpus: Corpus,
    hits: Collection[int] | None = None,
    weights: Weights = Weights(),
    stage: FirstStage | None = None,
) -> list[tuple[int, float]]:
    """Rows best first as (seq, score): the ``hits`` (the rows an index's
    postings found; every doc when None) and the neighbours of the widened
    hits (``stage``, from ``widen``; every hit when None); a widened hit and
    each row next to one scored by ``bm25f`` with its neighbours among
    ``docs``, any other hit by its own ``bm25``; plus ``weights.window``
    times the best own score of the hits in its window. Rows of score 0 are
    dropped; ties go to the newer row."""
    if stage is None:
        stage = widen(docs, query, corpus, hits, weights, -1)
    by = {d.seq: d for d in docs}
    weighted = _weights(query, corpus)
    avgdl = corpus.avgdl or 1.0
    own, best, wide = stage.own, stage.best, stage.wide
    fielded: set[int] = set()
    for s in wide:
        d = by.get(s)
        if d is not None:
            fielded.add(s)
            fielded.update(n.seq for n in neighbours(d, by))
    out: list[tuple[int, float]] = []
    win = weights.window
    for s in own.keys() | fielded:  # any order: the sort below is total (seqs are distinct)
        d = by[s]
        if s in fielded:
            score = _fielded(d, neighbours(d, by), weighted, avgdl, weights.field)
        else:
            score = own[s]
        if score <= 0.0:
            continue
        out.append((s, round(score + win * best.get(d.window, 0.0), 6)))
    out.sort(key=_SCORE_SEQ, reverse=True)  # best first, then the newer row
    return out


_SCORE_SEQ = itemgetter(1, 0)


def fuse(
    lists: Sequence[Sequence[tuple[int, float]]], how: str | None = None
) -> list[tuple[int, float]]:
    """One ranking (seq, score), best first, from several rankings of the
    same rows (one per phrasing of a query): ``"score"`` (``FUSION``, the
    default) sums each ranking's scores divided by its best, so a row every
    phrasing finds well leads; ``"rrf"`` sums ``1 / (RRF_K + rank)``. Ties
    go to the newer row."""
    how = FUSION if how is None else how
    if how not in ("score", "rrf"):
        raise ValueError(f"unknown fusion {how!r}: 'score' or 'rrf'")
    total: dict[int, float] = {}
    for ranked in lists:
        if how == "rrf":
            for i, (seq, _score) in enumerate(ranked):
                total[seq] = total.get(seq, 0.0) + 1.0 / (RRF_K + i + 1)
            continue
        top = max((score for _seq, score in ranked), default=0.0)
        if top > 0:
            for seq, score in ranked:
                total[seq] = total.get(seq, 0.0) + score / top
    out = [(seq, round(score, 6)) for seq, score in total.items()]
    out.sort(key=lambda p: (-p[1], -p[0]))
    return out


def has_phrases(text: str, query: Query) -> bool:
    """Whether every quoted phrase of the query occurs in ``text`` (folded,
    runs of white space as one space)."""
    if not query.phrases:
        return True
    folded = " ".join(fold(text).split())
    return all(p in folded for p in query.phrases)


# The stems a word gives in ``_hits``: its own (of the word lowered when it
# is ASCII, else folded) and, for an identifier, its parts' (lowered); keyed
# by the word as bytes for ASCII text, as str for other text; only words
# shorter than WORD_MAX are kept, and a full cache starts again.
_word_stems: dict[bytes, frozenset[str]] = {}
_str_stems: dict[str, frozenset[str]] = {}


def _stems(w: str) -> frozenset[str]:
    stems = {_stem(w.lower() if w.isascii() else fold(w))}
    if len(w) > 3 and not w.islower() and not w.isupper():
        stems.update(_stem(p.lower()) for p in _CAMEL.findall(w))
    return frozenset(stems)


def _stems_of(word: bytes) -> frozenset[str]:
    got = _word_stems.get(word)
    if got is None:
        got = _keep(_word_stems, word, _stems(word.decode()))
    return got


def _str_stems_of(word: str) -> frozenset[str]:
    got = _str_stems.get(word)
    if got is None:
        got = _keep(_str_stems, word, _stems(word))
    return got


def _whole(scan: str, word: str, hits: list[int]) -> None:
    """Add where ``word`` stands whole in ``scan`` (no letter or digit
    either side: a match of ``_WORD``, whose ``[^\\W_]`` is ``isalnum``)."""
    n = len(word)
    end = len(scan)
    i = scan.find(word)
    while i >= 0:
        if (i == 0 or not scan[i - 1].isalnum()) and (
                i + n == end or not scan[i + n].isalnum()):
            hits.append(i)
        i = scan.find(word, i + 1)


def _hits(scan: str, wanted: set[str]) -> list[int]:
    """Where the words of ``scan`` (``_WORD``) that give a query term start,
    in order: a word gives a term when its stem is one, or, for an
    identifier, the stem of one of its parts. Its distinct words are found
    in C (the UTF-8 bytes split at every ASCII byte that is no letter or
    digit: a piece with no other byte is a word, the words of any other
    piece are ``_WORD``'s), each judged once (``_stems``, kept), then each
    word that gives a term is found in C where it stands whole."""
    found: set[str] = set()
    raw = scan.encode("utf-8", "surrogatepass")  # a lone surrogate is no letter
    known = _word_stems.get  # inline: a call per distinct word is most of the cost
    for piece in set(raw.translate(_PIECES).split()):
        if piece.isascii():
            stems = known(piece)
            if not wanted.isdisjoint(_stems_of(piece) if stems is None else stems):
                found.add(piece.decode())
            continue
        for w in _WORD.findall(piece.decode("utf-8", "surrogatepass")):
            if not wanted.isdisjoint(_str_stems_of(w)):
                found.add(w)
    hits: list[int] = []
    for w in found:
        _whole(scan, w, hits)
    hits.sort()
    return hits


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
    scan = text[:SNIPPET_SCAN]
    hits = _hits(scan, wanted)
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
