"""Forks and rewinds: the rules every engine applies, written once (pure).

A **fork** of workspace ``S`` at seq ``at`` is a new workspace holding ``S``'s
rows with ``seq <= at`` byte for byte (so the same windows, boundaries and
privacy floor), then one origin event row at ``at + 1`` (``fork_event``):
``kind: "fork"``, internal (no caller can append it), never shown to the
model, never a search result, opening no window. ``at`` must end its batch
(a batch is never split) and lie after the source's privacy floor
(``check_fork_point``). ``Branch`` is the origin as callers read it.

A **rewind** to seq ``to`` rewrites every row after ``to`` into a hidden
record that keeps the original byte for byte (``rewind_line``: an empty
assistant record with the original under ``meta.quarantine``, as a rejected
request, plus ``meta.quarantine.rewound``). A reset row after ``to`` loses
its boundary with it, so the window structure at ``to`` comes back. Refused
when it would bring back rows the privacy floor hides, unless the caller
passes ``restore_cleared`` (``check_rewind``). Fork events and rows already
hidden are left as they are.
"""

from __future__ import annotations

from typing import Any

from ledger.core.errors import RewriteRefused
from ledger.core.format import rows as fmt
from ledger.core.husks import hiding_line, is_husk
from ledger.core.rules import Result, batch_split
from ledger.core.windows import Boundary

__all__ = [
    "Branch", "ForkRefused", "RewindResult", "branch_of", "check_fork_point", "check_rewind",
    "fork_event", "rewind_line", "rewindable",
]


class ForkRefused(RewriteRefused):
    """A fork that would break a rule (split a batch, start at or before the
    privacy floor, name a row that is not there, or a workspace that exists);
    nothing was written."""


class Branch(Result, frozen=True):
    """Where a fork came from: the fork, its source, the seq it was taken at,
    the source's epoch then, and when (ms since the epoch)."""

    workspace: str
    source: str
    seq: int
    epoch: int
    created: int


class RewindResult(Result, frozen=True, tag_field="op", tag="rewind"):
    """What ``rewind`` did: the seq rewound to, the seqs it hid, the seqs after
    ``to`` it left as they were (already hidden, or fork events), the epoch
    after it, and (file engine) the interrupted rewrite it settled first."""

    to: int
    rewound: list[int]
    already: list[int]
    epoch: int
    recovered: dict[str, Any] | None = None


# --- fork ---------------------------------------------------------------------------


def fork_event(source: str, at: int, epoch: int) -> dict[str, Any]:
    """The origin event row (before the store assigns seq and batch)."""
    return {"kind": fmt.FORK_KIND, "role": "system", "parts": [], "meta": {},
            "fork": {"source": source, "seq": at, "epoch": epoch}}


def branch_of(workspace: str, row: dict[str, Any]) -> Branch | None:
    """The origin a fork event row records, else None (any other row, or an
    event whose fields are not what a fork writes)."""
    if row.get("kind") != fmt.FORK_KIND:
        return None
    info = row.get("fork")
    if not isinstance(info, dict):
        return None
    source, seq, epoch = info.get("source"), info.get("seq"), info.get("epoch")
    ts = row.get("ts")
    if not isinstance(source, str):
        return None
    if not (isinstance(seq, int) and isinstance(epoch, int) and isinstance(ts, int)):
        return None
    if isinstance(seq, bool) or isinstance(epoch, bool) or isinstance(ts, bool):
        return None
    return Branch(workspace, source, seq, epoch, ts)


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _floor_place(floor: Boundary) -> str:
    return f"the manual reset at seq {floor.seq}" if floor.readable else \
        "an unreadable line that may be a manual reset"


def fork_seq(at: Any) -> int:
    if not _int(at) or at < 1:
        raise ForkRefused(f"a fork needs a positive integer seq, got {at!r}")
    return int(at)


def check_fork_point(
    workspace: str, target: str, at: int, row: dict[str, Any] | None, floor: Boundary | None
) -> None:
    """Refuse a fork of ``workspace`` into ``target`` at row ``at`` (``row``,
    None when no readable row has that seq) that would split a batch or
    start at or before the privacy floor (``floor``)."""
    if target == workspace:
        raise ForkRefused(f"workspace {workspace!r}: a fork needs a new workspace id, "
                          "not the source's; nothing was written")
    if row is None:
        raise ForkRefused(f"workspace {workspace!r}: no readable row with seq {at}; "
                          "nothing was forked")
    if floor is not None and floor.damaged:
        raise ForkRefused(f"workspace {workspace!r}: a privacy floor may have been lost to "
                          f"damage; run `tledger repair {workspace}` first; nothing was forked")
    if floor is not None and (not floor.readable or floor.seq >= at):
        where = _floor_place(floor)
        raise ForkRefused(
            f"workspace {workspace!r}: cannot fork at seq {at}: it is at or before the "
            f"privacy floor ({where}); a fork must start after the floor; nothing was forked"
        )
    if (split := batch_split(workspace, at, row, "fork", "at")) is not None:
        raise ForkRefused(f"{split}; nothing was forked")


# --- rewind ---------------------------------------------------------------------------


def rewind_seq(to: Any) -> int:
    if not _int(to) or to < 0:
        raise RewriteRefused(f"rewind needs an integer seq >= 0, got {to!r}")
    return int(to)


def check_rewind(
    workspace: str, to: int, row: dict[str, Any] | None, floor: Boundary | None,
    restore_cleared: bool,
) -> None:
    """Refuse a rewind to ``to`` (``row``: its row, None when none is readable;
    ``to`` = 0 rewinds everything and needs no row) that would split a batch,
    or bring back rows the privacy floor hides without ``restore_cleared``."""
    if to > 0 and row is None:
        raise RewriteRefused(f"workspace {workspace!r}: no readable row with seq {to}; "
                             "nothing was rewound")
    if floor is not None and floor.damaged:
        raise RewriteRefused(f"workspace {workspace!r}: a privacy floor may have been lost to "
                             f"damage; run `tledger repair {workspace}` first; nothing was "
                             "rewound")
    if row is not None and (split := batch_split(workspace, to, row, "rewind", "to")):
        raise RewriteRefused(f"{split}; nothing was rewound")
    if floor is not None and not restore_cleared and (not floor.readable or floor.seq > to):
        where = _floor_place(floor)
        raise RewriteRefused(
            f"workspace {workspace!r}: rewinding to seq {to} would undo a manual clear "
            f"({where}) and bring back the rows it hides; that takes an explicit "
            "restore_cleared=True (CLI: --restore-cleared); nothing was rewound"
        )


def rewindable(row: dict[str, Any]) -> bool:
    """Whether a row after ``to`` is rewritten by a rewind: False for a row
    already hidden (a rejected or rewound record keeps its inner original)
    and for a fork's origin event (never shown; a fork keeps its origin)."""
    return not is_husk(row) and row.get("kind") != fmt.FORK_KIND


def rewind_line(line: bytes, row: dict[str, Any], to: int) -> bytes:
    """The stored line of the hidden record that keeps ``row`` (stored as
    ``line``) after a rewind to ``to``: kind ``message`` whatever the
    original's (a reset loses its boundary), the original spliced in byte for
    byte under ``meta.quarantine.row``."""
    body = fmt.body_of(line[:-1] if line.endswith(b"\n") else line)
    if body is None:
        raise RewriteRefused("cannot rewind a line that does not verify")
    return hiding_line(body, row, "message", {"rewound": {"to": to}})
