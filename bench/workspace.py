"""The directory of a file-engine workspace, for the benches that stat or
read its segments themselves."""

from __future__ import annotations

from ledger.storage.files.reads import WorkspaceBase
from ledger.transcript.history import History


def workspace_dir(h: History) -> str:
    """``h``'s directory; ``TypeError`` when ``h`` is not on the file engine."""
    engine = h.engine
    if not isinstance(engine, WorkspaceBase):
        raise TypeError(f"workspace {h.workspace!r} is not on the file engine")
    return engine.path
