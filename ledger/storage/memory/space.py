"""The data of the in-memory engine, and what its helpers see of a workspace:
a root (``MemoryRoot``: its workspaces and the one lock every operation
takes), a workspace's rows and head (``Space`` of ``Stored`` rows), a
quarantine entry (``Quarantined``), and ``MemHandle``, the typed protocol the
page reader and verify/repair are handed (``workspace.MemWorkspace`` imports
them; they never import it).
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from ledger.core import rules
from ledger.core.errors import LockTimeout
from ledger.core.ranking import Query
from ledger.core.rows import now_ms
from ledger.core.windows import Boundary
from ledger.storage.engine import Candidate, StoreOptions
from ledger.storage.seqpages import RowState, boundary

# A quarantine entry: (ms since the epoch, seq or None, why, the bytes).
Quarantined = tuple[int, int | None, str, bytes]


class RecallIndex(Protocol):
    """A workspace's ranked-search index (``recall.Recall``)."""

    def refresh(self, rows: Sequence[Stored], epoch: int, floor: int = 0) -> None: ...

    def candidates(self, query: Query, after: int, high: int,
                   window: int | None) -> list[Candidate]: ...


@dataclass(frozen=True)
class Stored:
    """One stored row: its bytes (no newline), decoded dict, batch id and
    boundary reason (None: not a boundary)."""

    seq: int
    line: bytes
    data: dict[str, Any]
    batch_id: str
    boundary: str | None = None


@dataclass
class Space:
    """One workspace's rows and head (module doc)."""

    epoch: int
    rows: list[Stored] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)  # rows' seqs, for bisect
    bounds: list[int] = field(default_factory=list)  # seqs of the boundary rows
    next_seq: int = 1
    window: Boundary | None = None
    floor: Boundary | None = None
    batches: dict[str, tuple[int, int]] = field(default_factory=dict)  # id -> (first seq, n)
    created_ms: int = field(default_factory=now_ms)
    recall: RecallIndex | None = None  # the ranked-search index, made by the first ranked search

    def state(self) -> RowState:
        return RowState(self.next_seq, self.epoch, self.window, self.floor)

    def add(self, rows: Iterable[Stored]) -> None:
        """Append rows (in seq order, after every row here)."""
        for r in rows:
            self.rows.append(r)
            self.seqs.append(r.seq)
            if r.boundary is not None:
                self.bounds.append(r.seq)

    def replace(self, rows: list[Stored]) -> None:
        """Swap in a rewritten list (a new object: streams over the old one see it)."""
        self.rows = rows
        self.seqs = [r.seq for r in rows]
        self.bounds = [r.seq for r in rows if r.boundary is not None]
        self.batches = {}
        for r in rows:
            got = r.data.get("batch")
            b: dict[str, Any] = got if isinstance(got, dict) else {}
            if b.get("i") == 0 or r.batch_id not in self.batches:
                self.batches[r.batch_id] = (r.seq, 0)
            first, n = self.batches[r.batch_id]
            self.batches[r.batch_id] = (first, n + 1)

    def index_of(self, seq: int) -> int | None:
        i = bisect.bisect_left(self.seqs, seq)
        return i if i < len(self.seqs) and self.seqs[i] == seq else None

    def recompute(self, next_seq: int) -> None:
        """Window and floor from the boundary rows, and a new epoch (a rewrite)."""
        window = next((r for r in reversed(self.rows) if r.boundary is not None), None)
        floor = next((r for r in reversed(self.rows) if r.boundary == "manual"), None)
        self.window = boundary(window.seq, window.boundary) if window is not None else None
        self.floor = boundary(floor.seq, "manual") if floor is not None else None
        self.next_seq = next_seq
        self.epoch = rules.new_epoch(self.epoch)


def stored_row(line: bytes, data: dict[str, Any], batch_id: str, reason: str | None) -> Stored:
    raw = line[:-1] if line.endswith(b"\n") else line
    return Stored(int(data["seq"]), raw, data, batch_id, reason)


class MemoryRoot:
    """The workspaces of one root and the lock every operation on them takes."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.lock = threading.RLock()
        self.spaces: dict[str, Space] = {}
        self.quarantine: dict[str, list[Quarantined]] = {}

    @contextmanager
    def locked(self, timeout: float, workspace: str) -> Iterator[None]:
        got = self.lock.acquire(timeout=timeout) if timeout > 0 else self.lock.acquire(False)
        if not got:
            raise LockTimeout(
                f"workspace {workspace!r}: lock not acquired within {timeout:g} s ({self.label}); "
                "another writer holds it -- retry, or raise Store(lock_timeout=...)"
            )
        try:
            yield
        finally:
            self.lock.release()


class MemHandle(Protocol):
    """One workspace of a memory root as the engine's helpers use it."""

    workspace: str
    root: MemoryRoot

    @property
    def store(self) -> StoreOptions: ...

    def exists(self) -> bool: ...

    def locked(self) -> AbstractContextManager[None]: ...

    def space(self) -> Space:
        """The workspace's data (under the lock); WorkspaceNotFound when none."""
        ...

    def quarantine(self) -> list[Quarantined]:
        """Its quarantine entries (under the lock)."""
        ...
