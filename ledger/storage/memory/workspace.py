"""One workspace of the in-memory engine: its rows, the append, reads and
the rewrite primitives (``ledger.storage.engine.WorkspaceEngine``; the
rewrites over the primitives are ``ledger.storage.rewrites``).

A workspace (``Space``) is a list of stored rows in seq order, the head
(next seq, epoch, window, floor), the batch ids with their seqs, and a
quarantine. Every operation holds the root's lock. An append extends the
list; ``replace`` builds a new list and swaps it in with a new epoch (so a
stream over the old list sees a rewrite and says "read again", as the other
engines do).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager

from ledger.core import rules
from ledger.core.batches import AppendResult, PendingBatch, check_expectations, refuse_on_empty
from ledger.core.checks import CheckReport, Loaded, Progress, QuarantineCleaned, RepairReport
from ledger.core.errors import Conflict, HistoryDamaged, LedgerError, WorkspaceNotFound
from ledger.core.rows import Row, now_ms
from ledger.storage.copydir import write_workspace_dir
from ledger.storage.engine import (
    BackupResult,
    PageUse,
    StatReport,
    StoreOptions,
    T,
    WorkspaceHandle,
)
from ledger.storage.memory.space import MemoryRoot, Quarantined, Space, Stored, stored_row
from ledger.storage.primitives import Edit, Replaced, holds, settle
from ledger.storage.rewrites import RowRewrites
from ledger.storage.seqpages import RowState, boundary, decode_row


def _row(s: Stored, workspace: str) -> Row:
    """A reader's row: decoded afresh, as the other engines do, so nothing a
    caller does to it reaches the stored row (HistoryDamaged when its bytes
    fail verification)."""
    return decode_row(workspace, s.seq, s.line)


class MemWorkspace(RowRewrites, WorkspaceHandle):
    """One workspace of a memory root (module doc)."""

    def __init__(self, root: MemoryRoot, store: StoreOptions, workspace: str) -> None:
        super().__init__(store, workspace)
        self.root = root

    def locked(self) -> AbstractContextManager[None]:
        return self.root.locked(self.store.lock_timeout, self.workspace)

    def space(self) -> Space:
        """The workspace's data (call under the lock); WorkspaceNotFound when
        nothing was written."""
        sp = self.root.spaces.get(self.workspace)
        if sp is None:
            raise WorkspaceNotFound(
                f"workspace {self.workspace!r} has no history in {self.root.label} (nothing "
                "has been written to it)"
            )
        return sp

    # --- state and reads -----------------------------------------------------------

    def exists(self) -> bool:
        return self.workspace in self.root.spaces

    def require(self) -> None:
        with self.locked():
            self.space()

    def snapshot(self) -> RowState:
        with self.locked():
            sp = self.root.spaces.get(self.workspace)
            return sp.state() if sp is not None else RowState(1, 0, None, None)

    def rows(self, after_seq: int | None = None) -> Iterator[Row]:
        """Every row after ``after_seq``; a rewrite while streaming raises
        HistoryDamaged ("read again"), as on the other engines."""
        with self.locked():
            sp = self.space()
            rows, epoch = sp.rows, sp.epoch
            start = bisect.bisect_right(sp.seqs, after_seq) if after_seq else 0
        return self._stream(sp, rows, epoch, start)

    def _stream(self, sp: Space, rows: list[Stored], epoch: int, i: int) -> Iterator[Row]:
        while i < len(rows):  # appends extend the list; a rewrite replaces it
            if sp.rows is not rows or sp.epoch != epoch:
                raise HistoryDamaged(
                    f"workspace {self.workspace!r}: a rewrite ran while reading (new epoch); "
                    "read again"
                )
            yield _row(rows[i], self.workspace)
            i += 1

    def get(self, seq: int) -> Row | None:
        with self.locked():
            sp = self.space()
            i = sp.index_of(seq)
            return _row(sp.rows[i], self.workspace) if i is not None else None

    def window_rows(self) -> list[Row]:
        with self.locked():
            sp = self.space()
            start = bisect.bisect_right(sp.seqs, sp.window.seq) if sp.window is not None else 0
            return [_row(s, self.workspace) for s in sp.rows[start:]]

    def pages(self, use: PageUse[T]) -> T:
        from ledger.storage.memory.reader import MemReader

        return use(MemReader(self))

    # --- append ------------------------------------------------------------------

    def append_batch(self, batch: PendingBatch) -> AppendResult:
        bid = batch.batch_id
        with self.locked():
            sp = self.root.spaces.get(self.workspace)
            new = sp is None
            if sp is None:
                refuse_on_empty(self.workspace, batch)
                sp = Space(rules.new_epoch())  # kept only if the batch commits
            if batch.caller_id and bid in sp.batches:
                first, n = sp.batches[bid]
                return AppendResult(list(range(first, first + n)), sp.epoch,
                                    sp.state().window_seq, bid)
            check_expectations(self.workspace, batch, sp.next_seq, sp.state().window_seq)
            stored, lines = batch.encode(sp.next_seq, self.store.max_row_bytes)
            bounds = rules.batch_bounds(stored, [(int(r["seq"]), 0) for r in stored])
            sp.window, sp.floor = rules.fold(sp.window, sp.floor, bounds)
            reasons = {b.seq: b.reason for b in bounds}
            sp.add(stored_row(line, row, bid, reasons.get(int(row["seq"])))
                   for row, line in zip(stored, lines, strict=True))
            sp.batches[bid] = (sp.next_seq, len(lines))
            sp.next_seq += len(lines)
            if new:
                self.root.spaces[self.workspace] = sp
            return AppendResult([int(r["seq"]) for r in stored], sp.epoch,
                                sp.state().window_seq, bid)

    def load_rows(self, rows: Iterable[Row]) -> Loaded:
        """Take verified rows byte for byte as this new workspace (``tledger
        migrate``'s destination side); all or nothing."""
        count = total = 0
        sp = Space(rules.new_epoch())
        run: list[Row] = []

        def flush() -> None:
            bounds = rules.batch_bounds([r.data for r in run], [(r.seq, 0) for r in run])
            sp.window, sp.floor = rules.fold(sp.window, sp.floor, bounds)
            reasons = {b.seq: b.reason for b in bounds}
            bid = str(run[0].batch.get("id", ""))
            sp.add(stored_row(r.line, r.data, bid, reasons.get(r.seq)) for r in run)
            sp.batches[bid] = (run[0].seq, len(run))
            run.clear()

        for row in rows:
            if run and row.batch.get("id") != run[-1].batch.get("id"):
                flush()
            run.append(row)
            count += 1
            total += len(row.line) + 1
        if run:
            flush()
        sp.next_seq = (sp.seqs[-1] if sp.seqs else 0) + 1
        with self.locked():
            if self.workspace in self.root.spaces:
                raise LedgerError(f"workspace {self.workspace!r} already exists in "
                                  f"{self.root.label}; nothing was written")
            self.root.spaces[self.workspace] = sp
        return Loaded(count, total)

    # --- the primitives of the rewrites (ledger.storage.rewrites) --------------------

    def head(self) -> RowState:
        with self.locked():
            return self.space().state()

    def read(self, first: int, last: int) -> list[Row]:
        with self.locked():
            sp = self.space()
            lo, hi = bisect.bisect_left(sp.seqs, first), bisect.bisect_right(sp.seqs, last)
            return [_row(s, self.workspace) for s in sp.rows[lo:hi]]

    def replace(self, expect: RowState, edits: Sequence[Edit],
                put_aside: str | None) -> Replaced:
        with self.locked():
            sp = self.space()
            if not holds(sp.state(), expect):
                raise Conflict(f"workspace {self.workspace!r} changed; read it again")
            new = list(sp.rows)
            gone: list[Stored] = []
            changed = False
            for e in sorted(edits, key=lambda e: e.first, reverse=True):  # indexes stay valid
                lo = bisect.bisect_left(sp.seqs, e.first)
                hi = bisect.bisect_right(sp.seqs, e.last)
                gone += new[lo:hi]
                new[lo:hi] = [stored_row(p.row.line, p.row.data, str(p.row.batch.get("id", "")),
                                      p.boundary) for p in e.rows]
                changed = changed or lo < hi or bool(e.rows)
            if put_aside is not None and gone:
                ts = now_ms()
                self.quarantine().extend((ts, r.seq, put_aside, r.line) for r in gone)
            if changed or not edits:
                sp.replace(new)
                last = next((r for r in reversed(new) if r.boundary is not None), None)
                manual = next((r for r in reversed(new) if r.boundary == "manual"), None)
                sp.window, sp.floor = settle(
                    expect, boundary(last.seq, last.boundary) if last else None,
                    boundary(manual.seq, "manual") if manual else None)
                sp.epoch = rules.new_epoch(sp.epoch)
            return Replaced(sp.epoch, len(gone), sum(len(r.line) + 1 for r in gone),
                            [f"memory quarantine ({len(gone)} rows)"]
                            if put_aside is not None and gone else [])

    # --- verify and repair (verify.py) ----------------------------------------------

    def verify(self, progress: Progress | None = None) -> CheckReport:
        from ledger.storage.memory.verify import check

        return check(self)

    def repair(self, policy: str = "salvage", dry_run: bool = False,
               progress: Progress | None = None) -> RepairReport:
        from ledger.storage.memory.verify import repair

        return repair(self, policy, dry_run)

    # --- quarantine, backup, stat -----------------------------------------------------

    def quarantine(self) -> list[Quarantined]:
        """What rewrites and imports put aside here (call under the lock); it
        goes with the workspace's delete."""
        return self.root.quarantine.setdefault(self.workspace, [])

    def clean_quarantine(self, older_than_s: float) -> QuarantineCleaned:
        """Remove quarantine entries older than ``older_than_s`` seconds."""
        cutoff = now_ms() - int(older_than_s * 1000)
        with self.locked():
            self.space()
            q = self.quarantine()
            gone = [e for e in q if e[0] < cutoff]
            q[:] = [e for e in q if e[0] >= cutoff]
        return QuarantineCleaned(len(gone), sum(len(e[3]) for e in gone))

    def put_quarantine(self, data: bytes, *, source: str, offset: int, reason: str) -> str:
        """Put bytes that never entered the log aside (an import's refused
        records); the same bytes from the same place are kept once."""
        why = f"{source} offset {offset}: {reason}"
        with self.locked():
            self.space()
            q = self.quarantine()
            for i, e in enumerate(q):
                if e[2] == why and e[3] == data:
                    return f"memory-quarantine:{i + 1}"
            q.append((now_ms(), None, why, data))
            return f"memory-quarantine:{len(q)}"

    def backup(self, dest: str) -> BackupResult:
        """This workspace as a file-engine directory ``dest`` (new), from one
        consistent copy of its rows (``ledger.storage.copydir``)."""
        with self.locked():
            rows = list(self.space().rows)
        total = write_workspace_dir(dest, (r.line for r in rows))
        return BackupResult(self.workspace, dest, 2, total)

    def stat(self) -> StatReport:
        with self.locked():
            sp = self.space()
            return sp.state().stat(
                self.workspace, engine="memory", root=self.root.label,
                boundaries=len(sp.bounds), rows=len(sp.rows),
                nbytes=sum(len(r.line) + 1 for r in sp.rows),
                quarantine_bytes=sum(len(e[3]) for e in self.quarantine()))
