"""Embedders for the semantic channel (``ledger.core.semantic.Embedder``)
that need no download.

``WordLlamaEmbedder``: wordllama (MIT) ``l2_supercat``, static token
embeddings pooled, its weights inside its wheel (256 dimensions; 128 and 64
are its Matryoshka truncations, as good per byte on the dev sets). It is an
optional dependency (``pip install 'transcript-ledger[semantic]'``); without
it, making one raises ``LedgerError`` saying so. It is loaded with
``disable_download=True`` from its package directory, so it never touches the
network. For production, docs/how-to/semantic.md shows fastembed (ONNX
models, fetched on first use) behind the same protocol.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ledger.core.errors import LedgerError

WORDLLAMA_DIMS = (64, 128, 256)


class WordLlamaEmbedder:
    """wordllama ``l2_supercat`` at ``dimension`` (64, 128 or 256)."""

    def __init__(self, dimension: int = 64) -> None:
        if dimension not in WORDLLAMA_DIMS:
            raise LedgerError(f"WordLlamaEmbedder: dimension must be one of {WORDLLAMA_DIMS}, "
                              f"got {dimension!r}")
        try:
            import wordllama  # type: ignore[import-untyped]
        except ImportError:
            raise LedgerError("WordLlamaEmbedder needs the optional package wordllama: "
                              "pip install 'transcript-ledger[semantic]'") from None
        where = Path(wordllama.__file__).parent
        try:
            self._model: Any = wordllama.WordLlama.load(
                cache_dir=where, disable_download=True, dim=256,
                trunc_dim=dimension if dimension < 256 else None)
        except Exception as exc:  # a broken install: its weights or tokenizer missing
            raise LedgerError(f"WordLlamaEmbedder: wordllama cannot load its own weights "
                              f"from {where} without a download: {exc}") from exc
        self.name = "wordllama l2_supercat"
        self.dimension = dimension

    def __repr__(self) -> str:
        return f"WordLlamaEmbedder({self.dimension})"

    def embed(self, texts: Sequence[str]) -> Sequence[Sequence[float]]:
        if not texts:
            return []
        vectors: Any = self._model.embed(list(texts), norm=True)
        return list(vectors.tolist())


def from_spec(spec: str) -> WordLlamaEmbedder:
    """An embedder named on a command line (``tledger --embedder``):
    ``wordllama`` (64 dimensions) or ``wordllama:DIM``; ``LedgerError`` for
    anything else."""
    name, _, dim = spec.partition(":")
    if name.strip().lower() != "wordllama":
        raise LedgerError(f"unknown embedder {spec!r}: use wordllama or wordllama:DIM "
                          f"(DIM one of {WORDLLAMA_DIMS}); a program passes any other "
                          "embedder to Store(embedder=...)")
    try:
        size = int(dim) if dim else 64
    except ValueError:
        raise LedgerError(f"embedder {spec!r}: DIM must be one of {WORDLLAMA_DIMS}") from None
    return WordLlamaEmbedder(size)
