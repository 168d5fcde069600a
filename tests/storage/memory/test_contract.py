"""The engine contract (tests/helpers/engine_contract.py) against the in-memory
engine, unchanged.

Each case gets a root of its own, ``memory://<unique name>``: every
``make_store`` call of one case opens the same in-process store (as the
file engine's cases open the same directory), dropped after the case.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from ledger import Store
from ledger.storage.memory import discard
from ledger.transcript.history import History
from tests.contract.operations import Corrupt, damaged
from tests.helpers.engine_contract import EngineContract, MakeStore


@pytest.fixture
def make_store() -> Iterator[MakeStore]:
    name = f"contract-{uuid.uuid4().hex}"

    def make(**options: Any) -> Store:
        return Store(f"memory://{name}", **options)

    yield make
    discard(name)


@pytest.fixture
def corrupt() -> Corrupt:
    """Damage row ``seq``'s stored bytes in memory (the contract's ``corrupt``)."""

    def damage(h: History, seq: int) -> None:
        rows = h.engine.root.spaces[h.workspace].rows  # type: ignore[attr-defined]
        i = next(i for i, s in enumerate(rows) if s.seq == seq)
        rows[i] = dataclasses.replace(rows[i], raw=damaged(rows[i].raw))

    return damage


class TestMemoryEngine(EngineContract):
    """Every case of the contract, in memory."""

    capabilities = frozenset({"ranked_search"})  # the contract's RANKED_SEARCH: it has it
