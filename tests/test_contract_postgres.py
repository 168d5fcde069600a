"""The engine contract (tests/engine_contract.py) against PostgreSQL, unchanged.

Each case gets a new, empty database (the ``pg_root`` fixture in
tests/conftest.py) on the throwaway server .ci/run starts.
"""

from __future__ import annotations

from typing import Any

import pytest

from ledger import Store
from tests.engine_contract import EngineContract, MakeStore


@pytest.fixture
def make_store(pg_root: str) -> MakeStore:
    def make(**options: Any) -> Store:
        return Store(pg_root, **options)

    return make


class TestPostgresEngine(EngineContract):
    """Every case of the contract, on PostgreSQL."""
