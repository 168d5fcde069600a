"""What the file engine's helpers -- rewrite and its transaction, repair,
bulk loads, loads, forks, merges, retention -- use of a workspace:
``FileHistory``, a typed protocol. They are handed the workspace that calls them
(``workspace.FileWorkspace``, which imports them) and see only this, so none
of them imports the workspace class or reaches into its private members.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ledger.core.errors import Unsupported
from ledger.core.format import files as ffmt
from ledger.core.windows import Boundary
from ledger.storage.engine import StoreOptions
from ledger.storage.files.appended import Appends
from ledger.storage.files.index import BoundaryIndex
from ledger.storage.files.receipt import WriterReceipt
from ledger.storage.files.state import State
from ledger.storage.files.watch import Scan


@runtime_checkable
class FileHistory(Protocol):
    """One file-engine workspace as its helpers use it (module doc)."""

    workspace: str
    path: str  # the workspace directory
    index: BoundaryIndex  # the boundary index (INDEX)
    appended: Appends  # this process's last appends (``appended``): the recall catch-up's

    @property
    def store(self) -> StoreOptions: ...

    def exists(self) -> bool: ...

    def require(self) -> None:
        """WorkspaceNotFound unless the directory exists."""
        ...

    def state(
        self, receipt_file: WriterReceipt | None = None, scan: Scan | None = None
    ) -> State:
        """The validated state now (under the lock)."""
        ...

    def read_state(self) -> State:
        """``state()`` for a reader under the shared lock (the state this
        process's last append published, while nothing changed since)."""
        ...

    def snapshot(self) -> State: ...

    def settle_interrupted(self) -> None:
        """Settle a rewrite a crash interrupted before anyone reads."""
        ...

    def refuse_damaged_floor(self, st: State) -> None: ...

    def rebaseline(self) -> int: ...

    def ensure_dir(self) -> None: ...

    def ensure_format(self, present: bool | None = None) -> None: ...

    def arrive_locked(self, bid: str, receipt_file: WriterReceipt | None = None) -> State:
        """A writer's arrival under the exclusive lock: settle what a crash
        left, check FORMAT, return the state."""
        ...

    def publish_pending(
        self, st: State, bid: str | None, receipt_file: WriterReceipt | None = None
    ) -> None:
        """Step 1 of every mutation: the pending receipt (else CommitFailed)."""
        ...

    def rebaseline_locked(self, st: State, *, force_new_epoch: bool,
                          rewritten: bool = False) -> int: ...

    def publish_state(
        self, window: Boundary | None, floor: Boundary | None, next_seq: int,
        old_epoch: int, *, layout_of: ffmt.Receipt | None = None,
    ) -> int: ...

    def forget_derived(self) -> None:
        """Drop the states derived from the segments (they changed)."""
        ...


def unwrap(history: object) -> FileHistory:
    """The file workspace ``history`` is (a file workspace) or holds (a
    transcript-level ``History`` keeps its engine as ``.engine``). A workspace
    of another engine is refused with ``Unsupported``: the file engine's own
    operations (``bulk_load``, ...) need a path root."""
    if isinstance(history, FileHistory):
        return history
    engine = getattr(history, "engine", None)
    if isinstance(engine, FileHistory):
        return engine
    held = type(engine if engine is not None else history).__name__
    raise Unsupported(
        f"{history!r} is stored by {held}, not the file engine: this operation is the file "
        "engine's (open the store at a directory path)"
    )
