"""The vector projection of ranked recall's semantic channel, shared by the
engines: the rows' vectors in this process, how they catch up with the
lexical recall index, and the record every engine stores a vector as.

What has a vector: exactly the rows the lexical index holds (its documents:
after the privacy floor, shown content, not the tool's echo), so both
channels see the same rows; each vector is the embedder's
(``ledger.core.semantic``) of the row's searched text. A ``VectorSet`` is
named by the embedder's key and the log state it was computed for (epoch
and floor, as the lexical index): another embedder, a rewrite or a new floor
starts a new set (vectors of rows whose text is unchanged are reused by the
text's hash, never recomputed); appends are caught up at the next ranked
search, from the lexical index's documents after the newest row the set
holds. Each engine persists the set its own way (files: a file beside the
index; memory: none; PostgreSQL: a table) as ``Record``s, each with a
checksum; a record that fails it, or a set for another state, is never used.

The query: a brute-force cosine over the vectors of the query's range (seq
in (after, high], of one window when asked), with numpy, the VECTOR_TOP best
returned; nothing at or before the floor is in the set, and the range is
applied again here, so even a stale set cannot return a row at or before it.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import xxhash

from ledger.core import semantic
from ledger.core.errors import LedgerError
from ledger.storage.engine import Candidate

if TYPE_CHECKING:
    from ledger.core.semantic import Embedder

# A record: seq, window, hint part, hint offset, text hash (five int64), the
# vector (float32 little endian), then the xxh3-64 of the set's nonce and
# all the bytes before (uint64).
_HEAD = struct.Struct("<qqqqq")
_CHECK = struct.Struct("<Q")
# (seq, window, hint): a document of the lexical index still without a vector
Doc = tuple[int, int, tuple[int, int]]
# rows -> {seq: searched text} for those still readable
TextsOf = Callable[[Sequence[Doc]], dict[int, str]]


def _numpy() -> Any:
    try:
        import numpy
    except ImportError:
        raise LedgerError("the semantic channel needs numpy: pip install "
                          "'transcript-ledger[semantic]'") from None
    return numpy


def record_size(dim: int) -> int:
    return _HEAD.size + 4 * dim + _CHECK.size


@dataclass(frozen=True)
class Record:
    """One row's vector as stored: its seq, window, the hint where the row
    was read (the lexical index's), the hash of the text embedded and the
    vector as float32 bytes."""

    seq: int
    window: int
    hint: tuple[int, int]
    th: int
    vec: bytes

    def encode(self, nonce: int) -> bytes:
        body = _HEAD.pack(self.seq, self.window, self.hint[0], self.hint[1], self.th) + self.vec
        return body + _CHECK.pack(_check(nonce, body))


def _check(nonce: int, body: bytes) -> int:
    x = xxhash.xxh3_64(_CHECK.pack(nonce))
    x.update(body)
    return x.intdigest()


class Damaged(Exception):
    """Stored vectors that fail their checksum or their layout."""


def decode_records(data: bytes, dim: int, nonce: int) -> tuple[list[Record], int]:
    """The records of ``data`` (a whole number of them; the bytes of a last
    partial record are left: their count is returned), each verified
    (``Damaged`` at the first that fails)."""
    size = record_size(dim)
    out = []
    whole = len(data) - len(data) % size
    for at in range(0, whole, size):
        chunk = data[at : at + size]
        body = chunk[: -_CHECK.size]
        if _CHECK.unpack_from(chunk, size - _CHECK.size)[0] != _check(nonce, body):
            raise Damaged(f"the vector record at byte {at} fails its checksum")
        seq, win, part, off, th = _HEAD.unpack_from(body)
        out.append(Record(seq, win, (part, off), th, body[_HEAD.size :]))
    return out, len(data) - whole


@dataclass
class VectorSet:
    """One workspace's vectors in this process (module doc): for the
    embedder ``key`` and the log state (``epoch``, ``floor``); ``upto`` is
    the newest seq whose vector it holds (every document of the lexical
    index up to it has one)."""

    key: str
    dim: int
    epoch: int
    floor: int
    nonce: int = 0
    upto: int = 0
    seqs: list[int] = field(default_factory=list)
    wins: list[int] = field(default_factory=list)
    hints: list[tuple[int, int]] = field(default_factory=list)
    ths: list[int] = field(default_factory=list)
    vecs: list[bytes] = field(default_factory=list)
    _mat: Any = None  # the vectors as one numpy matrix (rows of ``seqs``), made when asked
    _arrays: Any = None  # seqs and windows as numpy arrays

    def holds(self, key: str, epoch: int, floor: int) -> bool:
        return (self.key, self.epoch, self.floor) == (key, epoch, floor)

    def add(self, records: Iterable[Record]) -> None:
        """Records in seq order after ``upto`` (others: already held, skipped)."""
        for r in records:
            if r.seq <= self.upto or r.seq <= self.floor or len(r.vec) != 4 * self.dim:
                continue
            self.seqs.append(r.seq)
            self.wins.append(r.window)
            self.hints.append(r.hint)
            self.ths.append(r.th)
            self.vecs.append(r.vec)
            self.upto = r.seq
            self._mat = self._arrays = None

    def by_hash(self) -> dict[int, bytes]:
        """The vectors by the hash of their text: what a new set reuses."""
        return dict(zip(self.ths, self.vecs, strict=True))

    def records(self) -> list[Record]:
        return [Record(s, w, h, t, v) for s, w, h, t, v in
                zip(self.seqs, self.wins, self.hints, self.ths, self.vecs, strict=True)]

    def similar(self, query: Sequence[float], after: int, high: int,
                window: int | None, k: int = semantic.VECTOR_TOP) -> list[Candidate]:
        """The ``k`` rows of seq in (after, high] (and of ``window`` when
        given) most similar to ``query`` (a unit vector), best first, ties to
        the newer row: (seq, window, cosine, hint)."""
        np = _numpy()
        if not self.seqs:
            return []
        if self._mat is None:
            self._mat = np.frombuffer(b"".join(self.vecs), dtype="<f4").reshape(
                len(self.seqs), self.dim)
            self._arrays = (np.asarray(self.seqs, dtype=np.int64),
                            np.asarray(self.wins, dtype=np.int64))
        seqs, wins = self._arrays
        after = max(after, self.floor)  # nothing at or before the floor, whatever asked
        mask = (seqs > after) & (seqs <= high)
        if window is not None:
            mask &= wins == window
        idx = np.flatnonzero(mask)
        if not len(idx):
            return []
        q = np.asarray(query, dtype=np.float32)
        # Every row at once, then the range. einsum, not BLAS: one thread (a BLAS
        # gemv spreads over threads that stall for milliseconds on a loaded
        # machine) and the same sums in every process, so every engine ranks alike.
        cos = np.einsum("ij,j->i", self._mat, q)[idx]
        if len(idx) > k:
            part = np.argpartition(-cos, k - 1)[:k]
            kth = float(cos[part].min())
            part = np.flatnonzero(cos >= kth)  # every row tied with the k-th
        else:
            part = np.arange(len(idx))
        ranked = sorted(part.tolist(), key=lambda i: (-round(float(cos[i]), 6),
                                                      -int(seqs[idx[i]])))[:k]
        return [(int(seqs[idx[i]]), int(wins[idx[i]]), round(float(cos[i]), 6),
                 self.hints[int(idx[i])]) for i in ranked]


def new_set(embedder: Embedder, epoch: int, floor: int, nonce: int) -> VectorSet:
    return VectorSet(semantic.key(embedder), embedder.dimension, epoch, floor, nonce)


def catch_up(vs: VectorSet, embedder: Embedder, docs: Sequence[Doc], texts_of: TextsOf,
             reuse: dict[int, bytes], save: Callable[[list[Record]], None] | None = None
             ) -> None:
    """Give ``vs`` the vectors of ``docs`` (the lexical index's documents
    after ``vs.upto``, in seq order): the text of each (``texts_of``; a row no
    longer readable is left out), its vector from ``reuse`` by the text's
    hash, else from the embedder, SEMANTIC.BATCH rows at a time; each batch
    is ``save``d (persisted) and added, so a long catch-up keeps its
    progress."""
    np = _numpy()
    for at in range(0, len(docs), semantic.BATCH):
        chunk = docs[at : at + semantic.BATCH]
        texts = texts_of(chunk)
        todo: list[tuple[Doc, str, int]] = []
        for d in chunk:
            text = texts.get(d[0])
            if text is None:
                continue
            text = semantic.embed_text(text)
            todo.append((d, text, semantic.text_hash(text)))
        missing = list(dict.fromkeys(text for _, text, th in todo if th not in reuse))
        if missing:
            got = semantic.embed(embedder, missing)
            fresh = {semantic.text_hash(t): np.asarray(v, dtype="<f4").tobytes()
                     for t, v in zip(missing, got, strict=True)}
            reuse.update(fresh)
        records = [Record(d[0], d[1], d[2], th, reuse[th]) for d, _, th in todo]
        if save is not None and records:
            save(records)
        vs.add(records)
        if chunk:
            vs.upto = max(vs.upto, chunk[-1][0])


def query_vector(embedder: Embedder, text: str) -> list[float]:
    """The query's unit vector (the query text cut as rows are)."""
    return semantic.embed(embedder, [semantic.embed_text(text)])[0]


class Backend(Protocol):
    """Where an engine keeps a workspace's ``VectorSet`` (module doc)."""

    def load(self, key: str, dim: int) -> VectorSet | None:
        """The set kept, verified (None: none, or one that fails verification)."""
        ...

    def start(self, vs: VectorSet) -> None:
        """Keep ``vs`` (empty) in place of any set kept."""
        ...

    def save(self, vs: VectorSet, records: list[Record]) -> None:
        """Keep ``records``, just added to ``vs``, with it."""
        ...


class HeldVectors(Backend):
    """A set kept in this process only (the memory engine's)."""

    def __init__(self) -> None:
        self.vs: VectorSet | None = None

    def load(self, key: str, dim: int) -> VectorSet | None:
        return self.vs

    def start(self, vs: VectorSet) -> None:
        self.vs = vs

    def save(self, vs: VectorSet, records: list[Record]) -> None:
        """Nothing to write: ``vs`` is the set held."""


def texts_of_rows(read: Callable[[int], bytes | None]) -> TextsOf:
    """``TextsOf`` for a row engine: ``read(seq)`` gives a row's stored
    bytes (None: gone or over LINE_CAP)."""
    from ledger.core.format import rows as fmt
    from ledger.core.searchable import hidden, row_text

    def texts(docs: Sequence[Doc]) -> dict[int, str]:
        out = {}
        for seq, _win, _hint in docs:
            raw = read(seq)
            row = fmt.decode_line(raw) if raw is not None else None
            if row is not None and row.get("seq") == seq and not hidden(row):
                out[seq] = row_text(row)
        return out

    return texts


def ready(backend: Backend, embedder: Embedder, epoch: int, floor: int, lexical_upto: int,
          docs_after: Callable[[int], Sequence[Doc]], texts_of: TextsOf) -> VectorSet:
    """The workspace's vectors for the log state (``epoch``, ``floor``) whose
    lexical index holds rows up to ``lexical_upto``: the kept set when it is
    for this embedder and state, else a new one (reusing the old vectors by
    text hash), caught up with ``docs_after(upto)`` (module doc)."""
    k, dim = semantic.key(embedder), embedder.dimension
    vs = backend.load(k, dim)
    reuse: dict[int, bytes] = {}
    if vs is None or not vs.holds(k, epoch, floor) or vs.upto > lexical_upto or vs.dim != dim:
        if vs is not None and vs.key == k and vs.dim == dim:
            reuse = vs.by_hash()
        vs = new_set(embedder, epoch, floor, _nonce())
        backend.start(vs)
    docs = docs_after(vs.upto)
    if docs:
        held = vs

        def save(records: list[Record]) -> None:
            backend.save(held, records)

        catch_up(vs, embedder, docs, texts_of, reuse, save)
    return vs


def _nonce() -> int:
    return int.from_bytes(os.urandom(8), "little")
