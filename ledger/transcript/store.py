"""The store: the workspaces of one root, each a ``History`` over an engine.

The root names the engine (``ledger.storage.registry``). A path is the file
engine (``ledger.storage.files``), the embedded default: one directory per
workspace. A ``postgresql://`` or ``postgres://`` URL is the PostgreSQL
engine (``ledger.storage.postgres``): one database holds every workspace.
``memory://`` is the in-memory reference engine (``ledger.storage.memory``):
nothing durable, a store of its own (``memory://NAME``: one store shared by
every ``Store`` of the process naming it). Any other URL is refused
(``InvalidRoot``, naming the forms accepted).
"""

from __future__ import annotations

import os

from ledger.core import semantic
from ledger.core.forks import Branch
from ledger.core.ids import validate_workspace
from ledger.core.redact import redact
from ledger.core.semantic import Embedder
from ledger.storage.engine import Engine, EngineSpec, check_options
from ledger.storage.registry import engine_for
from ledger.transcript.history import History

__all__ = ["Store"]


class Store:
    """A transcript store rooted at ``root`` (DESIGN.md 12).

    ``segment_bytes``: the active segment is rewritten by rename while below
    this size; then a batch starts a new segment. ``durability``: ``full``
    (default), ``normal`` or ``off``, as in docs/explanation/durability.md (the memory engine has
    nothing to make durable). ``embedder``: a ``ledger.core.semantic.Embedder``
    that adds the semantic channel to ranked search (docs/how-to/semantic.md);
    None (the default): ranked search is lexical only. Nothing is created
    until the first write.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        segment_bytes: int = 64 << 10,
        lock_timeout: float = 10.0,
        retrieval: bool = True,
        durability: str = "full",
        max_row_bytes: int = 64 << 20,
        embedder: Embedder | None = None,
    ) -> None:
        self.root = os.fspath(root)
        self.segment_bytes = segment_bytes
        self.lock_timeout = lock_timeout
        self.retrieval = retrieval
        self.durability = durability
        self.max_row_bytes = max_row_bytes
        if embedder is not None:
            semantic.key(embedder)  # LedgerError for one without a name or dimension
            semantic.weight(embedder)  # and for a fusion weight out of range
        self.embedder = embedder
        check_options(self)
        self.spec: EngineSpec = engine_for(self.root)
        self.spec.check(self)
        self.engine: Engine = self.spec.open(self)

    def __repr__(self) -> str:
        return f"Store({redact(self.root)!r})"

    def history(self, workspace: str) -> History:
        """The history of ``workspace`` (InvalidWorkspace for a bad id); nothing
        is created until the first write."""
        ws = validate_workspace(workspace)
        return History(self, ws, self.engine.open(ws))

    def workspaces(self) -> list[str]:
        """Ids of the histories under the root, sorted."""
        return self.engine.workspaces()

    def branches(self, workspace: str) -> list[Branch]:
        """The forks made of ``workspace`` (each workspace whose origin names
        it), oldest first; empty when there are none. A fork outlives its
        source: deleting the source leaves its forks and their origins."""
        ws = validate_workspace(workspace)
        found = []
        for name in self.engine.workspaces():
            if name == ws:
                continue
            origin = self.engine.open(name).origin()
            if origin is not None and origin.source == ws:
                found.append(origin)
        return sorted(found, key=lambda b: (b.created, b.workspace))

    def delete(self, workspace: str) -> bool:
        """Delete a workspace's history (a tombstone first, so a concurrent
        writer fails instead of recreating it). False when there was none."""
        return self.engine.delete(workspace)
