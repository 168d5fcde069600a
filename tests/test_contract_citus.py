"""The engine contract (tests/engine_contract.py) on a Citus cluster, unchanged.

Each case gets a new Citus database (the ``citus_root`` fixture in
tests/conftest.py): the store creates its tables there distributed by
workspace, so every case runs through the coordinator on the workers' shards.
"""

from __future__ import annotations

from typing import Any

import pytest

from ledger import Store
from tests.engine_contract import EngineContract, MakeStore


@pytest.fixture
def make_store(citus_root: str) -> MakeStore:
    def make(**options: Any) -> Store:
        return Store(citus_root, **options)

    return make


class TestCitusEngine(EngineContract):
    """Every case of the contract, on Citus."""
