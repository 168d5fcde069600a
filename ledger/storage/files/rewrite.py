"""Rewrite primitives and their transaction marker.

Every rewrite of existing segments -- ``reject``, ``truncate_after``,
``purge_before_floor`` and ``recovery``'s repair -- goes through
:func:`commit_rewrite`, under the exclusive workspace lock:

1. publish a **pending** receipt (cursors expire; a failure aborts);
2. put aside whatever leaves the live log (the caller's ``before_commit``:
   quarantine entries, fsynced) -- before any segment changes;
3. *tombstones*: hard-link every segment about to change to
   ``seg-NNNNNNNN.jsonl.truncate`` (O(1): the rewrite replaces segments by
   rename, so the link keeps the old bytes);
4. the **marker** ``REWRITE.json`` (temp + fsync + rename) with the digests of
   the final files;
5. rewrite each changed segment by temp + rename, or unlink it when it ends
   up empty; fsync the directory;
6. remove the tombstones, then the marker;
7. re-baseline: a stable receipt with a **new epoch**.

After a crash at any step the next writer (``recover_interrupted``, called
by appends, rewrites, repair and import) settles it with one routine that
serves this format and the legacy one alike:

- no marker, tombstones: each tombstone is discarded when its file exists,
  else restored (the crash came before the marker: nothing changed);
- marker, no tombstones: the marker is discarded (the crash came after step 6's
  first half: the rewrite is complete);
- marker and tombstones: **committed** when every file matches the marker's
  digests, else **rolled back** by renaming each tombstone over its file.

The marker's format and the settle rules are ``ledger.storage.files.marker``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from ledger.core import forks, rules
from ledger.core.errors import (
    CommitFailed,
    EpochChanged,
    LedgerError,
    RecoveryError,
    RewriteRefused,
)
from ledger.core.format import files as ffmt
from ledger.core.format import rows as fmt
from ledger.core.husks import (  # noqa: F401 (re-exported: their old home)
    QUARANTINE_VERSION,
    husk_line,
    is_husk,
    owns,
    rejected_original,
)
from ledger.core.rows import now_ms
from ledger.core.windows import Entry
from ledger.storage.files import segments as segs
from ledger.storage.files import vectors
from ledger.storage.files.index import entry_of
from ledger.storage.files.lock import locked
from ledger.storage.files.marker import (  # noqa: F401 (re-exported: the old home of these names)
    FILES_VERSION,
    MARKER_NAME,
    RAW_HASH_VERSION,
    TOMBSTONE_SUFFIX,
    Marker,
    Resolution,
    _content_digests,
    apply,
    decide,
    file_raw_digest,
    group_digests,
    marker_matches,
    native_tombstones,
    parse_marker,
    plan_recovery,
    raw_digest,
    recover_if_marked,
    recover_interrupted,
    text_digest,
)
from ledger.storage.files.ports import unwrap
from ledger.storage.files.retention import Quarantine
from ledger.storage.files.state import empty_receipt

if TYPE_CHECKING:
    from ledger.storage.files.ports import FileHistory as History
    from ledger.storage.files.state import State


# Test hook: called with the name of each step of commit_rewrite.
FAULT_HOOK: Callable[[str], None] | None = None


def _step(name: str) -> None:
    if FAULT_HOOK is not None:
        FAULT_HOOK(name)


# --- the rewrite transaction ------------------------------------------------------


@dataclass
class RewriteOutcome:
    changed: list[int]
    epoch: int


def commit_rewrite(
    history: History,
    st: State,
    changes: dict[int, list[bytes] | None],
    *,
    op: str,
    before_commit: Callable[[], None] | None = None,
) -> RewriteOutcome:
    """Replace segments (number -> new bytes, None to delete) as one
    transaction (module doc). Call under the exclusive lock with ``st`` fresh."""
    path = history.path
    if st.floor is not None and st.floor.damaged and not op.startswith("repair"):
        raise RewriteRefused(
            f"workspace {history.workspace!r}: {op} refused: a privacy floor may have been lost "
            f"to damage ({ffmt.segment_name(st.floor.segment)} offset {st.floor.offset}); run "
            f"`tledger repair {history.workspace}` first; nothing was changed"
        )
    # Always durable, whatever the store's level: a rewrite replaces rows that
    # were on disk before it, and the levels only ever allow a power loss to
    # take the newest batches. So every step below fsyncs.
    changes = {n: c for n, c in changes.items() if n in st.segments}
    if not changes:
        return RewriteOutcome([], st.epoch)
    history.publish_pending(st, None)
    # Before any segment changes: no vector of a row the rewrite removes outlives
    # it, even after a crash (the next ranked search computes them again).
    vectors.discard(path)
    tombs: list[tuple[str, str]] = []
    marker_path = os.path.join(path, MARKER_NAME)
    marker_written = False
    segments_done = False
    try:
        _step("pending")
        if before_commit is not None:
            before_commit()
        _step("quarantined")
        active = st.active
        order = sorted(changes)
        archive = [n for n in order if n != active]
        arch_chunks: list[bytes] = []
        any_archive = False
        for n in archive:
            c = changes[n]
            if c is not None:
                any_archive = True
                arch_chunks.extend(c)
        a_text, a_raw = _content_digests(arch_chunks if any_archive else None)
        if active in changes:
            c_text, c_raw = _content_digests(changes[active])
        else:
            c_text, c_raw = group_digests([segs.segment_path(path, active)])
        final = {
            ffmt.segment_name(n): (None if (c := changes[n]) is None else raw_digest(b"".join(c)))
            for n in order
        }
        marker = {
            "finalArchiveHash": a_text,
            "finalChatHash": c_text,
            "rawHashes": {
                "version": RAW_HASH_VERSION,
                "finalArchiveHash": a_raw,
                "finalChatHash": c_raw,
            },
            "files": {
                "version": FILES_VERSION,
                "archive": [ffmt.segment_name(n) for n in archive],
                "chat": ffmt.segment_name(active),
                "final": final,
            },
            "op": op,
            "time": now_ms(),
        }
        for n in order:
            seg = segs.segment_path(path, n)
            tomb = seg + TOMBSTONE_SUFFIX
            segs.unlink_quietly(tomb)
            os.link(seg, tomb)
            tombs.append((tomb, seg))
        segs.fsync_dir(path)
        _step("tombstones")
        segs.commit_file(
            path,
            MARKER_NAME,
            [fmt.encode_json(marker) + b"\n"],
            durability="full",
            new_file=True,
        )
        marker_written = True
        _step("marker")
        for n in order:
            c = changes[n]
            if c is None:
                os.unlink(segs.segment_path(path, n))
            else:
                segs.commit_file(path, ffmt.segment_name(n), c, durability="full", new_file=False)
            _step(f"segment-{n}")
        segments_done = True
        segs.fsync_dir(path)
        for tomb, _ in tombs:
            os.unlink(tomb)
        _step("tombstones-removed")
        os.unlink(marker_path)
        segs.fsync_dir(path)
        _step("marker-removed")
    except (OSError, segs.CommitStepError, LedgerError) as exc:
        if not marker_written:
            for tomb, _ in tombs:
                segs.unlink_quietly(tomb)
            raise CommitFailed(
                f"workspace {history.workspace!r}: {op} failed ({exc}); nothing was changed"
            ) from exc
        # Settle now rather than leave it to the next writer. Once every
        # segment is in place the rewrite has committed (only clean-up failed).
        res = _settle_after_failure(path)
        if not (segments_done or (res is not None and res.action == "committed")):
            what = "rolled back" if res is not None else "left for the next writer to roll back"
            raise CommitFailed(
                f"workspace {history.workspace!r}: {op} failed ({exc}); {what}"
            ) from exc
    history.forget_derived()
    # Each rewritten segment is read once more here (publish_state ->
    # index.ensure_persisted -> scan_segment). Not a check of the write: it
    # is how its INDEX entry (rows, seqs, boundaries) for the new stamp is
    # made, and only scan_segment makes one from a segment's lines. The cost
    # is the decode, not the read: a purge of 5.6 MiB rewriting a 418 KB
    # segment spends 2.8-3.3 of 41-45 ms CPU there, of which the read from
    # the page cache and the line split 0.2 ms (bench/RESULTS.md, regress2).
    epoch = history.rebaseline_locked(history.state(), force_new_epoch=True, rewritten=True)
    _step("receipt")
    return RewriteOutcome(order, epoch)


def _settle_after_failure(path: str) -> Resolution | None:
    try:
        return recover_interrupted(path, "full")
    except OSError:
        return None


def _empty_receipt() -> ffmt.Receipt:
    return empty_receipt()


# --- helpers over segment lines ---------------------------------------------------


def segment_entries(history_path: str, number: int) -> list[Entry]:
    return [
        entry_of(number, line) for line in segs.iter_lines(segs.segment_path(history_path, number))
    ]


def _may_hold(history: History, st: Any, low: int) -> list[int]:
    """The segments that may hold a readable row with a seq of ``low`` or more:
    a sealed segment whose index entry (checked against its stamp, else
    computed from its bytes) says it has no readable row, or none above
    ``low`` (its highest seq, whatever the lines' order), is not read. A reject
    of a recent row then decodes a segment or two, not the whole history."""
    sealed = dict(st.sealed)
    out = []
    for number in st.segments:
        stamp = sealed.get(number)
        if stamp is not None:
            info = history.index.info(number, stamp)
            if info.rows == 0 or max(info.last_seq, info.max_seq) < low:
                continue
        out.append(number)
    return out


def _where(segment: str, offsets: list[int], j: int) -> str:
    return f" ({segment} offset {offsets[j]})"


def _raw_line(e: Entry, data: bytes) -> bytes:
    """The stored bytes of an entry (with its newline when it had one)."""
    end = e.offset + len(e.line)
    return data[e.offset : end + 1] if end < len(data) else data[e.offset : end]


def _locked_rewrite(history: History) -> Any:
    history.require()
    return locked(history.path, history.workspace, history.store.lock_timeout, shared=False)


def _settle(history: History) -> Resolution | None:
    return recover_interrupted(history.path, history.store.durability)


# --- reject -------------------------------------------------------------------------


def reject(history: History, seq_or_seqs: int | Iterable[int]) -> rules.RejectResult:
    """Quarantine persisted requests (and the synthetic prelude rows they own)
    as empty assistant records (DESIGN.md 3). Rejecting a record that is
    already rejected keeps its inner original. Refuses, writing nothing, when
    a seq is missing or names a reset (or any non-message row)."""
    history = unwrap(history)
    seqs = rules.reject_seqs(seq_or_seqs)
    with _locked_rewrite(history):
        settled = _settle(history)
        st = history.state()
        changes: dict[int, list[bytes] | None] = {}
        rejected: list[int] = []
        already: list[int] = []
        found: set[int] = set()
        for number in _may_hold(history, st, min(seqs)):
            seg_path = segs.segment_path(history.path, number)
            entries = segment_entries(history.path, number)
            hits = [
                i for i, e in enumerate(entries) if e.row is not None and e.row.get("seq") in seqs
            ]
            if not hits:
                continue
            found.update(entries[i].row["seq"] for i in hits)  # type: ignore[index]
            targets = [(j, e.line, e.row) for j in rules.reject_targets(
                [e.row for e in entries], hits) if (e := entries[j]).row is not None]
            name = ffmt.segment_name(number)
            new_lines, done, kept = rules.husks(
                history.workspace, targets,
                partial(_where, name, [e.offset for e in entries]))
            rejected += done
            already += kept
            if new_lines:
                data = segs.read_file(seg_path)
                chunks = [new_lines.get(j, _raw_line(e, data)) for j, e in enumerate(entries)]
                changes[number] = chunks
        missing = sorted(seqs - found)
        if missing:
            raise rules.no_row(history.workspace, missing, "rejected")
        out = commit_rewrite(history, history.state(), changes, op="reject") if changes else None
    return rules.reject_result(rejected, already, out.epoch if out else st.epoch,
                               settled.to_dict() if settled else None)


# --- rewind ------------------------------------------------------------------------


def rewind(history: History, to: int, expect_epoch: int | None = None,
           restore_cleared: bool = False) -> forks.RewindResult:
    """Hide every row after ``to`` (``ledger.core.forks``): each becomes a
    record keeping the original byte for byte; unreadable lines stay as they
    are (they may be resets: fail closed). A rewrite with a marker and a new
    epoch; conditional on ``expect_epoch`` when given."""
    history = unwrap(history)
    to = forks.rewind_seq(to)
    with _locked_rewrite(history):
        settled = _settle(history)
        st = history.state()
        if expect_epoch is not None and st.epoch != expect_epoch:
            raise EpochChanged(
                f"workspace {history.workspace!r}: rewind expected epoch {expect_epoch}, the "
                f"workspace is at epoch {st.epoch} (a rewrite came first); nothing was rewound")
        scanned: list[tuple[int, list[Entry]]] = []
        row_to: dict[str, Any] | None = None
        for number in reversed(st.segments):
            entries = segment_entries(history.path, number)
            scanned.append((number, entries))
            hit = [e.row for e in entries if e.row is not None and e.row.get("seq") == to]
            if hit:
                row_to = hit[-1]
                break
            first = next((e.row["seq"] for e in entries if e.row is not None
                          and isinstance(e.row.get("seq"), int)), None)
            if first is not None and first < to:
                break  # no row `to`, and the rows before it begin here
        forks.check_rewind(history.workspace, to, row_to, st.floor, restore_cleared)
        changes: dict[int, list[bytes] | None] = {}
        rewound: list[int] = []
        already: list[int] = []
        for number, entries in scanned:
            new_lines: dict[int, bytes] = {}
            for j, e in enumerate(entries):
                row = e.row
                if row is None or not isinstance(row.get("seq"), int) or row["seq"] <= to:
                    continue
                if not forks.rewindable(row):
                    already.append(row["seq"])
                    continue
                new_lines[j] = forks.rewind_line(e.line, row, to)
                rewound.append(row["seq"])
            if new_lines:
                data = segs.read_file(segs.segment_path(history.path, number))
                changes[number] = [new_lines.get(j, _raw_line(e, data))
                                   for j, e in enumerate(entries)]
        out = commit_rewrite(history, st, changes, op="rewind") if changes else None
    return forks.RewindResult(to, sorted(rewound), sorted(already),
                              out.epoch if out else st.epoch,
                              settled.to_dict() if settled else None)


# --- truncate ------------------------------------------------------------------------


def truncate_after(history: History, seq: int) -> rules.TruncateResult:
    """Drop every row after the row ``seq`` (its last occurrence in log order).

    ``seq`` must end its batch (a batch is never split). The dropped bytes go
    to the quarantine; unreadable lines that may be resets stay in the log byte
    for byte. A rewrite with a marker and a new epoch.
    """
    history = unwrap(history)
    seq = rules.truncate_seq(seq)
    with _locked_rewrite(history):
        settled = _settle(history)
        st = history.state()
        spot: tuple[int, int, list[Entry]] | None = None
        for number in reversed(st.segments):
            entries = segment_entries(history.path, number)
            for i in range(len(entries) - 1, -1, -1):
                r = entries[i].row
                if r is not None and r.get("seq") == seq:
                    spot = (number, i, entries)
                    break
            if spot is not None:
                break
        if spot is None:
            raise rules.no_row(history.workspace, seq, "truncated")
        number, idx, entries = spot
        row = entries[idx].row
        assert row is not None
        rules.check_truncate(history.workspace, seq, row, (number, entries[idx].offset), st.floor)
        quarantine = Quarantine(history.path, durability=history.store.durability)
        puts: list[Callable[[], str]] = []
        changes: dict[int, list[bytes] | None] = {}
        removed_bytes = 0
        removed_rows = 0
        kept_candidates = 0
        reason = f"truncated after seq {seq}"
        later = [n for n in st.segments if n > number]
        for n, start in [(number, idx + 1), *[(m, 0) for m in later]]:
            ents = entries if n == number else segment_entries(history.path, n)
            tail = ents[start:]
            if not tail:
                continue
            if n != number and not any(e.candidate for e in tail):
                seg_path = segs.segment_path(history.path, n)
                name = ffmt.segment_name(n)
                puts.append(partial(quarantine.put_file, seg_path, source=name, offset=0,
                                    reason=reason))
                changes[n] = None
                removed_bytes += os.path.getsize(seg_path)
                removed_rows += sum(1 for e in tail if e.row is not None)
                continue
            data = segs.read_file(segs.segment_path(history.path, n))
            kept = [_raw_line(e, data) for e in ents[:start]]
            run_start: int | None = None
            run: list[bytes] = []
            for e in tail:
                raw = _raw_line(e, data)
                if e.candidate:
                    kept_candidates += 1
                    kept.append(raw)
                    if run:
                        puts.append(
                            _put(
                                quarantine,
                                b"".join(run),
                                ffmt.segment_name(n),
                                run_start or 0,
                                reason,
                            )
                        )
                        run, run_start = [], None
                    continue
                if run_start is None:
                    run_start = e.offset
                run.append(raw)
                removed_bytes += len(raw)
                removed_rows += e.row is not None
            if run:
                puts.append(
                    _put(quarantine, b"".join(run), ffmt.segment_name(n), run_start or 0, reason)
                )
            changes[n] = kept if kept else None
        entries_out: list[str] = []

        def before() -> None:
            entries_out.extend(p() for p in puts)

        out = (
            commit_rewrite(
                history,
                st,
                {n: c for n, c in changes.items()},
                op="truncate_after",
                before_commit=before,
            )
            if changes
            else None
        )
    return rules.TruncateResult(
        seq, removed_rows, removed_bytes, kept_candidates, entries_out,
        out.epoch if out else st.epoch, settled.to_dict() if settled else None,
    )


def _put(q: Quarantine, data: bytes, source: str, offset: int, reason: str) -> Callable[[], str]:
    return lambda: q.put(data, source=source, offset=offset, reason=reason)


# --- purge ------------------------------------------------------------------------------


def purge_before_floor(history: History) -> rules.PurgeResult:
    """Really delete every row at or before the newest manual reset (the
    privacy floor): no quarantine. The floor row goes too when it is a batch of
    its own; a floor inside a larger batch keeps that whole batch. Unreadable
    lines that may be resets stay byte for byte. A rewrite with a marker and
    a new epoch."""
    history = unwrap(history)
    with _locked_rewrite(history):
        settled = _settle(history)
        st = history.state()
        active = (st.active, st.active_stamp) if st.active_stamp is not None else None
        floors = [b for b in history.index.all_bounds(st.sealed, active, None) if b.is_floor]
        recovered = settled.to_dict() if settled else None
        if not floors:
            return rules.PurgeResult(0, 0, 0, None, st.epoch, recovered)
        floor = floors[-1]
        where = rules.FloorAt(floor.seq if floor.readable else None,
                              ffmt.segment_name(floor.segment), floor.offset)
        changes: dict[int, list[bytes] | None] = {}
        purged_rows = purged_bytes = kept_candidates = 0
        for n in [m for m in st.segments if m <= floor.segment]:
            if n == floor.segment:
                ents = segment_entries(history.path, n)
                cut = _purge_cut(ents, floor.offset)
            else:
                ents = _purged_entries(history.path, n)
                cut = len(ents)
            if cut == 0:
                continue
            data = segs.read_file(segs.segment_path(history.path, n))
            kept: list[bytes] = []
            dropped = 0
            for i, e in enumerate(ents):
                raw = _raw_line(e, data)
                if i >= cut or e.candidate:
                    kept.append(raw)
                    if i < cut:
                        kept_candidates += 1
                    continue
                dropped += 1
                purged_bytes += len(raw)
                purged_rows += e.row is not None
            if dropped:
                changes[n] = kept if kept else None
        epoch = st.epoch
        if changes:
            epoch = commit_rewrite(history, st, changes, op="purge_before_floor").epoch
        return rules.PurgeResult(purged_rows, purged_bytes, kept_candidates, where, epoch,
                                 recovered)


def _purged_entries(history_path: str, number: int) -> list[Entry]:
    """``segment_entries`` of a segment purged whole: each line verified, and
    an unreadable one classified as a reset candidate or not (kept, or
    purged), but no readable row asked whether it is a reset (what a
    boundary needs, not a purge: about a third of the work)."""
    out = []
    for line in segs.iter_lines(segs.segment_path(history_path, number)):
        row = fmt.decode_line(line.data) if line.complete else None
        candidate = row is None and fmt.line_may_be_reset(line.data)
        out.append(Entry(number, line.offset, line.data, row, False, candidate))
    return out


def _purge_cut(ents: list[Entry], floor_offset: int) -> int:
    """Index of the first line kept in the floor's segment (``rules.purge_cut``)."""
    for i, e in enumerate(ents):
        if e.offset == floor_offset:
            return rules.purge_cut([x.row for x in ents[: i + 1]], i)
    raise RecoveryError(f"privacy floor at offset {floor_offset} not found; run repair")
