"""The engine interface: exactly what a storage engine provides to the
transcript logic above it (``ledger.transcript``).

An engine stores the workspaces of one root. For each workspace it provides:

- a writer lock, and ``append_batch``: one batch committed atomically, its seqs
  assigned gap-free under that lock, optionally conditional
  (``expect_next_seq``, ``expect_window``) or idempotent (a caller's batch id
  answers a retry with the original seqs) -- ``ledger.core.batches``;
- reads: every row after a seq, streaming; one row; the rows of the active
  window through the boundary projection (O(window), not O(history));
- ``snapshot``: next seq, epoch, the newest boundary (window) and the newest
  manual reset (floor); for a workspace never written, next seq 1, epoch 0,
  no window and no floor, without creating anything;
- ``reader``: bounded pages for ``session_history`` (positions, what a cursor
  binds to, carry-over of cursors across moves that change no byte);
- rewrites that change stored rows -- ``reject``, ``truncate_after``,
  ``purge_before_floor``, ``rebaseline`` -- each a transaction that bumps the
  epoch (and only those: a plain append never does);
- ``backup``;
- the engine operations of recovery (results: ``ledger.core.checks``):
  ``verify`` (read-only; findings with a severity, damage or notice),
  ``repair`` by a policy (what fails verification goes to the workspace's
  quarantine; a dry run writes nothing), ``load_rows`` (verified rows byte
  for byte as a new workspace, all or nothing: ``tledger migrate``),
  ``put_quarantine`` (bytes an import could not take) and
  ``clean_quarantine``;
- and per root: ``workspaces``, ``delete``.

Positions are ``(part, offset)`` pairs ordered as the log; each engine says
what a part and an offset are (the file engine: segment number and byte
offset; the row engines, PostgreSQL and memory: seq and byte offset in the
row, ``ledger.storage.seqpages``). Windows, floors, retrieval's rules, token
budgets, rollover, display, adapters and importers live above this
interface and never see a path; the rules an engine applies to rows (what a
rewrite touches and refuses, the boundary fold, epochs) are
``ledger.core.rules``.

Each engine registers an ``EngineSpec`` (below) with
``ledger.storage.registry``, which ``Store`` asks for the engine a root names.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from ledger.core.batches import AppendResult, PendingBatch
from ledger.core.bounds import SkipSink
from ledger.core.checks import CheckReport, Loaded, Progress, QuarantineCleaned, RepairReport
from ledger.core.cursors import CursorData, Position
from ledger.core.errors import LedgerError
from ledger.core.rows import Row
from ledger.core.windows import Boundary

DURABILITY_LEVELS = ("full", "normal", "off")


class StoreOptions(Protocol):
    """The options a store opens its engine with (DESIGN.md 12)."""

    root: str
    segment_bytes: int
    lock_timeout: float
    retrieval: bool
    durability: str
    max_row_bytes: int


class Snapshot(Protocol):
    """What a validated read of a workspace's state reports."""

    @property
    def next_seq(self) -> int: ...

    @property
    def epoch(self) -> int: ...

    @property
    def window(self) -> Boundary | None: ...

    @property
    def floor(self) -> Boundary | None: ...

    @property
    def window_seq(self) -> int: ...


class PageScan(Protocol):
    """One call's bounded scan: ``events()`` yields lines from the start
    position; afterwards ``paused`` is where the next page starts (None at
    the end). ``prefilter``, when set, rules out line runs that cannot match."""

    paused: Position | None
    prefilter: Any

    def events(self) -> Iterator[Any]: ...

    def pause_at(self, pos: Position) -> None: ...


class PageReader(Protocol):
    """Page access for ``session_history`` (DESIGN.md 8): call ``state`` and
    everything after it inside ``locked()``."""

    def exists(self) -> bool: ...

    def locked(self) -> AbstractContextManager[Any]: ...

    def state(self) -> Any: ...

    def binding(self, st: Any) -> str: ...

    def floor_key(self, st: Any) -> str: ...

    def floor(self, st: Any) -> Boundary | None: ...

    def fresh_pos(self, st: Any) -> Position: ...

    def fresh(self, st: Any, action: str, digest: str) -> CursorData: ...

    def carry_over(self, data: CursorData, st: Any) -> CursorData: ...

    def after_floor(self, st: Any, part: int, offset: int) -> bool: ...

    def scan(self, st: Any, start: Position, end: Position) -> PageScan: ...

    def window_start(self, st: Any, window: int) -> Position: ...

    def window_of(self, st: Any, part: int, offset: int) -> int: ...

    def locate(self, st: Any, seq: int, result: SkipSink) -> Any: ...

    def seek(self, st: Any, pos: Position, seq: int, result: SkipSink) -> Any: ...


class WorkspaceEngine(Protocol):
    """One workspace's storage (module doc)."""

    workspace: str

    def exists(self) -> bool: ...

    def require(self) -> None: ...

    def snapshot(self) -> Snapshot: ...

    def append_batch(self, batch: PendingBatch) -> AppendResult: ...

    def rows(self, after_seq: int | None = None) -> Iterator[Row]: ...

    def get(self, seq: int) -> Row | None: ...

    def window_rows(self) -> list[Row]: ...

    def reader(self) -> PageReader: ...

    def reject(self, seq_or_seqs: Any) -> Any: ...

    def truncate_after(self, seq: int) -> Any: ...

    def purge_before_floor(self) -> Any: ...

    def rebaseline(self) -> int: ...

    def backup(self, dest: str) -> Any: ...

    def stat(self) -> dict[str, Any]: ...

    def verify(self, progress: Progress | None = None) -> CheckReport:
        """Verify the workspace without writing anything: every row (or line)
        and what the engine derives from them (the boundaries, the head or
        receipt, the quarantine, the recall index). Damage fails ``check``;
        notices do not. ``progress`` gets (bytes done, bytes in all) where
        the engine can tell. WorkspaceNotFound when nothing was written."""
        ...

    def repair(self, policy: str = "salvage", dry_run: bool = False,
               progress: Progress | None = None) -> RepairReport:
        """Make the workspace consistent by ``policy`` (``ledger.core.checks.
        POLICIES``; RecoveryError for another): what fails verification goes
        to the quarantine, never lost; a floor that damage may hide stays
        (fail closed); a new epoch when anything changed. A healthy workspace
        is left as it is; a second repair changes nothing. With ``dry_run``
        nothing is written and the report says what would change; otherwise
        ``after`` is the check of the result."""
        ...

    def load_rows(self, rows: Iterable[Row]) -> Loaded:
        """Write ``rows`` (log order, each batch whole, verified) byte for byte
        as this workspace, which must not exist (LedgerError); all or
        nothing."""
        ...

    def put_quarantine(self, data: bytes, *, source: str, offset: int, reason: str) -> str:
        """Put bytes that never entered the log (an import's unreadable or
        refused records) in the workspace's quarantine; returns the entry's
        name. The same bytes from the same source and offset are kept once.
        The workspace must exist."""
        ...

    def clean_quarantine(self, older_than_s: float) -> QuarantineCleaned:
        """Remove quarantine entries put aside more than ``older_than_s``
        seconds ago."""
        ...


class Engine(Protocol):
    """The workspaces under one root."""

    def open(self, workspace: str) -> WorkspaceEngine: ...

    def workspaces(self) -> list[str]: ...

    def delete(self, workspace: str) -> bool: ...


# --- what an engine registers (``ledger.storage.registry``) ----------------------


@dataclass(frozen=True)
class EngineSpec:
    """An engine as the registry knows it: ``matches`` says whether a root
    names it, ``forms`` how such roots are written (for messages), ``check``
    refuses options it cannot honour (after the common ``check_options``),
    ``open`` builds it for a store, ``redact`` hides secrets in a root, and
    ``durable`` is False when the rows die with the process."""

    name: str
    forms: str
    matches: Callable[[str], bool]
    open: Callable[[StoreOptions], Engine]
    check: Callable[[StoreOptions], None] = lambda options: None
    redact: Callable[[str], str] = lambda root: root
    durable: bool = True


def check_options(options: StoreOptions) -> None:
    """The option checks every engine shares (DESIGN.md 12)."""
    if options.durability not in DURABILITY_LEVELS:
        raise LedgerError(
            f"durability must be one of {DURABILITY_LEVELS}, got {options.durability!r}"
        )
    if options.segment_bytes < 1:
        raise LedgerError("segment_bytes must be positive")
    if options.max_row_bytes < 64:
        raise LedgerError("max_row_bytes must be at least 64")
    t = options.lock_timeout
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t < math.inf:
        raise LedgerError(f"lock_timeout must be a finite number of seconds >= 0, got {t!r}")
