"""A batch on its way to an engine, and the rules every engine applies to it.

The transcript layer checks and encodes rows before any lock is taken
(``PendingBatch``); an engine then assigns seqs under its writer lock and
applies the same conditional rules (``check_expectations``) and returns the
same ``AppendResult``, whatever it stores the batch in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from ledger.core.errors import Conflict, WindowChanged
from ledger.core.format.rows import frame
from ledger.core.rows import prepare_batch, renumber


@dataclass(frozen=True)
class AppendResult:
    """What a committed batch got: its seqs, and the epoch and window after it."""

    seqs: list[int]
    epoch: int
    window: int
    batch_id: str


class PendingBatch(msgspec.Struct, frozen=True):
    """One batch, checked and encoded (``prepared``) before the writer lock.
    (A struct: built on every append.)

    ``caller_id``: the batch id came from the caller, so a committed batch
    with that id answers a retry. ``before_encode``, when set, is called with
    the first seq under the lock and the rows are encoded again after it (the
    lead-in names its window). ``first_seq`` is the seq ``prepared``'s first
    row was encoded with: when the engine assigns that one, the bodies are
    framed as they are, else renumbered."""

    rows: Sequence[dict[str, Any]]
    batch_id: str
    caller_id: bool
    internal: bool
    prepared: tuple[list[dict[str, Any]], list[bytes]]
    expect_next_seq: int | None = None
    expect_window: int | None = None
    before_encode: Callable[[int], None] | None = None
    expect_epoch: int | None = None
    first_seq: int = 0

    def encode(
        self, first_seq: int, max_row_bytes: int
    ) -> tuple[list[dict[str, Any]], list[bytes]]:
        """The rows and their lines with seqs from ``first_seq`` (under the
        writer lock, after the expectations held): encoded again after
        ``before_encode`` when set, else the prepared bodies framed (renumbered
        first when they were encoded for other seqs)."""
        if self.before_encode is not None:
            self.before_encode(first_seq)
            return prepare_batch(self.rows, first_seq, self.batch_id, max_row_bytes,
                                 internal=self.internal)
        stored, bodies = self.prepared
        if first_seq == self.first_seq:
            return stored, [frame(body) for body in bodies]
        return stored, renumber(stored, bodies, first_seq, max_row_bytes)


def check_expectations(workspace: str, batch: PendingBatch, next_seq: int, window: int,
                       epoch: int) -> None:
    """Refuse a conditional append whose expectation does not hold (under the
    writer lock, after an idempotent retry was answered)."""
    if batch.expect_epoch is not None and batch.expect_epoch != epoch:
        raise Conflict(
            f"workspace {workspace!r}: expected epoch {batch.expect_epoch}, the history is at "
            f"epoch {epoch} (rewritten since it was read); re-read and retry"
        )
    if batch.expect_next_seq is not None and batch.expect_next_seq != next_seq:
        raise Conflict(
            f"workspace {workspace!r}: expected next seq {batch.expect_next_seq}, the history "
            f"is at {next_seq}; re-read and retry"
        )
    if batch.expect_window is not None and batch.expect_window != window:
        raise WindowChanged(
            f"workspace {workspace!r}: expected window {batch.expect_window}, the window is "
            f"now {window} (a clear, rollover or compaction happened); re-read and retry"
        )


def refuse_on_empty(workspace: str, batch: PendingBatch) -> None:
    """A conditional append to a history that does not exist yet: refused
    before anything is created, unless it expects the empty state."""
    if batch.expect_window not in (None, 0):
        raise WindowChanged(
            f"workspace {workspace!r}: expected window {batch.expect_window}, the "
            "history is empty (window 0)"
        )
    if batch.expect_next_seq not in (None, 1):
        raise Conflict(
            f"workspace {workspace!r}: expected next seq {batch.expect_next_seq}, the "
            "history is empty (next seq 1)"
        )
    if batch.expect_epoch not in (None, 0):
        raise Conflict(
            f"workspace {workspace!r}: expected epoch {batch.expect_epoch}, the history is "
            "empty (epoch 0)"
        )
