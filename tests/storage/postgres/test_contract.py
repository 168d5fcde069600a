"""The engine contract (tests/helpers/engine_contract.py) against PostgreSQL, unchanged.

The cases share one new database (on the throwaway server .ci/run starts),
dropped at the end of the module: every case works in workspaces of its own,
so a database per case (its creation and the store's tables) is not needed.
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
def shared_pg_root(pg_server: str) -> Iterator[str]:
    import psycopg

    from ledger.storage.postgres.connect import close_pools

    name = "t_contract_" + uuid.uuid4().hex[:8]
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
    root = pg_server.replace("/postgres?", f"/{name}?", 1)
    yield root
    close_pools(root)
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def make_store(shared_pg_root: str) -> MakeStore:
    def make(**options: Any) -> Store:
        return Store(shared_pg_root, **options)

    return make


@pytest.fixture
def corrupt() -> Corrupt:
    """Damage row ``seq``'s bytes in ``tl_rows`` (the contract's ``corrupt``)."""

    return damage_tl_row


class TestPostgresEngine(EngineContract):
    """Every case of the contract, on PostgreSQL."""

    capabilities = frozenset({RANKED_SEARCH})
