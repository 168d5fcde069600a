"""A file-engine workspace as readers see it: validation of the receipt and
the stamps of every segment (``state``) and streaming reads of rows. The
steps every writer shares (directory, FORMAT, pending receipt, publishing a
state) are ``publish.py``'s.

Readers take the lock shared, validate and read. They write one thing only:
a rewrite that a crash interrupted is settled (under the exclusive lock)
before anyone reads, so no reader sees a log half old, half new. OS errors
while reading become ``Unavailable``. ``publish.Publishing`` adds the
writers' shared steps, ``workspace.FileWorkspace`` the write path on top.
"""

from __future__ import annotations

import bisect
import functools
import os
import stat as stat_mod
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from ledger.core.errors import (
    DeletePending,
    FormatError,
    HistoryDamaged,
    Unavailable,
    UnsafePath,
    WorkspaceNotFound,
)
from ledger.core.format import files as ffmt
from ledger.core.format import rows as fmt
from ledger.core.rows import Row
from ledger.core.windows import Boundary
from ledger.storage.files import segments as segs
from ledger.storage.files.appended import Appends
from ledger.storage.files.index import BoundaryIndex, SegmentInfo
from ledger.storage.files.lock import locked
from ledger.storage.files.marker import recover_if_marked
from ledger.storage.files.receipt import WriterReceipt, read_receipt, receipt_is
from ledger.storage.files.rowread import segment_rows
from ledger.storage.files.state import (
    State,
    covers,
    empty_state,
    missing_floor,
    recorded_floor,
    verified_state,
)
from ledger.storage.files.watch import Scan, SegmentTable

F = TypeVar("F", bound=Callable[..., Any])
EMPTY_SCAN = Scan(True, False, False, [], [], [], None)


# What one append of this process published (``WorkspaceBase.read_state``):
# the receipt's bytes and fields, the segments listed, the sealed segments,
# the active segment and its stamp. (A tuple: every append makes one.)
OwnWrite = tuple[bytes, ffmt.Receipt, list[int], list[tuple[int, ffmt.Stamp]], int, ffmt.Stamp]


def _reading(what: str) -> Callable[[F], F]:
    """An OS error while reading (no descriptor left, an I/O error) becomes
    ``Unavailable``: nothing was changed, and the call may be retried."""
    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return fn(self, *args, **kwargs)
            except OSError as exc:
                raise _unavailable(self.workspace, what, exc) from exc
        return run  # type: ignore[return-value]
    return wrap


def _unavailable(workspace: str, what: str, exc: OSError) -> Unavailable:
    return Unavailable(f"workspace {workspace!r}: cannot {what}: {exc.strerror or exc}; "
                       "nothing was changed, retry")


class WorkspaceBase:
    """Validation and reads of one workspace directory. ``store`` carries the
    options (root, lock timeout, durability, segment cap, row cap)."""

    def __init__(self, store: Any, workspace: str, path: str) -> None:
        self.store = store
        self.workspace = workspace
        self.path = path
        self._derived: dict[bytes, State] = {}
        self.index = BoundaryIndex(path)
        self._format_checked = False
        self._digest_memo: tuple[list[tuple[int, ffmt.Stamp]], tuple[int, bytes]] | None = None
        self.table = SegmentTable(path)  # listing and stamps, kept by kernel events
        self.lock_path = os.path.join(path, ffmt.LOCK_NAME)
        self.receipt_path = os.path.join(path, ffmt.RECEIPT_NAME)
        # This process's account of the active segment, valid for one stamp.
        self._running: SegmentInfo | None = None
        # What this process's appends wrote to the active segment (``appended``),
        # which the recall index's catch-up takes instead of reading it back.
        self.appended = Appends()
        # What this process's last append published (``read_state``), and
        # for it the stamps expected and the state, made on first use.
        self.own: OwnWrite | None = None
        self._own_made: tuple[OwnWrite, list[tuple[int, ffmt.Stamp]], list[int], State] | None \
            = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.workspace!r})"

    def exists(self) -> bool:
        """Whether the workspace directory is there. UnsafePath when the path
        is a symlink (never followed: it could lead out of the root) or not a
        directory; DeletePending while a delete is unfinished."""
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            st = None
        if st is not None and not stat_mod.S_ISDIR(st.st_mode):
            raise UnsafePath(
                f"workspace {self.workspace!r}: {self.path} is {segs.describe_mode(st.st_mode)}, "
                "not a directory; a workspace is a real directory below the root (a symlink "
                "is never followed). Move it away or replace it with the directory itself"
            )
        if self.store.tombstoned(self.workspace):
            raise DeletePending(
                f"workspace {self.workspace!r} is being deleted (a delete was interrupted or "
                f"failed); run `tledger delete {self.workspace}` to finish it"
            )
        return st is not None

    def require(self) -> None:
        """WorkspaceNotFound unless the directory exists; FormatError for
        another format."""
        self._require()

    @_reading("open the history")
    def _require(self) -> None:
        if not self.exists():
            raise WorkspaceNotFound(
                f"workspace {self.workspace!r} has no history under {self.store.root} "
                "(nothing has been written to it)"
            )
        self._check_format()
        self.settle_interrupted()

    def settle_interrupted(self) -> None:
        """Settle a rewrite that a crash interrupted before anyone reads: its
        marker means some segments may be new and others old, which no reader
        may see. One ``lstat`` when there is none (tests/storage/files/test_crash_states.py
        found readers served such a mixed log after a power loss)."""
        if not os.path.lexists(os.path.join(self.path, ffmt.REWRITE_MARKER_NAME)):
            return
        try:
            with locked(self.path, self.workspace, self.store.lock_timeout, shared=False):
                recover_if_marked(self.path, self.store.durability)
        except OSError as exc:
            raise HistoryDamaged(
                f"workspace {self.workspace!r}: a rewrite was interrupted and cannot be "
                f"settled here ({exc}); run `tledger repair {self.workspace}` where the "
                "history is writable"
            ) from exc

    def _check_format(self) -> None:
        path = os.path.join(self.path, ffmt.FORMAT_NAME)
        try:
            fd = segs.open_regular(path)
        except FileNotFoundError:
            return
        try:
            text = os.read(fd, 64)
        finally:
            os.close(fd)
        if not text:
            return  # created, then its bytes lost with the power: no claim (writers rewrite it)
        if text != ffmt.FORMAT_TEXT:
            raise FormatError(
                f"workspace {self.workspace!r}: FORMAT is {text[:40]!r}, this build reads "
                f"{ffmt.FORMAT_TEXT!r}; use a build that knows that format"
            )

    def read_state(self) -> State:
        """``state()`` for a reader under the shared lock. Right after this
        process's own append, the state that append published, when nothing
        shows a change since (``_unchanged``); otherwise ``state()``."""
        own = self.own
        if own is not None and not self.table.watching:
            st = self._unchanged(own)
            if st is not None:
                return st
            self.own = None
        return self.state()

    def _unchanged(self, own: OwnWrite) -> State | None:
        """The state ``own`` published, if the log is still as it left it:

        - the receipt holds the very bytes it wrote. Every tracked writer
          (another process or ``Store``: an append, reset, merge, rewrite,
          purge, repair, re-baseline) publishes a pending receipt first and
          then a stable one with a higher next seq, a new epoch or a new
          layout, so after any of them, finished or killed, the bytes differ;
        - the directory lists the segments it listed, no more, no fewer (an
          untracked segment added or removed anywhere);
        - each has the stamp it recorded (identity, size, mtime, ctime): an
          untracked edit of any of them.

        So what ``state()`` checks, without decoding the receipt or deriving
        anything. None: use ``state()``."""
        made = self._own_made
        if made is None or made[0] is not own:
            _data, receipt, numbers, sealed, active, stamp = own
            made = self._own_made = (own, [*sealed, (active, stamp)], numbers,
                                     verified_state(receipt, numbers, stamp, sealed))
        if not receipt_is(self.receipt_path, own[0]):
            return None
        try:
            if segs.segments_in(self.path, os.listdir(self.path)) != made[2]:
                return None
            found = segs.stamps(self.path, made[2])
        except (OSError, HistoryDamaged):
            return None  # state() says what it is
        return made[3] if found == made[1] else None

    def state(
        self, receipt_file: WriterReceipt | None = None, scan: Scan | None = None
    ) -> State:
        """Validate receipt and stamps now (call under the lock); ``scan`` is
        the directory as the caller saw it under the same lock, if it has
        one, and ``receipt_file`` a writer's open receipt."""
        while True:
            if scan is None:
                try:
                    scan = self.table.scan()
                except FileNotFoundError:
                    scan = EMPTY_SCAN
            numbers, sealed = scan.numbers, scan.sealed
            active_stamp = scan.active[1] if scan.active is not None else None
            receipt = read_receipt(self.path) if receipt_file is None else receipt_file.read()
            if receipt is None or not receipt.stable:
                break
            count, sealed_dg = self._sealed_digest(sealed)
            active = numbers[-1] if numbers else 0
            if (
                receipt.active_segment == active
                and receipt.active == (active_stamp or ffmt.ZERO_STAMP)
                and receipt.sealed_count == count
                and receipt.sealed_digest == sealed_dg
            ):
                return verified_state(receipt, numbers, active_stamp, sealed)
            if scan.fresh:
                break
            # The table's stamps do not confirm the receipt: only a full pass
            # may say the log changed (watch.py names what events can miss).
            self.table.forget()
            scan = None
        all_stamps = scan.stamps
        digest = ffmt.sealed_digest(all_stamps)[1]
        cached = self._derived.get(digest)
        if cached is not None and cached.receipt == receipt:
            return cached
        derived = self._derive(receipt, numbers, active_stamp, sealed)
        self._derived = {digest: derived}
        return derived

    def _sealed_digest(self, sealed: list[tuple[int, ffmt.Stamp]]) -> tuple[int, bytes]:
        """``ffmt.sealed_digest``, remembered for the last sealed list seen: the
        sealed segments rarely change between two appends."""
        memo = self._digest_memo
        if memo is not None and (memo[0] is sealed or memo[0] == sealed):
            return memo[1]
        out = ffmt.sealed_digest(sealed)
        self._digest_memo = (sealed, out)
        return out

    def _derive(
        self,
        receipt: ffmt.Receipt | None,
        numbers: list[int],
        active_stamp: ffmt.Stamp | None,
        sealed: list[tuple[int, ffmt.Stamp]],
        *,
        evidence: bool = True,
    ) -> State:
        """Rebuild next seq, window and floor from the segments (newest first).
        With ``evidence`` (all but rewrites, which decide the floor themselves)
        a floor the receipt recorded and the log lost stands as a damaged one."""
        max_seq = 0
        window: Boundary | None = None
        floor: Boundary | None = None
        seq_found = False
        all_stamps = [*sealed, *([(numbers[-1], active_stamp)] if active_stamp else [])]
        for number, stamp in reversed(all_stamps):
            info = self.index.info(number, stamp)
            if not seq_found and info.rows:
                max_seq = max(max_seq, info.max_seq, info.last_seq)
                seq_found = True
            if info.bounds and window is None:
                window = info.bounds[-1]
            floors = [b for b in info.bounds if b.is_floor]
            if floors and floor is None:
                floor = floors[-1]
            if floor is not None and seq_found:
                break
        records = [recorded_floor(receipt)] if evidence else []
        if evidence:  # INDEX's record of sealed segments changed since it was written
            records += [self.index.recorded_floor(n, s) for n, s in sealed]
        lowest: list[int | None] = []
        for recorded in records:
            if recorded is None or (floor is not None and floor.damaged):
                continue
            if not lowest:
                lowest.append(self._lowest_seq(all_stamps))
            if not covers(floor, recorded, lowest[0]):
                # The receipt or INDEX recorded a floor the bytes no longer show
                # at or after its place (damage, a cut): fail closed until repair.
                floor = missing_floor(recorded)
                if window is None or (window.segment, window.offset) < (
                    floor.segment, floor.offset
                ):
                    window = floor
        next_seq = max(max_seq + 1, receipt.next_seq if receipt is not None else 1, 1)
        epoch = receipt.epoch if receipt is not None else 0
        return State(
            receipt=receipt,
            segments=numbers,
            active_stamp=active_stamp,
            sealed=sealed,
            verified=False,
            next_seq=next_seq,
            epoch=epoch,
            window=window,
            floor=floor,
        )

    def _lowest_seq(self, all_stamps: list[tuple[int, ffmt.Stamp]]) -> int | None:
        """The first seq of the oldest segment that holds rows (None: no row)."""
        for number, stamp in all_stamps:
            info = self.index.info(number, stamp)
            if info.rows:
                return info.first_seq
        return None

    def refuse_damaged_floor(self, st: State) -> None:
        """HistoryDamaged when the newest floor is damage that may have been a
        reset, or a recorded floor the log lost: which rows it hid is unknown,
        so no window is served until repair puts a manual reset there."""
        f = st.floor
        if f is None or not f.damaged:
            return
        raise HistoryDamaged(
            f"workspace {self.workspace!r}: segment {ffmt.segment_name(f.segment)} offset "
            f"{f.offset}: a privacy floor may have been lost to damage (an unreadable line "
            "that may have been a reset, or a floor the receipt recorded that the log no "
            f"longer holds); reads are refused until `tledger repair {self.workspace}`"
        )

    @property
    def epoch(self) -> int:
        return self.snapshot().epoch

    @property
    def window(self) -> int:
        return self.snapshot().window_seq

    @_reading("read the state")
    def snapshot(self) -> State:
        """The state, validated under the shared lock; for a workspace never
        written, the empty state (``empty_state``), creating nothing."""
        try:
            self._require()
        except WorkspaceNotFound:
            return empty_state()
        with locked(self.path, self.workspace, self.store.lock_timeout, shared=True):
            return self.state()

    def rows(self, after_seq: int | None = None) -> Iterator[Row]:
        """Every row in log order (after ``after_seq`` if given), streaming.

        Memory stays flat in history size: one segment is read at a time in
        chunks. Raises WorkspaceNotFound at once for a missing workspace, and
        HistoryDamaged at a line that fails verification.
        """
        self._require()
        return self._guarded(self._rows(after_seq))

    def _guarded(self, rows: Iterator[Row]) -> Iterator[Row]:
        try:
            yield from rows
        except OSError as exc:
            raise _unavailable(self.workspace, "read rows", exc) from exc

    def _rows(self, after_seq: int | None) -> Iterator[Row]:
        """Stream the segments listed under the shared lock, outside it.

        A merge may move rows while the stream runs: the next segment has
        vanished (merged into an earlier one), or a segment read after the
        merge's rename holds rows already yielded (a copy, not yet unlinked).
        Merges keep every seq and byte, so the stream lists the segments again
        and resumes after the last row it yielded. A rewrite (a new epoch)
        changes rows: then it raises HistoryDamaged ("read again"), as does a
        log that goes backwards with nothing moving (real damage).
        """
        last = after_seq
        listing: tuple[object, ...] | None = None
        while True:
            with locked(self.path, self.workspace, self.store.lock_timeout, shared=True):
                numbers = segs.list_segments(self.path)
                stamps = segs.stamps(self.path, numbers)  # HistoryDamaged for a non-file entry
                receipt = read_receipt(self.path)
            epoch = receipt.epoch if receipt is not None else None
            if listing is not None:
                if epoch != listing[0]:
                    raise HistoryDamaged(
                        f"workspace {self.workspace!r}: a rewrite ran while reading (new "
                        "epoch); read again"
                    )
                if stamps == listing[1]:
                    raise HistoryDamaged(
                        f"workspace {self.workspace!r}: seqs go backwards or a segment "
                        f"vanished with nothing moving; run `tledger check {self.workspace}`"
                    )
            listing = (epoch, stamps)
            start = self._first_segment_for(numbers, last + 1) if last is not None and numbers \
                else 0
            moved = False
            for row in self._stream(numbers[start:]):
                if row is None:
                    moved = True  # a merge moved rows: list again, resume after `last`
                    break
                if last is not None and row.seq <= last:
                    continue
                last = row.seq
                yield row
            if not moved:
                return

    def _stream(self, numbers: list[int]) -> Iterator[Row | None]:
        """The rows of ``numbers`` in order; None when a segment vanished or
        the seqs went backwards (both: a concurrent merge)."""
        prev: int | None = None
        for number in numbers:
            path = segs.segment_path(self.path, number)
            try:
                fd = segs.open_regular(path)
            except FileNotFoundError:
                yield None
                return
            try:
                for line in segs.iter_lines_fd(fd):
                    row = self._decode_or_raise(number, line)
                    if prev is not None and row.seq <= prev:
                        yield None
                        return
                    prev = row.seq
                    yield row
            finally:
                os.close(fd)

    def _decode_or_raise(self, number: int, line: segs.Line) -> Row:
        data = fmt.decode_line(line.data) if line.complete else None
        if data is None or not isinstance(data.get("seq"), int):
            what = "torn line (no newline)" if not line.complete else "line fails verification"
            raise HistoryDamaged(
                f"workspace {self.workspace!r}: segment {ffmt.segment_name(number)} offset "
                f"{line.offset}: {what}; run `tledger check {self.workspace}` and "
                f"`tledger repair {self.workspace}`"
            )
        return Row(line.data, number, line.offset, data)

    def _first_seq(self, number: int) -> int | None:
        for line in segs.iter_lines(segs.segment_path(self.path, number)):
            row = fmt.decode_line(line.data) if line.complete else None
            if row is not None and isinstance(row.get("seq"), int):
                return int(row["seq"])
        return None

    def _first_segment_for(self, numbers: list[int], seq: int) -> int:
        """Index of the last segment whose first seq is <= seq (binary search)."""
        lo, hi = 0, len(numbers) - 1
        best = 0
        while lo <= hi:
            mid = (lo + hi) // 2
            first = self._first_seq(numbers[mid])
            if first is None or first <= seq:
                best = mid
                lo = mid + 1
            else:
                hi = mid - 1
        return best

    @_reading("read a row")
    def get(self, seq: int) -> Row | None:
        """The row with ``seq``, or None."""
        self._require()
        numbers = segs.list_segments(self.path)
        if not numbers:
            return None
        start = self._first_segment_for(numbers, seq)
        for row in self._rows_from(numbers[start:]):
            if row.seq == seq:
                return row
            if row.seq > seq:
                return None
        return None

    def _rows_from(self, numbers: list[int]) -> Iterator[Row]:
        for number in numbers:
            for line in segs.iter_lines(segs.segment_path(self.path, number)):
                data = fmt.decode_line(line.data) if line.complete else None
                if data is not None and isinstance(data.get("seq"), int):
                    yield Row(line.data, number, line.offset, data)

    def window_rows(self) -> list[Row]:
        """Every readable row after the newest boundary (the active window)."""
        return self.window_state()[0]

    @_reading("read the window")
    def window_state(self) -> tuple[list[Row], State]:
        """``window_rows`` and the state they were read under (one lock)."""
        self._require()
        with locked(self.path, self.workspace, self.store.lock_timeout, shared=True):
            st = self.state()
            self.refuse_damaged_floor(st)
            numbers = st.segments
            if st.window is None:
                first, offset = (numbers[0] if numbers else 0), 0
            else:
                first, offset = st.window.segment, st.window.offset
            out: list[Row] = []
            for number in numbers[bisect.bisect_left(numbers, first):]:
                out.extend(segment_rows(
                    segs.segment_path(self.path, number), number,
                    offset if number == first else 0,
                    skip_first=st.window is not None and number == first))
            return out, st
