"""The engine contract (tests/helpers/engine_contract.py) against the file engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ledger import Store
from ledger.transcript.history import History
from tests.contract.operations import Corrupt, damaged
from tests.helpers.engine_contract import RANKED_SEARCH, EngineContract, MakeStore


@pytest.fixture
def make_store(tmp_path: Path) -> MakeStore:
    def make(**options: Any) -> Store:
        options.setdefault("durability", "off")  # durability is not what these check
        return Store(tmp_path / "store", **options)

    return make


@pytest.fixture
def corrupt() -> Corrupt:
    """Damage row ``seq``'s line in its segment, in place (the contract's ``corrupt``)."""

    def damage(h: History, seq: int) -> None:
        row = h.get(seq)
        assert row is not None
        for seg in sorted(Path(h.engine.path).glob("seg-*.jsonl")):  # type: ignore[attr-defined]
            data = seg.read_bytes()
            if row.line in data:
                seg.write_bytes(data.replace(row.line, damaged(row.line), 1))
                return
        raise AssertionError(f"row {seq} not found in any segment")

    return damage


class TestFileEngine(EngineContract):
    """Every case of the contract, on files."""

    capabilities = frozenset({RANKED_SEARCH})
