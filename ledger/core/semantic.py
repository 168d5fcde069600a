"""The semantic channel of ranked recall, the pure part: what an embedder is,
what of a row it embeds, and how the vector scores join the lexical ones.

An ``Embedder`` turns texts into vectors (one per text, ``dimension``
floats each) and has a ``name``; ``Store(root, embedder=...)`` configures
one (``ledger.core.embedders``: wordllama, offline; docs/how-to/semantic.md:
fastembed for production). Without one, ranked search is lexical only and
exactly as before. With one, each engine keeps the rows' vectors as a
projection (``ledger.storage.vectors``) keyed by ``key`` (the embedder's
name and dimension: another embedder means another projection, never mixed
vectors), and a ranked search fuses the two channels (``fuse``).

Fusion is weighted score fusion, measured in bench/RESULTS.md ("Issue 32:
the semantic channel"): each lexical score over the best lexical score,
times ``ALPHA``, plus ``1 - ALPHA`` times the row's cosine min-max normalised
over the ``VECTOR_TOP`` best rows of the query's range (so the long tail of
weak similarities adds nothing). Plain reciprocal rank fusion was measured
worse than lexical ranking alone with a weak embedder.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import xxhash

from ledger.core.errors import LedgerError

ALPHA = 0.95  # weight of the lexical channel (measured: bench/RESULTS.md, issue 32)
VECTOR_TOP = 100  # rows of the vector channel fused, at most (the best cosines)
EMBED_CHARS = 4000  # code points of a row's searched text that are embedded
MAX_DIMENSION = 4096
BATCH = 256  # texts per call of ``embed`` while catching up

# (seq, window, score, hint): a ranked candidate (ledger.storage.engine.Candidate)
Candidate = tuple[int, int, float, tuple[int, int]]


@runtime_checkable
class Embedder(Protocol):
    """Texts to vectors: ``embed(texts)`` returns one vector of ``dimension``
    finite floats per text, in order; ``name`` names the model (and anything
    else that changes the vectors). The same text must always give the same
    vector: the vectors are a projection, computed once per row."""

    name: str
    dimension: int

    def embed(self, texts: Sequence[str]) -> Sequence[Sequence[float]]: ...


def key(embedder: Embedder) -> str:
    """What a vector projection is keyed by: the embedder's name and
    dimension (``LedgerError`` for an embedder that does not say them)."""
    name = getattr(embedder, "name", None)
    dim = getattr(embedder, "dimension", None)
    if not isinstance(name, str) or not name or len(name) > 200 or "\n" in name:
        raise LedgerError(f"embedder {embedder!r}: 'name' must be a non-empty one-line "
                          f"string of at most 200 characters, got {name!r}")
    if isinstance(dim, bool) or not isinstance(dim, int) or not 1 <= dim <= MAX_DIMENSION:
        raise LedgerError(f"embedder {name!r}: 'dimension' must be an integer from 1 to "
                          f"{MAX_DIMENSION}, got {dim!r}")
    if not callable(getattr(embedder, "embed", None)):
        raise LedgerError(f"embedder {name!r} has no embed(texts) method")
    return f"{name}/{dim}"


def weight(embedder: Embedder) -> float:
    """The lexical channel's weight in the fusion for ``embedder``: its
    ``weight`` attribute when it has one (a number from 0 to 1, measured
    for that model), else ``ALPHA``. ``LedgerError`` for any other value."""
    w = getattr(embedder, "weight", None)
    if w is None:
        return ALPHA
    if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0.0 <= w <= 1.0:
        raise LedgerError(f"embedder {getattr(embedder, 'name', embedder)!r}: 'weight' (the "
                          f"lexical channel's weight in the fusion) must be a number from 0 "
                          f"to 1, got {w!r}")
    return float(w)


def embed_text(text: str) -> str:
    """What of a row's searched text (``ledger.core.searchable.row_text``) is
    embedded: its first EMBED_CHARS code points."""
    return text[:EMBED_CHARS]


def text_hash(text: str) -> int:
    """The hash a stored vector carries of the text it was computed from
    (63 bits: a signed 64-bit integer in any store)."""
    return xxhash.xxh3_64_intdigest(text.encode("utf-8", "surrogatepass")) >> 1


def embed(embedder: Embedder, texts: Sequence[str]) -> list[list[float]]:
    """``embedder.embed(texts)``, checked: one vector per text, each of the
    embedder's dimension, every value a finite number, each normalised to
    unit length (a zero vector stays zero). ``LedgerError`` naming the
    embedder otherwise: its vectors are never stored unchecked."""
    name, dim = embedder.name, embedder.dimension
    try:
        got = embedder.embed(list(texts))
    except LedgerError:
        raise
    except Exception as exc:
        raise LedgerError(f"embedder {name!r} failed on {len(texts)} texts: "
                          f"{type(exc).__name__}: {exc}") from exc
    out: list[list[float]] = []
    try:
        vectors = list(got)
    except TypeError:
        raise LedgerError(f"embedder {name!r} returned {type(got).__name__}, not a list of "
                          "vectors") from None
    if len(vectors) != len(texts):
        raise LedgerError(f"embedder {name!r} returned {len(vectors)} vectors for "
                          f"{len(texts)} texts")
    for i, v in enumerate(vectors):
        try:
            row = [float(x) for x in v]
        except (TypeError, ValueError):
            raise LedgerError(f"embedder {name!r}: vector {i} is not a sequence of "
                              "numbers") from None
        if len(row) != dim:
            raise LedgerError(f"embedder {name!r}: vector {i} has {len(row)} values, its "
                              f"dimension is {dim}")
        norm = math.sqrt(math.fsum(x * x for x in row))
        if not math.isfinite(norm):
            raise LedgerError(f"embedder {name!r}: vector {i} holds a value that is not "
                              "a finite number")
        out.append([x / norm for x in row] if norm > 0 else row)
    return out


def fuse(lexical: Sequence[Candidate], vector: Sequence[Candidate],
         alpha: float | None = None) -> list[Candidate]:
    """One ranking of both channels (module doc): ``lexical`` as an index
    ranks it (scores > 0), ``vector`` the VECTOR_TOP best rows by cosine
    (best first, the rows of the same range). A row's fused score is
    ``alpha * lex / max(lex) + (1 - alpha) * (cos - low) / (high - low)``,
    ``low`` the cosine of the worst of ``vector``, clipped at 0; rows that
    score 0 are dropped; ties go to the newer row. The hints of the lexical
    candidates win (the index saw those rows last). ``alpha`` None: ALPHA."""
    alpha = ALPHA if alpha is None else alpha
    best_lex = max((c[2] for c in lexical), default=0.0)
    scores: dict[int, float] = {}
    meta: dict[int, tuple[int, tuple[int, int]]] = {}
    for seq, win, score, hint in lexical:
        if best_lex > 0:
            scores[seq] = alpha * score / best_lex
            meta[seq] = (win, hint)
    if vector:
        top = max(c[2] for c in vector)
        low = min(c[2] for c in vector)
        span = top - low
        for seq, win, cos, hint in vector:
            part = (cos - low) / span if span > 0 else (1.0 if len(vector) == 1 else 0.0)
            if part <= 0:
                continue
            scores[seq] = scores.get(seq, 0.0) + (1 - alpha) * part
            meta.setdefault(seq, (win, hint))
    out = [(seq, meta[seq][0], round(s, 6), meta[seq][1]) for seq, s in scores.items() if s > 0]
    out.sort(key=lambda c: (-c[2], -c[0]))
    return out
