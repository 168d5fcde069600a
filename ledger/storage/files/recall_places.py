"""Where the recall index's rows are after merges: places (segment, offset)
carried through the merges' INDEX records (``ffmt.MergeRecord``). Pure: the
records are given (``moves``), nothing is read.

A merge moves whole segments without changing a byte: each source segment's
rows go to segment ``into`` at its base offset plus their old offset. A
place of receipt layout ``old`` is carried to layout ``new`` by the records
of the merges that made layouts ``old + 1`` .. ``new``, in order. ``steps``
is None when that cannot be done: a layout that is not a receipt's (an
unverified receipt, named by a digest), one not after the other, or a record
missing or of another epoch; the caller then finds its rows again by seq.
"""

from __future__ import annotations

from collections.abc import Callable

from ledger.core.format import files as ffmt

# The merges between two layouts, in order: each one's ``into`` and its
# sources' base offsets.
Steps = list[tuple[int, dict[int, int]]]


def steps(moves: Callable[[int, int], ffmt.MergeRecord | None] | None, epoch: int,
          old: str, new: str) -> Steps | None:
    """The records that carry layout ``old``'s places to layout ``new``'s
    (module doc), none empty; None when they cannot (no merge in between
    included: nothing to carry)."""
    if moves is None or not (old.isdigit() and new.isdigit()) or int(old) >= int(new):
        return None
    out: Steps = []
    for n in range(int(old) + 1, int(new) + 1):
        rec = moves(epoch, n)
        if rec is None or rec.epoch != epoch or rec.layout != n:
            return None
        out.append((rec.into, dict(rec.sources)))
    return out


def place(through: Steps, number: int, offset: int) -> tuple[int, int]:
    """Where the line at ``offset`` of segment ``number`` is after ``through``."""
    for into, base in through:
        b = base.get(number)
        if b is not None:
            number, offset = into, offset + b
    return number, offset


def sources(through: Steps) -> set[int]:
    """Every segment number some merge of ``through`` moves rows out of: a
    place in any other segment stays where it is."""
    return {n for _into, base in through for n in base}
