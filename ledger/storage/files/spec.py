"""The file engine as the registry knows it: any root that is not a URL of
another engine is a directory path (the embedded default, imported with the
store: a process's first ``Store`` pays no import)."""

from __future__ import annotations

from ledger.storage.engine import Engine, EngineSpec, StoreOptions
from ledger.storage.files.engine import FileEngine


def _open(options: StoreOptions) -> Engine:
    return FileEngine(
        options.root, segment_bytes=options.segment_bytes, lock_timeout=options.lock_timeout,
        retrieval=options.retrieval, durability=options.durability,
        max_row_bytes=options.max_row_bytes, embedder=options.embedder,
    )


SPEC = EngineSpec(
    name="files",
    forms="a directory path (the file engine)",
    matches=lambda root: True,
    open=_open,
)
