"""The in-memory engine as the registry knows it: ``memory://`` (a store of
its own) and ``memory://NAME`` (one store per name in this process); not
durable."""

from __future__ import annotations

from ledger.storage.engine import Engine, EngineSpec, StoreOptions
from ledger.storage.memory.roots import is_memory_root, root_name


def _check(options: StoreOptions) -> None:
    root_name(options.root)  # InvalidRoot for a malformed name


def _open(options: StoreOptions) -> Engine:
    from ledger.storage.memory.engine import MemoryEngine  # loaded when a memory root opens

    return MemoryEngine(options)


SPEC = EngineSpec(
    name="memory",
    forms="memory:// or memory://NAME (in this process's memory, not durable)",
    matches=is_memory_root,
    open=_open,
    check=_check,
    durable=False,
)
