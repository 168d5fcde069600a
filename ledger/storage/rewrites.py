"""The rewrites of the row engines, written once over their primitives
(``ledger.storage.primitives``): ``reject``, ``truncate_after``,
``purge_before_floor`` and ``rebaseline``. What each touches and refuses is
``ledger.core.rules`` (the file engine applies the same rules to segment
lines, ``ledger.storage.files.rewrite``); this module reads the rows a rule
needs, decides, and makes the change with one conditional ``replace``. When
the head moved in between (a concurrent append or rewrite: ``Conflict``) it
reads again; nothing is changed until the ``replace`` that holds.

- ``reject``: each request (and the synthetic rows right before it in its
  batch that it owns) becomes an empty assistant record holding the
  original under ``meta.quarantine`` (``ledger.core.husks``); resets and
  other kinds are refused;
- ``truncate_after``: ``seq`` must end its batch and the privacy floor must
  survive; the rows after it go to the quarantine; the next append goes on
  after the high-water mark, as on files;
- ``purge_before_floor``: deletes the rows at or before the floor for good
  (the floor row too when it is a batch of its own; a floor inside a larger
  batch keeps that whole batch); the floor stays where it was;
- ``rebaseline``: a new epoch, the head recomputed from the rows;
- ``rewind``: every row after ``to`` becomes a hidden record keeping the
  original (``ledger.core.forks``), same seqs; conditional on the epoch when
  the caller gives one; may undo a clear only when the caller allows it.

``RowRewrites`` gives a row engine's workspace these five as its
``WorkspaceEngine`` methods.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from ledger.core import forks, rules
from ledger.core.errors import CommitFailed, Conflict, EpochChanged
from ledger.core.rows import Row
from ledger.storage.primitives import LAST_SEQ, Edit, Put, RowPrimitives
from ledger.storage.seqpages import decode_row

ATTEMPTS = 50  # reads again after a Conflict at most this often

T = TypeVar("T")


def _retrying(p: RowPrimitives, op: str, attempt: Callable[[], T]) -> T:
    """``attempt()`` until its ``replace`` holds (module doc)."""
    for _ in range(ATTEMPTS):
        try:
            return attempt()
        except EpochChanged:
            raise
        except Conflict:
            continue
    raise CommitFailed(
        f"workspace {p.workspace!r}: {op} failed: the workspace changed under it "
        f"{ATTEMPTS} times in a row; nothing was changed"
    )


def _batch_up_to(p: RowPrimitives, row: Row) -> list[Row]:
    """The rows of ``row``'s batch up to and including it (by its batch
    index; rows of another batch in that range end the rules' walk back)."""
    i = row.batch.get("i")
    first = row.seq - i if isinstance(i, int) and not isinstance(i, bool) and i > 0 else row.seq
    return p.read(max(first, 0), row.seq)


def reject(p: RowPrimitives, seq_or_seqs: int | Iterable[int]) -> rules.RejectResult:
    seqs = rules.reject_seqs(seq_or_seqs)

    def attempt() -> rules.RejectResult:
        head = p.head()
        targets: dict[int, Row] = {}
        missing: list[int] = []
        for seq in sorted(seqs):
            got = p.read(seq, seq)
            if not got:
                missing.append(seq)
                continue
            run = _batch_up_to(p, got[0])
            for j in rules.reject_targets([r.data for r in run], [len(run) - 1]):
                targets[run[j].seq] = run[j]
        if missing:
            raise rules.no_row(p.workspace, missing, "rejected")
        lines, rejected, already = rules.husks(
            p.workspace, ((seq, r.line, r.data) for seq, r in sorted(targets.items())))
        edits = [Edit(seq, seq, (Put(decode_row(p.workspace, seq, line.removesuffix(b"\n"))),))
                 for seq, line in lines.items()]  # a husk is never a reset
        if not edits:
            return rules.reject_result([], already, head.epoch)
        done = p.replace(head, edits, None)
        return rules.reject_result(rejected, already, done.epoch)

    return _retrying(p, "reject", attempt)


def truncate_after(p: RowPrimitives, seq: int) -> rules.TruncateResult:
    seq = rules.truncate_seq(seq)

    def attempt() -> rules.TruncateResult:
        head = p.head()
        got = p.read(seq, seq)
        if not got:
            raise rules.no_row(p.workspace, seq, "truncated")
        rules.check_truncate(p.workspace, seq, got[0].data, (seq, 0), head.floor)
        done = p.replace(head, [Edit(seq + 1, LAST_SEQ)], f"truncated after seq {seq}")
        return rules.TruncateResult(seq, done.removed_rows, done.removed_bytes, 0,
                                    done.put_aside, done.epoch)

    return _retrying(p, "truncate_after", attempt)


def purge_before_floor(p: RowPrimitives) -> rules.PurgeResult:
    def attempt() -> rules.PurgeResult:
        head = p.head()
        if head.floor is None:
            return rules.PurgeResult(0, 0, 0, None, head.epoch)
        floor = head.floor.seq
        cut = floor  # rows at or before `cut` go
        got = p.read(floor, floor)
        if got:  # else the floor row went in an earlier purge: its place still counts
            run = _batch_up_to(p, got[0])
            keep = rules.purge_cut([r.data for r in run], len(run) - 1)
            cut = run[keep].seq - 1 if keep < len(run) else floor
        done = p.replace(head, [Edit(0, cut)], None)
        return rules.PurgeResult(done.removed_rows, done.removed_bytes, 0,
                                 rules.FloorAt(floor, None, None), done.epoch)

    return _retrying(p, "purge_before_floor", attempt)


def rebaseline(p: RowPrimitives) -> int:
    return _retrying(p, "rebaseline", lambda: p.replace(p.head(), [], None).epoch)


def rewind(p: RowPrimitives, to: int, expect_epoch: int | None = None,
           restore_cleared: bool = False) -> forks.RewindResult:
    to = forks.rewind_seq(to)

    def attempt() -> forks.RewindResult:
        head = p.head()
        if expect_epoch is not None and head.epoch != expect_epoch:
            raise EpochChanged(
                f"workspace {p.workspace!r}: rewind expected epoch {expect_epoch}, the "
                f"workspace is at epoch {head.epoch} (a rewrite came first); nothing was rewound")
        got = p.read(to, to) if to > 0 else []
        forks.check_rewind(p.workspace, to, got[0].data if got else None, head.floor,
                           restore_cleared)
        edits: list[Edit] = []
        rewound: list[int] = []
        already: list[int] = []
        for row in p.read(to + 1, LAST_SEQ):
            if not forks.rewindable(row.data):
                already.append(row.seq)
                continue
            line = forks.rewind_line(row.line, row.data, to)
            hidden = decode_row(p.workspace, row.seq, line[:-1])
            edits.append(Edit(row.seq, row.seq, (Put(hidden),), restore_cleared))
            rewound.append(row.seq)
        if not edits:
            return forks.RewindResult(to, [], already, head.epoch)
        done = p.replace(head, edits, None)
        return forks.RewindResult(to, rewound, already, done.epoch)

    return _retrying(p, "rewind", attempt)


class RowRewrites:
    """The four rewrites as ``WorkspaceEngine`` methods of a row engine's
    workspace, which provides the primitives (``RowPrimitives``)."""

    def reject(self: RowPrimitives, seq_or_seqs: int | Iterable[int]) -> rules.RejectResult:
        return reject(self, seq_or_seqs)

    def truncate_after(self: RowPrimitives, seq: int) -> rules.TruncateResult:
        return truncate_after(self, seq)

    def purge_before_floor(self: RowPrimitives) -> rules.PurgeResult:
        return purge_before_floor(self)

    def rebaseline(self: RowPrimitives) -> int:
        return rebaseline(self)

    def rewind(self: RowPrimitives, to: int, expect_epoch: int | None = None,
               restore_cleared: bool = False) -> forks.RewindResult:
        return rewind(self, to, expect_epoch, restore_cleared)
