"""What the PostgreSQL engine's helpers -- the page reader, the rewrite
primitive with backup and stat, verify and repair -- use of a workspace:
``PgHandle``, a typed protocol (with the rewrite primitives, which the
shared repair uses). ``workspace.PgWorkspace`` imports them and
hands itself over; they see only this, so none imports the workspace class.
"""

from __future__ import annotations

from typing import Any, Protocol

from ledger.storage.engine import StoreOptions
from ledger.storage.postgres.connect import Database
from ledger.storage.postgres.vectors import PgVectors
from ledger.storage.primitives import RowPrimitives
from ledger.storage.seqpages import RowState


class PgHandle(RowPrimitives, Protocol):
    """One workspace of the PostgreSQL engine as its helpers use it."""

    workspace: str
    db: Database  # the database's pool; ``db.where`` names it in messages
    store: StoreOptions

    @property
    def key(self) -> str:
        """The key the rows are stored under: the id, but for a fork made on
        Citus (``keys.py``)."""
        ...

    @property
    def link(self) -> str | None:
        """How a statement reads the rows shared with a source
        (``lineage.rows_sql``)."""
        ...

    def vector_backend(self) -> PgVectors:
        """The semantic channel's vectors of this workspace (``vectors.py``)."""
        ...

    def exists(self) -> bool: ...

    def require(self) -> None:
        """WorkspaceNotFound unless something was written here."""
        ...

    def head_in(self, conn: Any, lock: bool = False) -> RowState | None:
        """The head row read on ``conn`` (``lock``: ``FOR UPDATE``, the writer
        lock until the transaction ends); None when the workspace has none."""
        ...
