"""The engine contract (tests/helpers/engine_contract.py) against the in-memory
engine, unchanged.

Each case gets a root of its own, ``memory://<unique name>``: every
``make_store`` call of one case opens the same in-process store (as the
file engine's cases open the same directory), dropped after the case.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from ledger import Store
from ledger.storage.memory import discard
from tests.helpers.engine_contract import EngineContract, MakeStore


@pytest.fixture
def make_store() -> Iterator[MakeStore]:
    name = f"contract-{uuid.uuid4().hex}"

    def make(**options: Any) -> Store:
        return Store(f"memory://{name}", **options)

    yield make
    discard(name)


class TestMemoryEngine(EngineContract):
    """Every case of the contract, in memory."""

    capabilities = frozenset({"ranked_search"})  # the contract's RANKED_SEARCH: it has it
