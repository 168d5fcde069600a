"""One workspace of the in-memory engine: its data (``Space``) and the
primitives (``ledger.storage.primitives``, ``ledger.storage.forking``);
everything else is ``ledger.storage.rowspace``'s. A workspace is a list of
stored rows in seq order, the head, the batch ids with their seqs and a
quarantine, under the lock of its root (``MemoryRoot``); an append extends
the list, ``replace`` swaps in a new one with a new epoch.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any

from ledger.core import rules
from ledger.core.batches import AppendResult, PendingBatch, check_expectations, refuse_on_empty
from ledger.core.checks import Loaded, QuarantineCleaned
from ledger.core.errors import Conflict, LedgerError, LockTimeout, WorkspaceNotFound
from ledger.core.forks import ForkRefused
from ledger.core.rows import Row, now_ms
from ledger.core.windows import Boundary
from ledger.storage.engine import QuarantineEntry, RowStat, StoreOptions, WorkspaceHandle
from ledger.storage.forking import FORK_BATCH_PREFIX, RowForks
from ledger.storage.primitives import LAST_SEQ, Edit, Replaced, StoredRow, holds, settle
from ledger.storage.rowrecall import Recall
from ledger.storage.rowspace import RowWorkspace
from ledger.storage.seqpages import RowState, boundary
from ledger.storage.vectors import HeldVectors


@dataclass
class Space:
    """One workspace's rows, head, batch ids and quarantine (module doc)."""

    epoch: int
    rows: list[StoredRow] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)  # the rows' seqs, for bisect
    bounds: list[int] = field(default_factory=list)  # the seqs of the boundary rows
    next_seq: int = 1
    window: Boundary | None = None
    floor: Boundary | None = None
    batches: dict[str, tuple[int, int]] = field(default_factory=dict)  # id -> (first seq, n)
    quarantine: list[tuple[QuarantineEntry, bytes]] = field(default_factory=list)
    put_aside: int = 0  # quarantine entries ever made (their names' numbers)
    recall: Recall | None = None
    vectors: HeldVectors | None = None  # the semantic channel's (ledger.storage.vectors)

    def state(self) -> RowState:
        return RowState(self.next_seq, self.epoch, self.window, self.floor)

    def add(self, rows: list[StoredRow], dicts: Sequence[dict[str, Any]]) -> None:
        """Append one batch's rows (after every row here); ``dicts`` are their
        decoded rows, which say the boundaries."""
        bounds = rules.batch_bounds(dicts, [(r.seq, 0) for r in rows])
        self.window, self.floor = rules.fold(self.window, self.floor, bounds)
        reasons = {b.seq: b.reason for b in bounds}
        for r in rows:
            r = StoredRow(r.seq, r.batch_id, reasons.get(r.seq), r.raw)
            self.rows.append(r)
            self.seqs.append(r.seq)
            if r.boundary is not None:
                self.bounds.append(r.seq)
        self.batches[rows[0].batch_id] = (rows[0].seq, len(rows))
        self.next_seq = max(self.next_seq, rows[-1].seq + 1)

    def swap(self, rows: list[StoredRow]) -> None:
        """Swap in a rewritten list, the batch index rebuilt from its runs."""
        self.rows, self.seqs = rows, [r.seq for r in rows]
        self.bounds = [r.seq for r in rows if r.boundary is not None]
        self.batches = {}
        for i, r in enumerate(rows):
            if i and rows[i - 1].batch_id == r.batch_id:
                first, n = self.batches[r.batch_id]
                self.batches[r.batch_id] = (first, n + 1)
            else:
                self.batches[r.batch_id] = (r.seq, 1)

    def newest(self) -> tuple[Boundary | None, Boundary | None]:
        """The newest boundary row and the newest manual one (the floor)."""
        last = next((r for r in reversed(self.rows) if r.boundary is not None), None)
        manual = next((r.seq for r in reversed(self.rows) if r.boundary == "manual"), None)
        return (boundary(last.seq, last.boundary) if last else None), boundary(manual, "manual")

    def put(self, seq: int | None, reason: str, data: bytes) -> str:
        self.put_aside += 1
        name = f"memory-quarantine:{self.put_aside}"
        self.quarantine.append((QuarantineEntry(name, now_ms(), reason, len(data), seq), data))
        return name


class MemoryRoot:
    """The workspaces of one root and the lock every operation on them takes."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.lock = threading.RLock()
        self.spaces: dict[str, Space] = {}

    @contextmanager
    def locked(self, timeout: float, workspace: str) -> Iterator[None]:
        if not (self.lock.acquire(timeout=timeout) if timeout > 0 else self.lock.acquire(False)):
            raise LockTimeout(
                f"workspace {workspace!r}: lock not acquired within {timeout:g} s ({self.label}); "
                "another writer holds it -- retry, or raise Store(lock_timeout=...)")
        try:
            yield
        finally:
            self.lock.release()


class MemWorkspace(RowWorkspace, RowForks, WorkspaceHandle):
    """One workspace of a memory root: the primitives (module doc)."""

    engine, tag, quarantine_name = "memory", "m", "the memory quarantine"

    def __init__(self, root: MemoryRoot, store: StoreOptions, workspace: str) -> None:
        super().__init__(store, workspace)
        self.root = root

    def locked(self) -> AbstractContextManager[None]:
        return self.root.locked(self.store.lock_timeout, self.workspace)

    def space(self) -> Space:
        """The workspace's data (under the lock); WorkspaceNotFound when none."""
        sp = self.root.spaces.get(self.workspace)
        if sp is None:
            raise WorkspaceNotFound(f"workspace {self.workspace!r} has no history in "
                                    f"{self.root.label} (nothing has been written to it)")
        return sp

    def exists(self) -> bool:
        return self.workspace in self.root.spaces

    def head(self) -> RowState:
        with self.locked():
            return self.space().state()

    def stored(self, first: int, last: int, limit: int = LAST_SEQ) -> list[StoredRow]:
        with self.locked():
            sp = self.space()
            lo = bisect.bisect_left(sp.seqs, first)
            return sp.rows[lo:min(bisect.bisect_right(sp.seqs, last), lo + limit)]

    def boundary_before(self, seq: int) -> int:
        with self.locked():
            bounds = self.space().bounds
            i = bisect.bisect_left(bounds, seq)
            return bounds[i - 1] if i else 0

    def recall_index(self) -> Recall:
        sp = self.space()
        sp.recall = sp.recall or Recall()
        return sp.recall

    def vector_backend(self) -> HeldVectors:
        sp = self.space()
        sp.vectors = sp.vectors or HeldVectors()
        return sp.vectors

    def where(self) -> RowStat:
        return RowStat(root=self.root.label)

    def append_batch(self, batch: PendingBatch) -> AppendResult:
        bid = batch.batch_id
        with self.locked():
            sp = self.root.spaces.get(self.workspace)
            fresh = sp is None  # the empty state: epoch 0 to a reader
            if sp is None:
                refuse_on_empty(self.workspace, batch)
                sp = Space(rules.new_epoch())  # kept only if the batch commits
            if batch.caller_id and bid in sp.batches:
                first, n = sp.batches[bid]
                return AppendResult(list(range(first, first + n)), sp.epoch,
                                    sp.state().window_seq, bid)
            check_expectations(self.workspace, batch, sp.next_seq, sp.state().window_seq,
                               0 if fresh else sp.epoch)
            dicts, lines = batch.encode(sp.next_seq, self.store.max_row_bytes)
            sp.add([StoredRow(int(d["seq"]), bid, None, line.removesuffix(b"\n"))
                    for d, line in zip(dicts, lines, strict=True)], dicts)
            self.root.spaces[self.workspace] = sp
            return AppendResult([int(d["seq"]) for d in dicts], sp.epoch,
                                sp.state().window_seq, bid)

    def load_rows(self, rows: Iterable[Row]) -> Loaded:
        """Take verified rows byte for byte as this new workspace (``tledger
        migrate``'s destination side); all or nothing."""
        sp, run = Space(rules.new_epoch()), list[Row]()
        count = total = 0
        for row in [*rows, None]:
            if run and (row is None or row.batch.get("id") != run[-1].batch.get("id")):
                bid = str(run[0].batch.get("id", ""))
                sp.add([StoredRow(r.seq, bid, None, r.line) for r in run], [r.data for r in run])
                run = []
            if row is not None:
                run.append(row)
                count, total = count + 1, total + len(row.line) + 1
        with self.locked():
            if self.workspace in self.root.spaces:
                raise LedgerError(f"workspace {self.workspace!r} already exists in "
                                  f"{self.root.label}; nothing was written")
            self.root.spaces[self.workspace] = sp
        return Loaded(count, total)

    def replace(self, expect: RowState, edits: Sequence[Edit], put_aside: str | None,
                hold: int = 0) -> Replaced:
        with self.locked():
            sp = self.space()
            if not holds(sp.state(), expect):
                raise Conflict(f"workspace {self.workspace!r} changed; read it again")
            new, gone, changed = list(sp.rows), list[StoredRow](), not edits
            for e in sorted(edits, key=lambda e: e.first, reverse=True):  # indexes stay valid
                lo, hi = bisect.bisect_left(sp.seqs, e.first), bisect.bisect_right(sp.seqs, e.last)
                back = {p.row.seq for p in e.rows}
                gone += [r for r in new[lo:hi] if r.seq not in back]
                new[lo:hi] = [StoredRow(p.row.seq, str(p.row.batch.get("id", "")), p.boundary,
                                        p.row.line) for p in e.rows]
                changed = changed or lo < hi or bool(e.rows)
            for r in gone:
                if put_aside is not None:
                    sp.put(r.seq, put_aside, r.raw)
            if changed:
                sp.swap(new)
                sp.window, sp.floor = settle(expect, *sp.newest(), hold, edits=edits)
                sp.next_seq = max(sp.next_seq, new[-1].seq + 1 if new else 1)
                sp.epoch = rules.new_epoch(sp.epoch)
                sp.vectors = None  # no vector of a row a rewrite removed outlives it
            return Replaced(sp.epoch, len(gone), sum(len(r.raw) + 1 for r in gone),
                            [f"memory quarantine ({len(gone)} rows)"]
                            if put_aside is not None and gone else [])

    # --- the primitives of the fork (ledger.storage.forking) ------------------------

    @property
    def max_row_bytes(self) -> int:
        return self.store.max_row_bytes

    def open_sibling(self, workspace: str) -> MemWorkspace:
        return MemWorkspace(self.root, self.store, workspace)

    def copy_prefix(self, target: str, expect: RowState, at: int, event: Row) -> None:
        """The fork shares the source's stored rows (immutable) up to ``at``."""
        with self.locked():
            sp = self.space()
            if not holds(sp.state(), expect):
                raise Conflict(f"workspace {self.workspace!r} changed; read it again")
            if target in self.root.spaces:
                raise ForkRefused(f"workspace {target!r} already exists in {self.root.label}; "
                                  "a fork needs a new workspace id; nothing was forked")
            new = Space(rules.new_epoch())
            new.swap([*sp.rows[: bisect.bisect_right(sp.seqs, at)],
                      StoredRow(event.seq, str(event.batch.get("id", "")), None, event.line)])
            new.window, new.floor = new.newest()
            new.next_seq = event.seq + 1
            self.root.spaces[target] = new

    def origin_seqs(self) -> list[int]:
        with self.locked():
            return sorted(first for bid, (first, n) in self.space().batches.items()
                          if n == 1 and bid.startswith(FORK_BATCH_PREFIX))

    def list_quarantine(self) -> list[QuarantineEntry]:
        with self.locked():
            return [e for e, _ in self.space().quarantine]

    def put_quarantine(self, data: bytes, *, source: str, offset: int, reason: str) -> str:
        """Put bytes that never entered the log aside (an import's refused
        records); the same bytes from the same place are kept once."""
        why = f"{source} offset {offset}: {reason}"
        with self.locked():
            sp = self.space()
            return next((e.name for e, d in sp.quarantine if e.reason == why and d == data),
                        None) or sp.put(None, why, data)

    def clean_quarantine(self, older_than_s: float) -> QuarantineCleaned:
        cutoff = now_ms() - int(older_than_s * 1000)
        with self.locked():
            sp = self.space()
            gone = [e for e, _ in sp.quarantine if e.ts_ms < cutoff]
            sp.quarantine = [(e, d) for e, d in sp.quarantine if e.ts_ms >= cutoff]
        return QuarantineCleaned(len(gone), sum(e.bytes for e in gone))
