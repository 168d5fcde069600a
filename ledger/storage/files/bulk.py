"""Bulk loading: build a big history quickly, for imports and benchmarks.

``append_many`` rewrites the active segment by rename on every batch, which is
right for a live agent (one small batch at a time, O(batch + cap) each) and
wrong for loading a million rows at once. ``bulk_load`` writes whole batches
straight into new *sealed* segments, each committed by the same atomic rename
as every other commit, under the exclusive workspace lock and the receipt
protocol of DESIGN.md 6:

1. Under the lock, read the state (``History.state()``): the next seq, window
   and floor. Publish a **pending** receipt before any segment is touched.
2. Check and frame each batch with ``ledger.core.rows.prepare_batch`` (the same
   rules, ids, timestamps and framing as ``append_many``); gather whole batches
   into a buffer and commit it as the next segment number whenever the next
   batch would take it past ``segment_target_bytes``. A batch never spans two
   segments; a batch bigger than the target gets a segment of its own. The
   segment that was active before the load becomes sealed as it is (a torn
   tail is never written after).
3. Track boundaries and privacy floors of every batch
   (``ledger.core.windows.batch_boundaries``) with their segment and offset.
4. Record every segment it created, and the one it sealed, in the ``INDEX``
   projection (from the rows it framed; only the sealed one is scanned, and
   only when INDEX lacks it), so no later reader or append rescans them.
5. Publish a **stable** receipt with a **new epoch** (a bulk load is not an
   append a cursor can verify page by page), the new next seq, window and
   floor, and the stamps of every segment, so ``History.state().verified``
   holds afterwards and the next ``append_many`` keeps that epoch.

A load is all-or-nothing: when a batch is refused (``InvalidRow``), the input
iterator raises, or a commit fails, every segment the load created is removed
and the previous receipt is put back; the history is as it was. Readers that
listed a removed segment meanwhile get ``HistoryDamaged`` ("segment vanished")
and read again, as after any rewrite.

Seqs are gap-free and follow the existing log. Durability applies per
segment: ``full`` fsyncs each segment and the directory, ``normal`` the same
(every segment is a new file), ``off`` neither -- for benchmarks that build
and then ``os.sync()`` once.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ledger.core import rules
from ledger.core.errors import CommitFailed, CommitUncertain, InvalidRow, LedgerError
from ledger.core.format import files as ffmt
from ledger.core.rows import new_id, prepare_batch
from ledger.core.windows import Boundary, window_marker
from ledger.storage.engine import DURABILITY_LEVELS
from ledger.storage.files import segments as segs
from ledger.storage.files.index import SegmentInfo, active_entry, append_entry, read_entries
from ledger.storage.files.lock import locked
from ledger.storage.files.ports import unwrap
from ledger.storage.files.receipt import write_receipt
from ledger.storage.files.state import stable_receipt

__all__ = ["DEFAULT_SEGMENT_TARGET", "Batch", "BulkResult", "bulk_load"]

if TYPE_CHECKING:
    from ledger.storage.files.ports import FileHistory as History
    from ledger.storage.files.state import State

DEFAULT_SEGMENT_TARGET = 64 << 20


@dataclass(frozen=True)
class Batch:
    """One batch for ``bulk_load`` with its own id (for idempotent imports);
    a plain sequence of row dicts gets a fresh ``b_…`` id."""

    rows: Sequence[dict[str, Any]]
    batch_id: str | None = None


@dataclass(frozen=True)
class BulkResult:
    """What a bulk load wrote."""

    first_seq: int  # seq of the first row written (== next_seq when nothing was)
    next_seq: int  # the high-water mark afterwards
    rows: int
    batches: int
    bytes: int
    segments: list[int] = field(default_factory=list)  # segment numbers created
    epoch: int = 0
    window: int = 0


def bulk_load(
    history: object,
    batches: Iterable[Sequence[dict[str, Any]] | Batch],
    segment_target_bytes: int = DEFAULT_SEGMENT_TARGET,
    durability: str | None = None,
    *,
    internal: bool = False,
) -> BulkResult:
    """Append ``batches`` after the existing log as new sealed segments.

    ``history``: a file workspace, or a ``History`` over one (what
    ``Store(path).history(name)`` returns); another engine's is refused with
    ``Unsupported`` (``ports.unwrap``). Each item is a sequence of caller row
    dicts (one batch) or a :class:`Batch`. ``internal=True`` admits ``reset``
    and ``lead_in`` rows (recovery, imports and benchmarks that build
    windows); a rollover batch is valid only as ``[reset(rollover), lead_in,
    …]``, anything else with a reset is a floor. ``durability`` defaults to
    the store's. Raises ``InvalidRow`` (naming the batch and row) or
    ``CommitFailed`` with the history unchanged, or ``CommitUncertain`` when a
    created segment could not be removed again.
    """
    history = unwrap(history)
    if segment_target_bytes < 1:
        raise LedgerError("segment_target_bytes must be positive")
    level = history.store.durability if durability is None else durability
    if level not in DURABILITY_LEVELS:
        raise LedgerError(f"durability must be one of {DURABILITY_LEVELS}, got {level!r}")
    items = iter(batches)
    first = next(items, None)
    if first is None:
        # Nothing to write: touch nothing, not even the directory.
        st = history.snapshot() if history.exists() else None
        seq = st.next_seq if st is not None else 1
        return BulkResult(seq, seq, 0, 0, 0, [], st.epoch if st else 0,
                          st.window_seq if st else 0)
    try:
        history.ensure_dir()
        lock = locked(history.path, history.workspace, history.store.lock_timeout, shared=False)
        lock.__enter__()
    except OSError as exc:
        raise CommitFailed(
            f"workspace {history.workspace!r}: cannot open or lock the history: {exc}", "bulk"
        ) from exc
    try:
        return _load_locked(history, _chain(first, items), segment_target_bytes, level, internal)
    finally:
        lock.__exit__(None, None, None)


def _chain(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield first
    yield from rest


def _load_locked(
    history: History,
    items: Iterator[Sequence[dict[str, Any]] | Batch],
    target_bytes: int,
    durability: str,
    internal: bool,
) -> BulkResult:
    ws = history.workspace
    st = history.arrive_locked("bulk")
    history.publish_pending(st, "bulk")

    loader = _Loader(history, st, target_bytes, durability)
    try:
        for k, item in enumerate(items):
            rows, bid = (item.rows, item.batch_id) if isinstance(item, Batch) else (item, None)
            try:
                stored, lines = prepare_batch(
                    rows, loader.next_seq, bid or new_id("b_"), history.store.max_row_bytes,
                    internal=internal,
                )
            except InvalidRow as exc:
                raise InvalidRow(
                    f"workspace {ws!r}: bulk batch {k}: {exc}; nothing was written", exc.index
                ) from exc
            loader.add(stored, lines)
        loader.flush()
    except BaseException as exc:
        loader.rollback(exc)
        raise
    return loader.publish()


class _Loader:
    """The buffer of whole batches, the segments written and the boundaries."""

    def __init__(self, history: History, st: State, target_bytes: int, durability: str) -> None:
        self.history = history
        self.st = st
        self.target = target_bytes
        self.durability = durability
        self.next_seq = st.next_seq
        self.first_seq = st.next_seq
        self.segment = st.active + 1
        self.buffer: list[bytes] = []
        self.buffered = 0
        self.created: list[int] = []
        # Per segment being filled: first seq, last seq, rows, boundaries.
        self.seg_first = -1
        self.seg_rows = 0
        self.seg_bounds: list[Boundary] = []
        self.infos: list[tuple[int, int, int, tuple[Boundary, ...]]] = []
        self.window: Boundary | None = st.window
        self.floor: Boundary | None = st.floor
        self.rows = 0
        self.batches = 0
        self.bytes = 0

    def add(self, stored: list[dict[str, Any]], lines: list[bytes]) -> None:
        size = sum(len(line) for line in lines)
        if self.buffer and self.buffered + size > self.target:
            self.flush()
        offset = self.buffered
        positions = []
        for line in lines:
            positions.append(offset)
            offset += len(line)
        bounds = rules.batch_bounds(stored, [(self.segment, p) for p in positions])
        self.seg_bounds.extend(bounds)
        self.window, self.floor = rules.fold(self.window, self.floor, bounds)
        if self.seg_first < 0:
            self.seg_first = self.next_seq
        self.seg_rows += len(lines)
        self.buffer.extend(lines)
        self.buffered += size
        self.next_seq += len(lines)
        self.rows += len(lines)
        self.batches += 1
        self.bytes += size

    def flush(self) -> None:
        if not self.buffer:
            return
        number = self.segment
        # Count the segment as created before the rename: a failure at or after
        # the rename leaves a file that the rollback must try to remove.
        self.created.append(number)
        segs.commit_file(
            self.history.path, ffmt.segment_name(number), self.buffer,
            durability=self.durability, new_file=True,
        )
        self.infos.append(
            (self.seg_first, self.next_seq - 1, self.seg_rows, tuple(self.seg_bounds))
        )
        self.buffer = []
        self.buffered = 0
        self.segment += 1
        self.seg_first = -1
        self.seg_rows = 0
        self.seg_bounds = []

    def rollback(self, exc: BaseException) -> None:
        """Remove the segments this load created and put the old receipt back;
        raise CommitUncertain when a created segment cannot be removed."""
        path = self.history.path
        left = []
        for number in self.created:
            try:
                os.unlink(segs.segment_path(path, number))
            except FileNotFoundError:
                pass
            except OSError:
                left.append(number)
        segs.remove_stray_temps(path)
        try:
            segs.fsync_dir(path)
        except OSError:
            pass
        if left:
            names = ", ".join(ffmt.segment_name(n) for n in left)
            raise CommitUncertain(
                f"workspace {self.history.workspace!r}: bulk load failed ({exc}) and segments "
                f"{names} could not be removed; run `tledger check` and `tledger repair`",
                "bulk",
            ) from exc
        if self.st.receipt is not None and self.st.verified:
            try:
                write_receipt(path, self.st.receipt)
            except OSError:
                pass  # a pending receipt only expires cursors; the next writer re-baselines
        if isinstance(exc, segs.CommitStepError):
            raise CommitFailed(
                f"workspace {self.history.workspace!r}: bulk load failed at step '{exc.step}' "
                f"({exc.cause}); the history is unchanged",
                "bulk",
            ) from exc

    def publish(self) -> BulkResult:
        """Publish the stable receipt over every segment (new epoch)."""
        path = self.history.path
        st = self.st
        sealed = list(st.sealed)
        if st.active and st.active_stamp is not None:
            sealed.append((st.active, st.active_stamp))
        fresh = []
        for number in self.created:
            s = segs.stamp(segs.segment_path(path, number))
            fresh.append((number, s if s is not None else ffmt.ZERO_STAMP))
        epoch = rules.new_epoch(st.epoch)
        self._index(fresh, epoch)
        sealed.extend(fresh[:-1])
        active_number, active_stamp = fresh[-1]
        layout = st.receipt.layout if st.receipt is not None else 0
        receipt = stable_receipt(epoch, self.next_seq, self.window, self.floor, layout,
                                 (active_number, active_stamp), sealed)
        try:
            write_receipt(path, receipt)
        except OSError:
            # The segments are committed; an unpublished receipt only expires
            # cursors and makes the next writer re-baseline (DESIGN.md 6).
            pass
        return BulkResult(
            first_seq=self.first_seq,
            next_seq=self.next_seq,
            rows=self.rows,
            batches=self.batches,
            bytes=self.bytes,
            segments=list(self.created),
            epoch=epoch,
            window=window_marker(self.window),
        )

    def _index(self, fresh: list[tuple[int, ffmt.Stamp]], epoch: int) -> None:
        """Append INDEX entries (a projection: failures are ignored, readers
        rebuild a missing entry). The new active segment gets a sealed-style
        entry too (valid while its stamp holds, so whoever seals it can find
        it instead of scanning it) and an active entry under the new epoch,
        as ``History._commit`` writes for a segment it starts."""
        path = self.history.path
        st = self.st
        try:
            known = read_entries(path).sealed
            if st.active and st.active_stamp is not None:
                have = known.get(st.active)
                if have is None or have.stamp != st.active_stamp:
                    append_entry(path, self.history.index.info(st.active, st.active_stamp))
            for (number, stamp), (first, last, rows, bounds) in zip(
                fresh, self.infos, strict=True
            ):
                append_entry(path, SegmentInfo(number, stamp, first, last, rows, bounds, last))
            (number, stamp), (first, _, _, bounds) = fresh[-1], self.infos[-1]
            active_entry(path, number, stamp, epoch, bounds, first)
        except OSError:
            pass
