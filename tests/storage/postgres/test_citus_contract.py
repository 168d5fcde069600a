"""The engine contract (tests/helpers/engine_contract.py) on a Citus cluster, unchanged.

The cases share one new schema (``citus_cluster.schema_root``), dropped at the
end of the module: the store creates its tables there distributed by
workspace, so every case runs through the coordinator on the workers' shards,
each in workspaces of its own.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from ledger import Store
from tests.contract.operations import Corrupt, damage_tl_row
from tests.helpers.engine_contract import RANKED_SEARCH, EngineContract, MakeStore


@pytest.fixture(scope="module")
def shared_citus_root(citus_cluster: Any) -> Iterator[str]:
    from ledger.storage.postgres.connect import close_pools

    name = "c_contract_" + uuid.uuid4().hex[:8]
    root = citus_cluster.schema_root(name)
    yield root
    close_pools(root)
    citus_cluster.drop_schema(name)


@pytest.fixture
def make_store(shared_citus_root: str) -> MakeStore:
    def make(**options: Any) -> Store:
        return Store(shared_citus_root, **options)

    return make


@pytest.fixture
def corrupt() -> Corrupt:
    """Damage row ``seq``'s bytes in ``tl_rows`` (the contract's ``corrupt``)."""

    return damage_tl_row


class TestCitusEngine(EngineContract):
    """Every case of the contract, on Citus."""

    capabilities = frozenset({RANKED_SEARCH})
