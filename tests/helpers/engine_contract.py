"""The engine contract: behaviour every storage engine must show through the
public surface (DESIGN.md 12), written once.

``EngineContract`` holds the cases (by subject in ``tests/contract/``). A
runner module subclasses it and provides the ``make_store`` fixture: a factory
``make_store(**options) -> Store`` on its engine's root for the case. Within
one case every call must give a Store on the same root (a case opens the same
workspace with other options, e.g. ``retrieval=False``). The root need not be
empty: cases use fresh workspace ids (the ``ws`` fixture), so a runner may
share one database or schema between cases, which keeps the server engines
fast. Options an engine has no use for (``segment_bytes``, ``durability``)
are accepted and ignored there, so the same case drives the file engine
across segment boundaries.

A runner also provides ``corrupt`` (``tests.contract.operations.Corrupt``):
damage a row's stored bytes as its engine holds them, for the cases of
``verify`` and ``repair`` on damaged input.

A runner declares what its engine can do beyond the common surface in
``capabilities`` (``tests.contract.support.CAPABILITIES``); a case that
depends on one asserts the engine's documented refusal where it is missing,
so nothing is skipped silently. Runners: ``tests/storage/files/test_contract.py``,
``tests/storage/postgres/test_contract.py``, ``tests/storage/postgres/test_citus_contract.py``.
"""

from __future__ import annotations

from tests.contract.appends import AppendContract
from tests.contract.bounds import BoundsContract
from tests.contract.cursors import CursorContract
from tests.contract.forks import ForkContract
from tests.contract.inputs import InputContract
from tests.contract.operations import OperationsContract
from tests.contract.retrieval import RetrievalContract
from tests.contract.rewrites import RewriteContract
from tests.contract.semantic import SemanticContract
from tests.contract.support import CAPABILITIES, RANKED_SEARCH, MakeStore
from tests.contract.windows import WindowContract
from tests.helpers import msg  # the one row helper, for modules that import it from here

__all__ = ["CAPABILITIES", "RANKED_SEARCH", "EngineContract", "MakeStore", "msg"]


class EngineContract(
    AppendContract, WindowContract, RewriteContract, CursorContract, RetrievalContract,
    BoundsContract, OperationsContract, InputContract, ForkContract, SemanticContract,
):
    """Subclass and provide ``make_store`` (module doc)."""
