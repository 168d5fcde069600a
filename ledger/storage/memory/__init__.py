"""The in-memory reference engine: ``Store("memory://")``.

Every workspace is a list of rows in this process's memory, under one lock
per root (eventsourcing's in-memory recorder is the model). It keeps the
whole history contract -- atomic batches, gap-free seqs, conditional and
idempotent appends, windows and floors, rewrites with new epochs, cursors,
bounded and ranked ``session_history`` -- by implementing the primitives
of a row engine only (``ledger.storage.primitives``): everything else is
written once above them (``ledger.storage.rowspace``), and nothing is
durable: the rows die with the process. For fast tests and throwaway
sessions. ``memory://`` is a store of its own for each ``Store``;
``memory://NAME`` is one store shared by every ``Store`` of this process
that names it (``discard(NAME)`` drops it).
"""

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ledger.storage.memory.engine import MemoryEngine, discard

__all__ = ["MemoryEngine", "discard"]


def __getattr__(name: str) -> object:
    """The engine loads on first use: the registry imports ``spec`` (and with
    it this package) at every ``Store`` and ``tledger`` start, whatever the root."""
    if name not in __all__:
        raise AttributeError(f"module 'ledger.storage.memory' has no attribute {name!r}")
    value = getattr(import_module("ledger.storage.memory.engine"), name)
    globals()[name] = value
    return value
