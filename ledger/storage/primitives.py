"""The primitives a row engine implements (PostgreSQL, Citus, memory), and
nothing else of the rewrites: what ``reject``, ``truncate_after``,
``purge_before_floor`` and ``rebaseline`` do with them is written once, in
``ledger.storage.rewrites``.

- ``head()``: the workspace's state (``RowState``: next seq, epoch, window,
  floor); WorkspaceNotFound when nothing was written;
- ``read(first, last)``: the stored rows with ``first <= seq <= last``, in
  seq order, verified (HistoryDamaged for a row whose bytes fail);
- ``replace(expect, edits, put_aside, hold=0)``: one atomic change under a
  condition. When the epoch or the floor is no longer ``expect``'s (a
  rewrite, or an append of a manual reset, came first) it raises
  ``Conflict`` and changes nothing; otherwise each
  ``Edit`` takes out the rows of its seq range and puts its own rows in
  their place (same seqs), the rows taken out and not put back go to the
  workspace's quarantine under the reason ``put_aside`` (None: they are
  deleted for good), and batch ids of which no row is left are forgotten.
  The head after it (``settle``): next seq past every row left and never
  lower (seqs are identities: a row taken out keeps its seq in quarantine),
  the floor never moves back (a floor whose row is gone stays: fail closed)
  and is at least ``hold`` (repair: a damaged row that may have been a
  reset), the window is the newest boundary left or that floor, and a new
  epoch when any row changed -- always for an empty ``edits`` (a
  rebaseline, or a repair of the head alone).

The memory engine also implements ``StoredRows`` (its rows as stored, the
boundary lookup, its quarantine listed, a lock under which reads are one
consistent view): with those, ``ledger.storage.rowspace`` gives it every
other ``WorkspaceEngine`` operation (reads, pages, verify, repair, backup).

Every change of a stored row is a new epoch, so the rows a rule read are
the rows it changes unless ``replace`` refuses; the rule then reads again
(``ledger.storage.rewrites``). A plain append in between is no conflict: it
only adds rows after those read (a truncation then takes them too, as if it
came after them), and a rewrite need not wait for a quiet moment on a busy
workspace. An append that moves the floor is one: the rules refuse by the
floor (truncate must keep it). The quarantine
operations (``put_quarantine``, ``clean_quarantine``) and ``stat`` are the
engine protocol's (``ledger.storage.engine``).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

from ledger.core.rows import Row
from ledger.core.windows import Boundary
from ledger.storage.engine import QuarantineEntry
from ledger.storage.seqpages import RowState

LAST_SEQ = 2**63 - 1  # an Edit's ``last`` for "to the end of the log"


@dataclass(frozen=True)
class Put:
    """A row an ``Edit`` puts in, with its boundary reason (None: it opens no
    window)."""

    row: Row
    boundary: str | None = None


@dataclass(frozen=True)
class Edit:
    """Take out the rows with ``first <= seq <= last``; put ``rows`` (seq
    order, inside that range) in their place."""

    first: int
    last: int
    rows: tuple[Put, ...] = ()
    restore_floor: bool = False  # a rewind that may undo a clear (``settle``)


@dataclass(frozen=True)
class Replaced:
    """What a ``replace`` did: the epoch after it, the rows it took out and
    did not put back (and their bytes, with newlines), and the quarantine
    entries they went to (empty when deleted or none)."""

    epoch: int
    removed_rows: int
    removed_bytes: int
    put_aside: list[str]


@dataclass(frozen=True)
class StoredRow:
    """A row as a row engine stores it, unverified: its seq, batch id,
    boundary reason (None: it opens no window) and bytes (no newline)."""

    seq: int
    batch_id: str
    boundary: str | None
    raw: bytes


class RowPrimitives(Protocol):
    """One workspace of a row engine as the rewrite rules see it (module doc)."""

    @property
    def workspace(self) -> str: ...

    def head(self) -> RowState: ...

    def read(self, first: int, last: int) -> list[Row]: ...

    def replace(self, expect: RowState, edits: Sequence[Edit],
                put_aside: str | None, hold: int = 0) -> Replaced: ...


class StoredRows(RowPrimitives, Protocol):
    """A row engine whose reads under ``locked()`` are one consistent view
    (module doc)."""

    def exists(self) -> bool: ...

    def locked(self) -> AbstractContextManager[None]: ...

    def stored(self, first: int, last: int, limit: int = LAST_SEQ) -> list[StoredRow]:
        """The rows with ``first <= seq <= last`` as stored, in seq order, at
        most ``limit``."""
        ...

    def boundary_before(self, seq: int) -> int:
        """The seq of the newest boundary row before ``seq`` (0: none)."""
        ...

    def list_quarantine(self) -> list[QuarantineEntry]: ...


def holds(head: RowState, expect: RowState) -> bool:
    """Whether ``replace``'s condition holds: the epoch and floor are ``expect``'s."""
    return head.epoch == expect.epoch and head.floor == expect.floor


def settle(
    old: RowState, window_left: Boundary | None, floor_left: Boundary | None, hold: int = 0,
    edits: Sequence[Edit] = (),
) -> tuple[Boundary | None, Boundary | None]:
    """(window, floor) after a ``replace`` of ``edits``, given the newest
    boundary row and the newest manual reset row left, and the seq the floor
    holds at least (module doc). An edit with ``restore_floor`` (a rewind the
    caller allowed to undo a clear) lets the floor move back to the newest
    manual reset left."""
    floor = None if any(e.restore_floor for e in edits) else old.floor
    for b in (floor_left, Boundary(hold, hold, 0, "manual") if hold > 0 else None):
        if b is not None and (floor is None or b.seq > floor.seq):
            floor = b
    window = window_left
    if floor is not None and (window is None or window.seq < floor.seq):
        window = floor
    return window, floor
