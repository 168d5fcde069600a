"""The transcript's rules every engine applies, written once: epochs, the
boundary fold of an append, and what each rewrite touches and refuses.

Engines store, replace and drop rows; which rows, and when to refuse, is
decided here. Pure: rows in, decisions out, no I/O. The file engine
(``ledger.storage.files``), PostgreSQL (``ledger.storage.postgres``) and the
in-memory reference engine (``ledger.storage.memory``) call these.

A position is ``(part, offset)`` in log order, as each engine defines it
(``ledger.storage.engine``): the file engine's segment and byte offset, the
row engines' ``(seq, 0)``.

What a rewrite reports is typed here too (``RejectResult``,
``TruncateResult``, ``PurgeResult``): every engine returns these, callers
read attributes, and ``to_dict()`` gives the JSON document of ``tledger
reject / truncate / purge --json``.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import msgspec

from ledger.core.errors import RewriteRefused
from ledger.core.format import rows as fmt
from ledger.core.husks import husk_line, is_husk, owns
from ledger.core.windows import Boundary, batch_boundaries

# --- results ---------------------------------------------------------------------


class Result(msgspec.Struct, frozen=True):
    """A typed result of an engine operation; ``to_dict()`` is its JSON
    document (the CLI's ``--json``), keys in field order."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = msgspec.to_builtins(self)
        return out

    def __getitem__(self, key: str) -> Any:
        """``result["key"]``: the value of ``to_dict()[key]``, read-only, so
        code written against 0.1 (which returned these documents as dicts)
        keeps working. New code reads attributes."""
        return self.to_dict()[key]


class FloorAt(Result, frozen=True, omit_defaults=True):
    """Where a privacy floor is: its seq (None when unreadable), and on the
    file engine its segment and byte offset (None on the row engines);
    ``damaged`` only in ``stat`` on files (left out of ``to_dict()`` when None)."""

    seq: int | None
    segment: str | None
    offset: int | None
    damaged: bool | None = None


class RejectResult(Result, frozen=True, tag_field="op", tag="reject"):
    """What ``reject`` did: the seqs it turned into rejected records, those
    that already were, the epoch after it, and (file engine) the interrupted
    rewrite it settled first."""

    rejected: list[int]
    already: list[int]
    epoch: int
    recovered: dict[str, Any] | None = None


class TruncateResult(Result, frozen=True, tag_field="op", tag="truncate_after"):
    """What ``truncate_after`` did: rows and bytes removed (to quarantine),
    lines kept because they may be resets, the quarantine entries, the epoch."""

    seq: int
    removed_rows: int
    removed_bytes: int
    kept_reset_candidates: int
    quarantine: list[str]
    epoch: int
    recovered: dict[str, Any] | None = None


class PurgeResult(Result, frozen=True, tag_field="op", tag="purge_before_floor"):
    """What ``purge_before_floor`` did: rows and bytes deleted, lines kept
    because they may be resets, the floor (None: none, nothing purged), the
    epoch."""

    purged_rows: int
    purged_bytes: int
    kept_reset_candidates: int
    floor: FloorAt | None
    epoch: int
    recovered: dict[str, Any] | None = None


# --- epochs ---------------------------------------------------------------------


def new_epoch(old: int = 0) -> int:
    """A fresh epoch: random (53 bits, so JSON readers keep it exact), never 0
    nor the old one. Random rather than old + 1 because the old value may be
    unknown or come from a stale copy, and a workspace deleted and created
    again must never revive an old cursor."""
    while True:
        epoch = secrets.randbits(53)
        if epoch not in (0, old):
            return epoch


# --- the boundary fold of an append ----------------------------------------------


def batch_bounds(
    stored: Sequence[dict[str, Any]], positions: Sequence[tuple[int, int]]
) -> list[Boundary]:
    """The boundaries a batch adds: each reset row of ``stored`` (rows with
    their seqs) classified (``ledger.core.windows.classify_reset``) at its
    position ``positions[i]``."""
    out = []
    for i, reason in batch_boundaries(list(stored)):
        part, offset = positions[i]
        out.append(Boundary(int(stored[i]["seq"]), part, offset, reason))
    return out


def fold(
    window: Boundary | None, floor: Boundary | None, bounds: Iterable[Boundary]
) -> tuple[Boundary | None, Boundary | None]:
    """The window and floor after ``bounds`` (in log order): every boundary
    opens a window; a manual one is also the new privacy floor."""
    for b in bounds:
        window = b
        if b.is_floor:
            floor = b
    return window, floor


# --- reject ---------------------------------------------------------------------


def reject_seqs(seq_or_seqs: int | Iterable[int]) -> set[int]:
    """The seqs a ``reject`` names; refused unless one or more integers."""
    seqs = {seq_or_seqs} if isinstance(seq_or_seqs, int) else set(seq_or_seqs)
    if not seqs or not all(isinstance(s, int) and not isinstance(s, bool) for s in seqs):
        raise RewriteRefused("reject needs one or more integer seqs")
    return seqs


def owned_prelude(rows: Sequence[dict[str, Any] | None], idx: int) -> list[int]:
    """Indexes (ascending) of the synthetic rows request ``rows[idx]`` owns:
    the rows right before it in its batch marked ``meta.synthetic: true`` or
    ``meta.owner`` = the request's id (``ledger.core.husks.owns``). ``rows``
    are in log order; None stands for an unreadable line (it ends the run)."""
    req = rows[idx]
    assert req is not None
    bid = req.get("batch", {}).get("id") if isinstance(req.get("batch"), dict) else None
    out = []
    j = idx - 1
    while j >= 0:
        r = rows[j]
        if r is None or not isinstance(r.get("batch"), dict) or r["batch"].get("id") != bid:
            break
        if not owns(r, req):
            break
        out.append(j)
        j -= 1
    return out[::-1]


def reject_targets(rows: Sequence[dict[str, Any] | None], hits: Iterable[int]) -> list[int]:
    """Indexes of every row a rejection of ``rows[i]`` for each ``i`` in
    ``hits`` rewrites: each request and the prelude it owns, each once, in
    the order they were named."""
    targets: dict[int, None] = {}
    for i in hits:
        for j in [*owned_prelude(rows, i), i]:
            targets[j] = None
    return list(targets)


def rejectable(workspace: str, line: bytes, row: dict[str, Any], where: str = "") -> bool:
    """Whether row ``row`` (stored as ``line``) is to be rewritten: False when
    it is already rejected (its husk keeps the inner original). Refused for a
    reset (a duplicate-key one too) and for any kind but ``message``.
    ``where`` names the row's place for the message."""
    if row.get("kind") == "reset" or fmt.readable_row_is_reset(line, row):
        raise RewriteRefused(
            f"workspace {workspace!r}: seq {row.get('seq')}{where} is a reset row; a "
            "rejection never rewrites a reset away"
        )
    if row.get("kind", "message") != "message":
        raise RewriteRefused(
            f"workspace {workspace!r}: seq {row.get('seq')} is a {row.get('kind')!r} row; "
            "only requests (kind 'message') are rejected"
        )
    return not is_husk(row)


def husks(
    workspace: str, targets: Iterable[tuple[int, bytes, dict[str, Any]]],
    where: Callable[[int], str] = lambda key: "",
) -> tuple[dict[int, bytes], list[int], list[int]]:
    """What a rejection writes for each target ``(key, stored line, row)``
    (``reject_targets``, on any engine): the husk line by key, the seqs
    rejected, and the seqs already rejected (left as they are); refused as
    ``rejectable`` refuses (``where(key)`` names the place)."""
    lines: dict[int, bytes] = {}
    rejected: list[int] = []
    already: list[int] = []
    for key, line, row in targets:
        if rejectable(workspace, line, row, where(key)):
            lines[key] = husk_line(line, row)
            rejected.append(row["seq"])
        else:
            already.append(row["seq"])
    return lines, rejected, already


def no_row(workspace: str, seqs: int | Sequence[int], verb: str) -> RewriteRefused:
    """The refusal for a rewrite naming a seq no readable row has."""
    return RewriteRefused(
        f"workspace {workspace!r}: no readable row with seq {seqs}; nothing was {verb}"
    )


def reject_result(
    rejected: Iterable[int], already: Iterable[int], epoch: int,
    recovered: dict[str, Any] | None = None,
) -> RejectResult:
    """The result of a reject, its seqs in order (``already`` once each)."""
    return RejectResult(sorted(rejected), sorted(set(already)), epoch, recovered)


# --- truncate -------------------------------------------------------------------


def truncate_seq(seq: Any) -> int:
    if not isinstance(seq, int) or isinstance(seq, bool):
        raise RewriteRefused("truncate_after needs an integer seq")
    return seq


def batch_split(
    workspace: str, seq: int, row: dict[str, Any], verb: str, prep: str
) -> str | None:
    """What refuses cutting the log at row ``seq`` (``row``) when that row
    does not end its batch (a batch is never split), naming both places the
    cut may go ("{verb} {prep} seq N": "fork at", "truncate after"); None when
    it ends its batch or has no readable batch."""
    b = b_raw if isinstance(b_raw := row.get("batch"), dict) else {}
    n, i = b.get("n"), b.get("i")
    if not isinstance(n, int) or not isinstance(i, int) or isinstance(n, bool) \
            or isinstance(i, bool) or i == n - 1:
        return None
    last, first = seq + (n - 1 - i), seq - i
    return (f"workspace {workspace!r}: seq {seq} is row {i + 1} of {n} of batch "
            f"{b.get('id')!r}; a batch is never split: {verb} {prep} seq {last} (its last "
            f"row) or {prep} seq {first - 1} (before it)")


def check_truncate(
    workspace: str, seq: int, row: dict[str, Any], at: tuple[int, int], floor: Boundary | None
) -> None:
    """Refuse truncating after row ``seq`` (``row``, at position ``at``) when
    it would split its batch (``seq`` must end it) or drop the newest manual
    reset (the rows it hides would be retrievable again: fail closed)."""
    if (split := batch_split(workspace, seq, row, "truncate", "after")) is not None:
        raise RewriteRefused(split)
    if floor is not None and floor.readable and (floor.segment, floor.offset) > at:
        raise RewriteRefused(
            f"workspace {workspace!r}: truncating after seq {seq} would remove the "
            f"privacy floor (the manual reset at seq {floor.seq}); truncate after "
            f"seq {floor.seq} or later"
        )


# --- purge ----------------------------------------------------------------------


def purge_cut(rows: Sequence[dict[str, Any] | None], floor_index: int) -> int:
    """Index of the first row a purge keeps, given ``rows`` in log order up to
    and including the floor ``rows[floor_index]``: the floor row goes too
    when it is a batch of its own; a floor inside a larger batch keeps that
    whole batch; an unreadable floor is kept (it may be a reset)."""
    floor = rows[floor_index]
    if floor is None:
        return floor_index
    b = b_raw if isinstance(b_raw := floor.get("batch"), dict) else {}
    if b.get("n") == 1:
        return floor_index + 1
    j = floor_index
    while j > 0:
        prev = rows[j - 1]
        pb = pb_raw if prev is not None and isinstance(pb_raw := prev.get("batch"), dict) else {}
        if prev is None or pb.get("id") != b.get("id"):
            break
        j -= 1
    return j
