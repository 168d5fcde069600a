"""The fork of a row engine's workspace (PostgreSQL, Citus, memory), written
once over one primitive, ``copy_prefix``; the rules are ``ledger.core.forks``
(the file engine applies them to segments, ``ledger.storage.files.fork``).

``copy_prefix(target, expect, at, event)``: one atomic step that, while the
head's epoch and floor are still ``expect``'s (else ``Conflict``), makes
workspace ``target`` (``ForkRefused`` when it exists) hold this workspace's
rows with ``seq <= at`` byte for byte and ``event`` after them, with a new
epoch and the window and floor those rows give. Each engine makes it cheap
its own way (memory shares the row objects; PostgreSQL refers to the
source's rows, ``postgres/lineage.py``, on Citus from its source's shard,
``postgres/keys.py``).

``origin_seqs()``: the first seq of each one-row batch whose id starts
``fork_`` (an engine finds them by batch id, without a scan); the rule here
reads them newest first and takes the first that is a fork event (a fork
of a fork holds its source's event too, byte for byte) (a caller may name a
batch ``fork_...``, but cannot write a row of kind ``fork``).

``RowForks`` gives a row engine's workspace ``fork`` and ``origin`` as its
``WorkspaceEngine`` methods.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ledger.core import forks
from ledger.core.errors import CommitFailed, Conflict
from ledger.core.rows import Row, new_id, prepare_batch
from ledger.storage.primitives import RowPrimitives
from ledger.storage.seqpages import RowState, decode_row

if TYPE_CHECKING:
    from ledger.storage.engine import WorkspaceEngine

ATTEMPTS = 50
FORK_BATCH_PREFIX = "fork_"


class ForkPrimitives(RowPrimitives, Protocol):
    """A row engine's workspace as the fork rule sees it (module doc)."""

    @property
    def max_row_bytes(self) -> int: ...

    def copy_prefix(self, target: str, expect: RowState, at: int, event: Row) -> None: ...

    def origin_seqs(self) -> list[int]: ...

    def open_sibling(self, workspace: str) -> WorkspaceEngine:
        """Another workspace of the same root."""
        ...


def event_row(workspace: str, at: int, epoch: int, max_row_bytes: int) -> Row:
    """The origin event row at seq ``at + 1`` (``ledger.core.forks``)."""
    _, lines = prepare_batch([forks.fork_event(workspace, at, epoch)], at + 1,
                             new_id(FORK_BATCH_PREFIX), max_row_bytes, internal=True)
    return decode_row(workspace, at + 1, lines[0][:-1])


def fork(p: ForkPrimitives, target: str, at: int | None) -> None:
    """Make ``target`` a fork of ``p`` at ``at`` (None: the newest row)."""
    if at is not None:
        at = forks.fork_seq(at)
    for _ in range(ATTEMPTS):
        head = p.head()
        point = at if at is not None else _newest_seq(p, head)
        got = p.read(point, point) if point > 0 else []
        forks.check_fork_point(p.workspace, target, point, got[0].data if got else None,
                               head.floor)
        try:
            p.copy_prefix(target, head, point,
                          event_row(p.workspace, point, head.epoch, p.max_row_bytes))
            return
        except forks.ForkRefused:
            raise
        except Conflict:
            continue
    raise CommitFailed(f"workspace {p.workspace!r}: fork failed: the workspace changed under "
                       f"it {ATTEMPTS} times in a row; nothing was forked")


def _newest_seq(p: RowPrimitives, head: RowState) -> int:
    got = p.read(head.next_seq - 1, head.next_seq - 1)
    if got:
        return got[0].seq
    rows = p.read(0, head.next_seq)  # a truncation left the next seq past the last row
    return rows[-1].seq if rows else 0


def origin(p: ForkPrimitives) -> forks.Branch | None:
    """The newest fork event (a fork of a fork holds its source's too)."""
    for seq in reversed(p.origin_seqs()):
        got = p.read(seq, seq)
        found = forks.branch_of(p.workspace, got[0].data) if got else None
        if found is not None:
            return found
    return None


class RowForks:
    """``fork`` and ``origin`` as ``WorkspaceEngine`` methods of a row
    engine's workspace, which provides the primitives (``ForkPrimitives``)."""

    def fork(self: ForkPrimitives, target: str, at: int | None = None) -> WorkspaceEngine:
        fork(self, target, at)
        return self.open_sibling(target)

    def origin(self: ForkPrimitives) -> forks.Branch | None:
        return origin(self)
