"""The steps every writer of a file-engine workspace shares, on top of its
validated reads (``reads.WorkspaceBase``): the directory and FORMAT, step 1
of every mutation (a pending receipt), and publishing a stable receipt for
the segments as they are (``rebaseline_locked``, ``publish_state``).
Appends (``workspace.py``), rewrites and repair, bulk loads and merges call
them under the exclusive lock, through ``ports.FileHistory``.
"""

from __future__ import annotations

import os
import stat as stat_mod

from ledger.core.errors import CommitFailed, DeletePending
from ledger.core.format import files as ffmt
from ledger.core.rules import new_epoch
from ledger.core.windows import Boundary
from ledger.storage.files import segments as segs
from ledger.storage.files.index import active_entry
from ledger.storage.files.lock import locked
from ledger.storage.files.reads import WorkspaceBase
from ledger.storage.files.receipt import WriterReceipt, write_receipt
from ledger.storage.files.state import State, empty_receipt, stable_receipt


class Publishing(WorkspaceBase):
    """A workspace's reads plus the writers' shared steps (module doc)."""

    def ensure_dir(self) -> None:
        """Create the workspace directory (not its files: those are written
        under the lock by the first writer)."""
        try:
            if self.exists():
                return
        except DeletePending as exc:
            raise CommitFailed(f"{exc}; nothing written") from None
        self.store.ensure_root()
        if self.store.tombstoned(self.workspace):
            raise CommitFailed(f"workspace {self.workspace!r} is being deleted; nothing written")
        try:
            os.mkdir(self.path, 0o700)
        except FileExistsError:
            pass

    def ensure_format(self, present: bool | None = None) -> None:
        """Under the exclusive lock: write FORMAT when missing, else check it
        (once per History object: FORMAT never changes under a writer)."""
        if present and self._format_checked:
            return
        path = os.path.join(self.path, ffmt.FORMAT_NAME)
        if present is None:
            present = os.path.lexists(path)
        if present and not self._format_checked:
            st = os.lstat(path)
            if not stat_mod.S_ISREG(st.st_mode):
                raise segs.not_regular(path, segs.describe_mode(st.st_mode))
            if st.st_size == 0:
                present = False  # its bytes were lost with the power: write it again
        if present:
            if not self._format_checked:
                self._check_format()
                self._format_checked = True
            return
        try:
            segs.commit_file(
                self.path, ffmt.FORMAT_NAME, [ffmt.FORMAT_TEXT],
                durability=self.store.durability, new_file=True,
            )
        except segs.CommitStepError as exc:
            raise CommitFailed(
                f"workspace {self.workspace!r}: could not write FORMAT ({exc}); nothing written"
            ) from exc

    def publish_pending(
        self, st: State, bid: str | None, receipt_file: WriterReceipt | None = None
    ) -> None:
        """Step 1 of every mutation: a pending receipt before any segment
        changes; if it cannot be published, nothing changes (CommitFailed)."""
        base = st.receipt if st.receipt is not None else empty_receipt()
        try:
            if receipt_file is None:
                write_receipt(self.path, base, ffmt.PENDING)
            else:
                receipt_file.write(base, ffmt.PENDING)
        except OSError as exc:
            raise CommitFailed(
                f"workspace {self.workspace!r}: could not publish the pending receipt: {exc}; "
                "nothing was written",
                bid,
            ) from exc

    def rebaseline(self) -> int:
        """Publish a fresh stable receipt for the segments as they are now, with
        a new epoch. Returns the epoch. (After an untracked edit or a rewrite.)"""
        with locked(self.path, self.workspace, self.store.lock_timeout, shared=False):
            return self.rebaseline_locked(self.state(), force_new_epoch=True)

    def rebaseline_locked(self, st: State, *, force_new_epoch: bool,
                           rewritten: bool = False) -> int:
        """``rewritten``: a rewrite (or repair) just decided the log's floors
        itself, so the old receipt's floor is no evidence of a lost one."""
        if st.verified and not force_new_epoch:
            return st.epoch
        numbers = segs.list_segments(self.path)
        all_stamps = segs.stamps(self.path, numbers)
        fresh = self._derive(st.receipt, numbers, all_stamps[-1][1] if all_stamps else None,
                             all_stamps[:-1], evidence=not rewritten)
        return self.publish_state(fresh.window, fresh.floor, fresh.next_seq, st.epoch)

    def publish_state(
        self, window: Boundary | None, floor: Boundary | None, next_seq: int,
        old_epoch: int, *, layout_of: ffmt.Receipt | None = None,
    ) -> int:
        """Publish a stable receipt for the segments as they are now, with the
        given window, floor and next seq (writers, under the lock). The epoch is
        new, unless ``layout_of`` is given: then only rows moved (a merge), so the
        epoch stays and that receipt's layout number is bumped instead."""
        path = self.path
        numbers = segs.list_segments(path)
        all_stamps = segs.stamps(path, numbers)
        if layout_of is not None:
            epoch, layout = old_epoch, layout_of.layout + 1
        else:
            epoch, layout = new_epoch(old_epoch), 0
        active = all_stamps[-1] if all_stamps else (0, ffmt.ZERO_STAMP)
        receipt = stable_receipt(epoch, next_seq, window, floor, layout, active, all_stamps[:-1])
        try:
            for number, stamp in all_stamps[:-1]:
                self.index.ensure_persisted(number, stamp)
            if numbers:
                active_entry(path, numbers[-1], all_stamps[-1][1], epoch)
        except OSError:
            pass  # a projection: readers rebuild what is missing
        write_receipt(path, receipt)
        self.forget_derived()
        return epoch

    def forget_derived(self) -> None:
        """Drop the states derived from the segments (after they changed)."""
        self._derived = {}
        self.own = None
