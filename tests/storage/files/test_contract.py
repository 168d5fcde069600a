"""The engine contract (tests/helpers/engine_contract.py) against the file engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ledger import Store
from tests.helpers.engine_contract import RANKED_SEARCH, EngineContract, MakeStore


@pytest.fixture
def make_store(tmp_path: Path) -> MakeStore:
    def make(**options: Any) -> Store:
        options.setdefault("durability", "off")  # durability is not what these check
        return Store(tmp_path / "store", **options)

    return make


class TestFileEngine(EngineContract):
    """Every case of the contract, on files."""

    capabilities = frozenset({RANKED_SEARCH})
