"""The engine interface: exactly what a storage engine provides to the
transcript logic above it (``ledger.transcript``).

An engine stores the workspaces of one root. For each workspace it provides:

- a writer lock, and ``append_batch``: one batch committed atomically, its seqs
  assigned gap-free under that lock, optionally conditional
  (``expect_next_seq``, ``expect_window``, ``expect_epoch``) or idempotent (a caller's batch id
  answers a retry with the original seqs) -- ``ledger.core.batches``;
- reads: every row after a seq, streaming; one row; the rows of the active
  window through the boundary projection (O(window), not O(history));
- ``snapshot``: next seq, epoch, the newest boundary (window) and the newest
  manual reset (floor); for a workspace never written, next seq 1, epoch 0,
  no window and no floor, without creating anything;
- ``pages``: bounded pages for ``session_history`` (positions, what a cursor
  binds to, carry-over of cursors across moves that change no byte): the
  engine hands its ``PageReader`` to the caller's ``PageUse``;
- rewrites that change stored rows -- ``reject``, ``truncate_after``,
  ``purge_before_floor``, ``rebaseline``, ``rewind`` -- each a transaction
  that bumps the epoch (and only those: a plain append never does);
- ``fork``: a new workspace of the same root holding the rows up to a seq
  byte for byte and an origin event, all or nothing, cheap (files: hard
  links; memory: shared rows; PostgreSQL: a reference to the source's rows;
  Citus: a server-side copy); ``origin``;
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

Results are typed, defined once: the rewrites return
``ledger.core.rules.RejectResult`` / ``TruncateResult`` / ``PurgeResult``,
``backup`` a ``BackupResult`` and ``stat`` a ``StatReport`` (below); each has
``to_dict()``, the JSON document the CLI prints.

Each engine registers an ``EngineSpec`` (below) with
``ledger.storage.registry``, which ``Store`` asks for the engine a root names.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

from ledger.core.batches import AppendResult, PendingBatch
from ledger.core.bounds import Budget, Event, SkipSink
from ledger.core.checks import CheckReport, Loaded, Progress, QuarantineCleaned, RepairReport
from ledger.core.cursors import CursorData, Position
from ledger.core.errors import LedgerError
from ledger.core.forks import Branch, RewindResult
from ledger.core.rows import Row
from ledger.core.rules import FloorAt, PurgeResult, RejectResult, Result, TruncateResult
from ledger.core.windows import Boundary

if TYPE_CHECKING:
    from ledger.core.ranking import Query
    from ledger.core.semantic import Embedder

DURABILITY_LEVELS = ("full", "normal", "off")

S = TypeVar("S")  # an engine's page reader state (``PageReader``)
T_co = TypeVar("T_co", covariant=True)
T = TypeVar("T")


class BackupResult(Result, frozen=True, omit_defaults=True):
    """What ``backup`` wrote: the directory, how many files and bytes, and
    (file engine) the copy's epoch; ``to_dict()`` leaves ``epoch`` out when None."""

    workspace: str
    dest: str
    files: int
    bytes: int
    epoch: int | None = None


class QuarantineEntry(Result, frozen=True, omit_defaults=True):
    """One entry of a workspace's quarantine (``list_quarantine``): its name
    (as ``put_quarantine`` and the rewrites report it), when it was put aside
    (ms since the epoch), why, its size, and the seq of the row it held (None:
    bytes that never were a row, or an engine that does not say)."""

    name: str
    ts_ms: int
    reason: str
    bytes: int
    seq: int | None = None


class StatReceipt(Result, frozen=True):
    """The receipt as ``stat`` reads it (the row engines: always stable)."""

    status: str
    epoch: int | None
    next_seq: int | None
    stamps_match: bool


class SegmentStat(Result, frozen=True):
    """One segment file in ``stat`` (file engine)."""

    name: str
    bytes: int
    lines: int


class FileStat(Result, frozen=True):
    """What ``stat`` adds on the file engine: the receipt as read, the
    segments, and temp files a crash left behind."""

    receipt: StatReceipt
    segments: list[SegmentStat]
    stray_temp_files: list[str]


class RowStat(Result, frozen=True, omit_defaults=True):
    """What ``stat`` adds on a row engine: where the rows are, the database
    (PostgreSQL, its secrets redacted) or the root (memory)."""

    database: str | None = None
    root: str | None = None


class StatReport(Result, frozen=True, kw_only=True):
    """The ``tledger stat`` document of a workspace: what every engine
    reports, and ``detail``, what its engine adds (``FileStat``,
    ``RowStat``). ``to_dict()`` is one flat document (the CLI's, unchanged
    from 0.2): the engine's name (left out on files), the row engines' place,
    and the receipt and segments on every engine (the row engines': their
    head row as a stable receipt, no segments)."""

    workspace: str
    engine: str  # "files", "postgresql", "memory"
    epoch: int
    window: int
    windows: int  # window 0, then one per boundary
    next_seq: int
    floor: FloorAt | None
    rows: int
    bytes: int
    quarantine_bytes: int
    detail: FileStat | RowStat
    origin: Branch | None = None  # a fork's origin (History.stat fills it in)

    def to_dict(self) -> dict[str, object]:
        d = self.detail
        out: dict[str, object] = {"workspace": self.workspace}
        if isinstance(d, FileStat):
            receipt, segments = d.receipt, d.segments
        else:
            out["engine"] = self.engine
            out.update(d.to_dict())
            receipt = StatReceipt("stable", self.epoch, self.next_seq, True)
            segments = []
        out.update(receipt=receipt.to_dict(), epoch=self.epoch, window=self.window,
                   windows=self.windows, next_seq=self.next_seq,
                   floor=None if self.floor is None else self.floor.to_dict(),
                   segments=[s.to_dict() for s in segments], rows=self.rows,
                   bytes=self.bytes, quarantine_bytes=self.quarantine_bytes)
        if isinstance(d, FileStat):
            out["stray_temp_files"] = list(d.stray_temp_files)
        out["origin"] = None if self.origin is None else self.origin.to_dict()
        return out


class StoreOptions(Protocol):
    """The options a store opens its engine with (DESIGN.md 12)."""

    root: str
    segment_bytes: int
    lock_timeout: float
    retrieval: bool
    durability: str
    max_row_bytes: int
    embedder: Embedder | None  # the semantic channel's (ledger.core.semantic), else None


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


# A ranked candidate: (seq, window, score, hint), the hint being the
# ``(part, offset)`` where the index saw the row's line.
Candidate = tuple[int, int, float, tuple[int, int]]


@dataclass(frozen=True)
class Located:
    """What ``locate``, ``locate_at`` and ``seek`` report of row ``seq``; one of:

    - found: ``row``, the decoded row, whose line starts at ``(part, offset)``;
    - ``resume``: not reached within this call's bounds (a long line on the
      way); a read cursor goes on from there (``resume.char == SEEKING``);
    - neither: the row is an oversized or unreadable line, which the reader
      listed under ``skipped`` and retrieval never serves.

    A row that is not there raises ``NotFound``."""

    row: dict[str, object] | None = None
    part: int = 0
    offset: int = 0
    resume: Position | None = None


class PageScan(Protocol):
    """One call's bounded scan from a start position up to an end position.

    ``events()`` yields the lines met, in log order; the engine stops at the
    per-call bounds (``ledger.core.bounds``): it examines at most SCAN_ROWS
    lines and reads at most SCAN_BYTES, never decodes a line over LINE_CAP
    (it yields it as ``oversized``), and does not serve past the end position.
    Afterwards ``paused`` is where the next page starts (None: the end was
    reached); the caller may set it with ``pause_at`` (a full page) or to None
    (nothing further is wanted). ``prefilter``, when set, is a sound test on
    raw bytes: lines (or runs of lines) it says False for cannot match and are
    counted as examined without being decoded or yielded."""

    paused: Position | None
    prefilter: Callable[[bytes], bool] | None

    def events(self) -> Iterator[Event]: ...

    def pause_at(self, pos: Position) -> None:
        """Stop the scan; the next page starts at ``pos``."""
        ...


class PageReader(Protocol[S]):
    """Page access to one workspace for ``session_history`` (DESIGN.md 8).

    ``S`` is the engine's own state: what ``state()`` reads, under
    ``locked()`` (a shared lock, or one read-only snapshot), and what every
    later call of the page is given; call ``state`` and everything after it
    inside ``locked()``. Positions are the module doc's ``(part, offset)``:
    a ``Position`` (``ledger.core.cursors``), or the ``part`` and ``offset``
    of a line the reader reports (``Event``, ``Located``)."""

    def exists(self) -> bool: ...

    def locked(self) -> AbstractContextManager[None]: ...

    def state(self) -> S:
        """The workspace's state at the start (and again at the end) of a page;
        raises when it cannot be served (gone: CursorExpired; a damaged floor:
        Unavailable)."""
        ...

    def binding(self, st: S) -> str:
        """What a cursor binds to: a page is served from a cursor only while
        this is unchanged (else ``carry_over``)."""
        ...

    def floor_key(self, st: S) -> str:
        """The privacy floor as a cursor records it ("none" for none)."""
        ...

    def floor(self, st: S) -> Boundary | None: ...

    def window_seq(self, st: S) -> int:
        """The seq of the newest boundary, where the active window (the
        provider view) starts (0: none)."""
        ...

    def fresh_pos(self, st: S) -> Position:
        """Where a new query starts: just past the floor, else the log's start."""
        ...

    def fresh(self, st: S, action: str, digest: str) -> CursorData:
        """A new query's cursor data: from ``fresh_pos`` to the current end of
        the log, its high-water mark the newest seq."""
        ...

    def carry_over(self, data: CursorData, st: S) -> CursorData:
        """A cursor of another binding or floor moved to the current state when
        no stored byte changed (a merge of segments), else CursorExpired."""
        ...

    def after_floor(self, st: S, part: int, offset: int) -> bool:
        """Whether the line at ``(part, offset)`` lies after the privacy floor."""
        ...

    def scan(self, st: S, start: Position, end: Position) -> PageScan: ...

    def window_start(self, st: S, window: int) -> Position:
        """Where window ``window`` (a retrievable one) starts, else NotFound."""
        ...

    def window_of(self, st: S, part: int, offset: int) -> int:
        """The name of the window holding the line at ``(part, offset)``."""
        ...

    def locate(self, st: S, seq: int, result: SkipSink) -> Located:
        """Row ``seq`` (``Located``), looked up in at most a bounded read."""
        ...

    def seek(self, st: S, pos: Position, seq: int, result: SkipSink) -> Located:
        """Row ``seq`` again, for a read cursor still seeking it from ``pos``."""
        ...

    def prepare_ranked(self) -> None:
        """Bring the recall index up to the log before ``locked()``, for an
        engine that writes it outside the page's snapshot (else nothing)."""
        ...

    def ranked(
        self, st: S, query: Query, after: int, high: int, window: int | None
    ) -> list[Candidate]:
        """Ranked candidates for rows in ``(after, high]`` (of ``window`` when
        given), best first, from the engine's recall index, brought up to
        date with the log first."""
        ...

    def read_order(self, seqs: list[int]) -> None:
        """The order the page will read candidates back in when it is not one
        ``ranked`` list (the fused ranking of several phrasings): an engine
        that fetches ahead follows it (else nothing)."""
        ...

    def similar(
        self, st: S, text: str, after: int, high: int, window: int | None
    ) -> list[Candidate]:
        """The semantic channel's candidates for the query ``text``: the rows
        in ``(after, high]`` (of ``window`` when given) most similar to it
        (at most ``ledger.core.semantic.VECTOR_TOP``, best first, the score a
        cosine), from the engine's vector projection (``ledger.storage.
        vectors``), brought up to date with the recall index first; call
        after ``ranked``. Empty without a store embedder."""
        ...

    def locate_at(
        self, st: S, seq: int, hint: tuple[int, int], result: SkipSink, budget: Budget
    ) -> Located:
        """``locate`` for a ranked candidate: row ``seq`` read where the index
        saw it (``hint``) when it is still there, else as ``locate``. Every
        byte read counts against ``budget``, the whole call's (SCAN_BYTES,
        SCAN_ROWS: ``ledger.core.bounds``): a row that would not fit is not
        read (``Located(resume=...)``: the page ends there)."""
        ...


class PageUse(Protocol[T_co]):
    """What ``WorkspaceEngine.pages`` hands its page reader to: a function of
    a ``PageReader`` of any state type ``S`` (it only passes the states on),
    whose result does not depend on ``S``."""

    def __call__(self, reader: PageReader[S], /) -> T_co: ...


class WorkspaceHandle:
    """One workspace of a store: the store's options and the workspace id.
    The base of ``History`` and of the row engines' workspaces; the repr
    names the class and the workspace."""

    def __init__(self, store: StoreOptions, workspace: str) -> None:
        self.store = store
        self.workspace = workspace

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.workspace!r})"


class WorkspaceEngine(Protocol):
    """One workspace's storage (module doc)."""

    workspace: str

    def exists(self) -> bool: ...

    def require(self) -> None: ...

    def snapshot(self) -> Snapshot: ...

    def append_batch(self, batch: PendingBatch) -> AppendResult: ...

    def rows(self, after_seq: int | None = None) -> Iterator[Row]: ...

    def get(self, seq: int) -> Row | None: ...

    def window_rows(self) -> list[Row]:
        """The active window's rows, made for this call: no other holder of
        them (no cache), so the caller may change them; ``History``'s
        provider view serves an orphan result's row as text in place."""
        ...

    def window_state(self) -> tuple[list[Row], Snapshot]:
        """``window_rows`` and the state they were read under, in one read
        (one lock, or one statement): nothing was written between the two.
        The rows are the caller's, as ``window_rows``'s."""
        ...

    def pages(self, use: PageUse[T]) -> T:
        """``use`` of this workspace's page reader (``PageReader[S]``, ``S``
        the engine's own state type), for ``session_history``."""
        ...

    def reject(self, seq_or_seqs: int | Iterable[int]) -> RejectResult: ...

    def truncate_after(self, seq: int) -> TruncateResult: ...

    def purge_before_floor(self) -> PurgeResult: ...

    def rebaseline(self) -> int: ...

    def rewind(self, to: int, expect_epoch: int | None = None,
               restore_cleared: bool = False) -> RewindResult:
        """Hide every row after ``to`` (``ledger.core.forks``): a rewrite,
        conditional on ``expect_epoch`` (EpochChanged) when given."""
        ...

    def fork(self, target: str, at: int | None = None) -> WorkspaceEngine:
        """Make workspace ``target`` of the same root a fork of this one at
        row ``at`` (None: the newest), all or nothing; returns it. The rows
        up to ``at`` are shared or copied byte for byte, never changed."""
        ...

    def origin(self) -> Branch | None:
        """Where this workspace was forked from (its fork event), else None."""
        ...

    def backup(self, dest: str) -> BackupResult: ...

    def stat(self) -> StatReport: ...

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

    def list_quarantine(self) -> list[QuarantineEntry]:
        """The quarantine's entries, oldest first (what rewrites, repairs and
        imports put aside); WorkspaceNotFound when nothing was written."""
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
    ``open`` builds it for a store (``ledger.core.redact`` hides the secrets
    of any root in messages), and ``durable`` is False when the rows die with
    the process."""

    name: str
    forms: str
    matches: Callable[[str], bool]
    open: Callable[[StoreOptions], Engine]
    check: Callable[[StoreOptions], None] = lambda options: None
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
