"""A workspace of the file engine, and its write transaction: one batch appended under the
exclusive workspace lock (DESIGN.md 4 and 6).

1. *Arrive*: refuse a workspace being deleted, sweep dead writers' temp
   files, write or check FORMAT, settle an interrupted rewrite or merge, then
   read the receipt and the stamps of every segment. When the receipt is
   stable and every stamp matches, the state it records (next seq, epoch,
   window, floor) is trusted without reading the log. Otherwise the state is
   derived from the segments and the epoch will change (re-baseline).
2. Publish a **pending** receipt. If that fails nothing has changed:
   ``CommitFailed``.
3. Commit the batch by atomic rename (``segments.commit_file``): into the
   active segment while it is below the cap, else as a new segment.
4. Publish the **stable** receipt with the new stamps; the epoch is kept only
   when step 1 verified the receipt (a positively verified append). If that
   write fails, the append still succeeded: the pending receipt expires
   cursors, and the next writer re-baselines.

``FileWorkspace`` holds these steps; ``WorkspaceBase`` (``reads.py``) the
validation and reads they start from.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from ledger.core import rules
from ledger.core.batches import AppendResult, PendingBatch, check_expectations, refuse_on_empty
from ledger.core.checks import CheckReport, Loaded, Progress, QuarantineCleaned, RepairReport
from ledger.core.errors import CommitFailed, CommitUncertain, DeletePending
from ledger.core.forks import Branch, RewindResult, branch_of
from ledger.core.format import files as ffmt
from ledger.core.format import rows as fmt
from ledger.core.rows import Row
from ledger.core.rules import PurgeResult, RejectResult, TruncateResult
from ledger.core.windows import window_marker
from ledger.storage.engine import BackupResult, PageUse, QuarantineEntry, StatReport, T
from ledger.storage.files import appended, rewrite
from ledger.storage.files import segments as segs
from ledger.storage.files.backup import backup as backup_history
from ledger.storage.files.index import active_info
from ledger.storage.files.lock import acquire, locked, release
from ledger.storage.files.marker import recover_if_marked
from ledger.storage.files.merge import AUTO_MAX_MERGE_BYTES, AUTO_MIN_SEALED
from ledger.storage.files.merge import merge as merge_run
from ledger.storage.files.merge import plan as plan_merge
from ledger.storage.files.merge import runnable as runnable_merge
from ledger.storage.files.merge import settle as settle_merge
from ledger.storage.files.origin import origin_hint
from ledger.storage.files.publish import Publishing
from ledger.storage.files.reader import FileReader
from ledger.storage.files.receipt import WriterReceipt
from ledger.storage.files.retention import Quarantine, clean_quarantine
from ledger.storage.files.stat import stat_report
from ledger.storage.files.state import (
    State,
    extend_running,
    stable_receipt,
)

IDEMPOTENCY_SCAN_BYTES = 1 << 20


class FileWorkspace(Publishing):
    """One workspace of the file engine: ``WorkspaceBase`` validates and reads;
    this class adds the write path (module doc), rewrites, merges and backup."""

    def append_batch(self, batch: PendingBatch) -> AppendResult:
        """Commit ``batch`` under the exclusive lock (module doc); a refused
        conditional append to a missing workspace creates nothing."""
        bid = batch.batch_id
        try:
            exists = self.exists()
        except DeletePending as exc:
            raise CommitFailed(f"{exc}; nothing written", bid) from None
        if not exists and (
            batch.expect_next_seq not in (None, 1) or batch.expect_window not in (None, 0)
            or batch.expect_epoch not in (None, 0)
        ):
            refuse_on_empty(self.workspace, batch)
        try:
            if not exists:
                self.ensure_dir()
            lock = acquire(self.lock_path, self.workspace, self.store.lock_timeout, shared=False)
        except CommitFailed as exc:  # the lock file could not be opened: name the batch
            raise CommitFailed(str(exc), bid) from exc
        except OSError as exc:
            raise CommitFailed(
                f"workspace {self.workspace!r}: cannot open or lock the history: {exc}", bid
            ) from exc
        try:
            rf = WriterReceipt(self.path, self.receipt_path)  # held for the append (one open)
        except OSError as exc:
            release(lock)
            raise CommitFailed(
                f"workspace {self.workspace!r}: cannot open the receipt: {exc}; nothing "
                "was written", bid) from exc
        try:
            return self._append_locked(batch, rf)
        finally:
            rf.close()
            release(lock)

    def _append_locked(self, batch: PendingBatch, rf: WriterReceipt) -> AppendResult:
        bid = batch.batch_id
        try:
            st = self.arrive_locked(bid, rf)
        except OSError as exc:  # before anything is written: no descriptor, I/O error
            raise CommitFailed(
                f"workspace {self.workspace!r}: cannot read the history before writing: "
                f"{exc.strerror or exc}; nothing was written", bid) from exc
        if batch.caller_id:
            found = self._find_batch(st, bid)
            if found is not None:
                epoch = st.epoch
                if not st.verified:
                    # The batch landed but its stable receipt did not: publish one now.
                    try:
                        epoch = self.rebaseline_locked(st, force_new_epoch=True)
                    except OSError:
                        pass
                return AppendResult(found, epoch, st.window_seq, bid)
        check_expectations(self.workspace, batch, st.next_seq, st.window_seq, st.epoch)
        stored, lines = batch.encode(st.next_seq, self.store.max_row_bytes)
        result, sealed = self._commit(st, stored, lines, bid, rf)
        # A merge can only become due when this append sealed a segment.
        if sealed is not None and sealed is not st.sealed and len(sealed) >= AUTO_MIN_SEALED:
            self._auto_merge(sealed)
        return result

    def _auto_merge(self, sealed: list[tuple[int, ffmt.Stamp]]) -> None:
        """Keep file count logarithmic once a history has many segments. The
        append already succeeded; a failed merge is left for the next writer.
        A merge keeps the epoch (no content changes) but bumps the receipt's
        layout number; open cursors move with the rows (``ledger.storage.files.merge``).
        ``sealed`` is what the append's stable receipt records; only when a
        merge is due is the state validated again (the merge needs it)."""
        if not plan_merge(sealed, self.store.segment_bytes, AUTO_MAX_MERGE_BYTES):
            return  # nothing due (pure: no file is opened)
        st = self.state()
        if not st.verified:
            return
        run = runnable_merge(
            self.path, st.sealed, self.store.segment_bytes, AUTO_MAX_MERGE_BYTES
        )
        if not run:
            return
        try:
            merge_run(self, st, run)
        except (OSError, segs.CommitStepError):
            pass  # the pending receipt and MERGE marker tell the next writer

    def arrive_locked(self, bid: str, receipt_file: WriterReceipt | None = None) -> State:
        """What every writer does first, under the exclusive lock: refuse a
        workspace being deleted, clear dead writers' temp files, write or check
        FORMAT, settle an interrupted rewrite or merge, then validate."""
        if self.store.tombstoned(self.workspace):
            raise CommitFailed(f"workspace {self.workspace!r} is being deleted; nothing written")
        # One scan of the directory serves the sweeps below and the validation.
        scan = self.table.scan()
        segs.remove_stray_temps(self.path, scan.temps)
        self.ensure_format(scan.has_format)
        if scan.marked:
            try:
                recover_if_marked(self.path, self.store.durability)
                settle_merge(self.path, self.store.durability)
            except OSError as exc:
                raise CommitFailed(
                    f"workspace {self.workspace!r}: could not settle an interrupted rewrite or "
                    f"merge ({exc}); nothing was written",
                    bid,
                ) from exc
            scan = self.table.scan()
        return self.state(receipt_file, scan)

    def _commit(
        self, st: State, stored: list[dict[str, Any]], lines: list[bytes], bid: str,
        rf: WriterReceipt,
    ) -> tuple[AppendResult, list[tuple[int, ffmt.Stamp]] | None]:
        """Publish pending, commit by rename, publish stable. Returns the
        result and the sealed segments as the stable receipt now records them
        (None when that receipt could not be published)."""
        self.publish_pending(st, bid, rf)
        active = st.active
        cap = self.store.segment_bytes
        old = b""
        if active and st.active_stamp is not None and st.active_stamp.size < cap:
            try:
                old = segs.read_file(segs.segment_path(self.path, active))
            except OSError as exc:
                self._restore_receipt(st, rf)
                raise CommitFailed(
                    f"workspace {self.workspace!r}: could not read the active segment: {exc}", bid
                ) from exc
        if active and old and old.endswith(b"\n"):
            target, chunks, offset0, new_file = active, [old, *lines], len(old), False
        else:
            # Empty history, a full active segment, or one with a torn tail
            # (never write after damaged bytes): the batch starts a segment.
            target, chunks, offset0, new_file = active + 1, lines, 0, True
        try:
            new_stamp = segs.commit_file(
                self.path, ffmt.segment_name(target), chunks,
                durability=self.store.durability, new_file=new_file,
            )
        except segs.CommitStepError as exc:
            if not exc.after_rename:
                self._restore_receipt(st, rf)
                raise CommitFailed(
                    f"workspace {self.workspace!r}: commit failed at step '{exc.step}' "
                    f"({exc.cause}); the history is unchanged",
                    bid,
                ) from exc
            raise CommitUncertain(
                f"workspace {self.workspace!r}: commit failed at step '{exc.step}' "
                f"({exc.cause}); the batch may be visible -- retry with batch_id={bid!r}",
                bid,
            ) from exc
        seqs = [int(r["seq"]) for r in stored]
        window, floor = st.window, st.floor
        pos = offset0
        positions = []
        for line in lines:
            positions.append(pos)
            pos += len(line)
        batch_bounds = rules.batch_bounds(stored, [(target, p) for p in positions])
        window, floor = rules.fold(window, floor, batch_bounds)
        epoch = st.epoch if st.verified else rules.new_epoch(st.epoch)
        running = self._running
        seal = None
        if new_file and active and st.active_stamp is not None:
            seal = (active, st.active_stamp)
            sealed = [*st.sealed, seal]
            if running is not None and (running.number, running.stamp) == seal:
                self.index.remember(running)  # sealing it needs no scan
        else:
            sealed = st.sealed
        # The active segment's entry changes with a new file, new boundaries
        # or a new epoch; a sealed segment needs its entry too.
        moved = new_file or bool(batch_bounds) or epoch != st.epoch
        if seal is not None or moved:
            try:
                entries = [active_info(self.path, target, new_stamp, epoch,
                                       tuple(batch_bounds) if new_file else None, seqs[0])
                           ] if moved else []
                self.index.record(entries, seal)
            except OSError:
                pass  # a projection: readers scan or rebuild what is missing
        self._running = extend_running(
            running, target, new_stamp, st.active_stamp, new_file, seqs, batch_bounds
        )
        before = ffmt.ZERO_STAMP if new_file else st.active_stamp
        if before is not None and before.size == offset0:
            self.appended.add(appended.Step(target, before, new_stamp, offset0, lines,
                                            pos - offset0))
        layout = st.receipt.layout if st.receipt is not None else 0
        receipt = stable_receipt(
            epoch, seqs[-1] + 1, window, floor, layout, (target, new_stamp), sealed,
            self._sealed_digest(sealed),
        )
        try:
            data = rf.write(receipt)
        except OSError:
            # Accepted write, unpublished receipt: the pending receipt
            # expires cursors and the next writer re-baselines (DESIGN 6).
            return AppendResult(seqs, epoch, window_marker(window), bid), None
        self.own = (data, receipt, [*st.segments, target] if new_file else st.segments,
                    sealed, target, new_stamp)
        return AppendResult(seqs, epoch, window_marker(window), bid), sealed

    def _restore_receipt(self, st: State, rf: WriterReceipt) -> None:
        """After a failure before the rename nothing changed: put back the
        receipt that was there, so cursors stay valid. Best effort."""
        if st.receipt is None or not st.verified:
            return
        try:
            rf.write(st.receipt)
        except OSError:
            pass

    def _find_batch(self, st: State, batch_id: str) -> list[int] | None:
        """Seqs of the committed batch ``batch_id`` within the newest
        IDEMPOTENCY_SCAN_BYTES of the log (where a retry after
        CommitUncertain finds its batch), else None."""
        needle = fmt.encode_json(batch_id)
        remaining = IDEMPOTENCY_SCAN_BYTES
        sizes = {n: stamp.size for n, stamp in st.sealed}
        if st.active_stamp is not None:
            sizes[st.active] = st.active_stamp.size
        for number in reversed(st.segments):
            size = sizes.get(number, 0)
            window = min(size, remaining)
            path = segs.segment_path(self.path, number)
            fd = segs.open_regular(path)
            try:
                data = os.pread(fd, window, size - window)
            finally:
                os.close(fd)
            if needle in data:
                seqs = _batch_seqs(segs.split_lines(data), batch_id)
                if seqs is not None and len(seqs[0]) < seqs[1]:
                    # Only the batch's tail lies in the window (a batch bigger than
                    # it): a batch never spans segments, so read its segment whole.
                    seqs = _batch_seqs(segs.iter_lines(path), batch_id)
                if seqs is not None:
                    return seqs[0]
            remaining -= window
            if remaining <= 0:
                break
        return None

    def reject(self, seq_or_seqs: int | Iterable[int]) -> RejectResult:
        """Quarantine a persisted request (and the synthetic rows it owns) as an
        empty assistant record holding the original in ``meta.quarantine``."""
        return rewrite.reject(self, seq_or_seqs)

    def truncate_after(self, seq: int) -> TruncateResult:
        """Drop every row after ``seq`` (to quarantine), as a marked rewrite."""
        return rewrite.truncate_after(self, seq)

    def purge_before_floor(self) -> PurgeResult:
        """Really delete the rows at or before the newest manual reset."""
        return rewrite.purge_before_floor(self)

    def rewind(self, to: int, expect_epoch: int | None = None,
               restore_cleared: bool = False) -> RewindResult:
        return rewrite.rewind(self, to, expect_epoch, restore_cleared)

    def fork(self, target: str, at: int | None = None) -> FileWorkspace:
        """A fork of this workspace as ``target`` (``ledger.storage.files.fork``)."""
        from ledger.storage.files import fork

        dst = self.store.open(target)
        fork.fork(self, dst, at)
        return dst

    def origin(self) -> Branch | None:
        """The fork event the ORIGIN hint names, when that row is one."""
        seq = origin_hint(self.path)
        row = self.get(seq) if seq is not None else None
        return branch_of(self.workspace, row.data) if row is not None else None

    def backup(self, dest: str) -> BackupResult:
        """A consistent copy of this history, taken under the lock."""
        return backup_history(self, dest)

    def load_rows(self, rows: Iterable[Row]) -> Loaded:
        """Write verified rows byte for byte as this new workspace
        (``ledger.storage.files.load``; ``tledger migrate``)."""
        from ledger.storage.files.load import load_rows

        return load_rows(self, rows)

    # --- verify, repair, quarantine (check.py, repair.py, retention.py) -------------

    def verify(self, progress: Progress | None = None) -> CheckReport:
        """Read-only verification of the directory (``check.py``)."""
        from ledger.storage.files.check import check

        return check(self, progress=progress)

    def repair(self, policy: str = "salvage", dry_run: bool = False,
               progress: Progress | None = None) -> RepairReport:
        """Make the directory consistent by ``policy``, removed bytes to the
        quarantine (``repair.py``)."""
        from ledger.storage.files.repair import repair

        return repair(self, policy=policy, dry_run=dry_run, progress=progress)

    def clean_quarantine(self, older_than_s: float) -> QuarantineCleaned:
        """Remove quarantine entries older than ``older_than_s`` seconds."""
        return QuarantineCleaned(**clean_quarantine(self, older_than_s))

    def list_quarantine(self) -> list[QuarantineEntry]:
        """The entries the quarantine's manifest lists (``retention.py``)."""
        self.require()
        return [QuarantineEntry(e.entry, e.time, e.reason, e.length)
                for e in Quarantine(self.path).entries()]

    def put_quarantine(self, data: bytes, *, source: str, offset: int, reason: str) -> str:
        """Put bytes that never entered the log aside (an import's unreadable
        or refused records), under the workspace lock; returns the entry name.
        The same bytes from the same source and offset are stored once."""
        self.require()
        with locked(self.path, self.workspace, self.store.lock_timeout, shared=False):
            return Quarantine(self.path, durability=self.store.durability).put(
                data, source=source, offset=offset, reason=reason)

    def merge_segments(self) -> int:
        """Merge sealed segments by size class until no class is full (see
        ``ledger.storage.files.merge``); returns how many merges ran. A merge keeps the
        epoch but bumps the receipt's layout number; open cursors move with
        the rows through the merge's INDEX record."""
        self._require()
        done = 0
        with locked(self.path, self.workspace, self.store.lock_timeout, shared=False):
            settle_merge(self.path, self.store.durability)
            st = self.state()
            if not st.verified:
                self.rebaseline_locked(st, force_new_epoch=True)
                st = self.state()
            while (run := runnable_merge(self.path, st.sealed, self.store.segment_bytes)):
                try:
                    merge_run(self, st, run)
                except (OSError, segs.CommitStepError) as exc:
                    raise CommitFailed(
                        f"workspace {self.workspace!r}: segment merge failed ({exc}); no row "
                        "changed, the next writer finishes or drops it"
                    ) from exc
                done += 1
                st = self.state()
        return done

    def pages(self, use: PageUse[T]) -> T:
        """``use`` of the bounded page reader ``session_history`` uses (``reader.py``)."""
        return use(FileReader(self))

    def stat(self) -> StatReport:
        """The ``tledger stat`` document (``stat.py``)."""
        return stat_report(self)


def _batch_seqs(lines: Iterable[segs.Line], batch_id: str) -> tuple[list[int], int] | None:
    """The seqs of the rows of the newest batch ``batch_id`` among ``lines``
    and its row count ``n``, or None when no row of it is there."""
    seqs: list[int] = []
    n = 0
    for line in lines:
        row = fmt.decode_line(line.data) if line.complete else None
        b = row.get("batch") if row is not None else None
        if not isinstance(b, dict) or b.get("id") != batch_id:
            continue
        seq = row.get("seq") if row is not None else None
        if not isinstance(seq, int):
            continue
        if b.get("i") == 0:
            seqs = []  # a batch of that id starts (an id reused: the newest counts)
        seqs.append(seq)
        n = b["n"] if isinstance(b.get("n"), int) else n
    return (seqs, n) if seqs else None
