"""Check and repair of the engines that keep rows by seq (PostgreSQL,
memory), written once: what their ``verify`` finds in the stored rows
(``verify_rows``), the head (``check_head``) and the gaps (``explain_gaps``),
the findings it becomes (``report``), and their ``repair`` report
(``RowRepair``).

The codes: ``bad-row`` (a row whose bytes fail their checksum, do not decode,
carry another seq than their key, or do not follow the row before it),
``torn-batch`` (a batch whose rows are not ``i = 0 .. n-1`` side by side),
``seq-gap`` (missing seqs the quarantine does not account for: a notice,
nothing can bring them back; before the first row is fine, a purge removes a
prefix), ``projection`` (a stored boundary reason that disagrees with the
row), ``head`` (next seq, window or floor that disagree with the rows; a
floor whose row is gone stays, fail closed); each engine may add its own
(notices about the recall index).
"""

from __future__ import annotations

import builtins  # Verified has a field named bytes
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ledger.core.checks import DAMAGE, NOTICE, CheckReport, Finding, RepairReport
from ledger.core.format import rows as fmt
from ledger.core.rules import fold
from ledger.core.toolpairs import pair
from ledger.core.windows import Boundary, batch_boundaries
from ledger.storage.primitives import StoredRow
from ledger.storage.seqpages import RowState


@dataclass
class Problem:
    code: str
    seq: int | None
    message: str
    length: int | None = None
    notice: bool = False  # True: reported, but not damage (check exits 0)
    action: str | None = None  # what to do, when not the usual one for the code


@dataclass
class Verified:
    """What a row engine's ``verify`` read and found; ``row`` and ``batch``
    check one stored row and one batch the same way on every row engine."""

    rows: int = 0
    bytes: int = 0
    problems: list[Problem] = field(default_factory=list)
    bad_batches: set[str] = field(default_factory=set)
    may_be_reset: list[int] = field(default_factory=list)
    tool_rows: list[dict[str, Any]] = field(default_factory=list)  # since the newest reset
    projection: dict[int, str | None] = field(default_factory=dict)  # seq -> right boundary
    window: Boundary | None = None  # the newest boundary the rows show
    floor: Boundary | None = None  # the newest manual reset the rows show
    last: int | None = None  # the last seq
    gaps: list[tuple[int, int]] = field(default_factory=list)  # (seq before, seq after)
    bad_seqs: list[int] = field(default_factory=list)  # the rows of the bad batches
    recall_index: bool = False  # (PostgreSQL) the workspace has a recall index

    def open_calls(self) -> list[Problem]:
        """``open_tool_call`` notices: calls of the active window without a
        result (``ledger.core.toolpairs``), the file engine's notice too."""
        return [Problem("open_tool_call", self.tool_rows[c.row].get("seq"),
                        f"tool call {c.id!r} in the active window has no result",
                        notice=True, action="the next user message settles it with an error "
                        "result, or Conversation.cancel_open_calls(reason)")
                for c in pair(self.tool_rows).open_calls()]

    def row(self, seq: int, batch_id: str, raw: builtins.bytes) -> dict[str, Any] | None:
        """Count row ``seq`` (its bytes ``raw``, no newline) and decode it; a
        ``bad-row`` when its bytes fail verification or carry another seq
        (noting a reset they may hide). None when it does not decode."""
        self.rows += 1
        self.bytes += len(raw) + 1
        data = fmt.decode_line(raw)
        if data is None or data.get("seq") != seq:
            self.problems.append(Problem("bad-row", seq, "row fails verification (checksum "
                                         "or framing)", len(raw)))
            self.bad_batches.add(batch_id)
            if fmt.raw_may_be_reset(raw):
                self.may_be_reset.append(seq)
        elif data.get("kind") == "reset":
            self.tool_rows = []
        elif b'"tool_' in raw or fmt.may_spell_by_escape(raw):  # (an escaped "tool_" too)
            self.tool_rows.append(data)
        return data

    def batch(self, batch_id: str, first_seq: int,
              dicts: list[dict[str, Any] | None]) -> list[dict[str, Any]] | None:
        """The decoded rows of one run of ``batch_id`` when every row decodes,
        else None; a ``torn-batch`` when they are not ``i = 0 .. n-1`` side by
        side."""
        ok = [d for d in dicts if d is not None]
        if len(ok) != len(dicts):
            return None
        marks = [b if isinstance(b := d.get("batch"), dict) else {} for d in ok]
        if not all(b.get("id") == batch_id and b.get("n") == len(ok) and b.get("i") == i
                   for i, b in enumerate(marks)):
            self.problems.append(Problem("torn-batch", first_seq, f"batch {batch_id!r} is not "
                                         f"whole ({len(ok)} rows side by side)"))
            self.bad_batches.add(batch_id)
        return ok


def verify_rows(rows: Iterable[StoredRow], out: Verified | None = None) -> Verified:
    """What the stored ``rows`` (seq order) show (module doc): each row and
    batch checked, the boundary reasons they should have, the window and floor
    they fold to, the gaps between them."""
    out = out if out is not None else Verified()
    run: list[StoredRow] = []
    for r in rows:
        if run and run[-1].batch_id != r.batch_id:
            _run(out, run)
            run = []
        if out.last is not None and r.seq <= out.last:
            out.problems.append(Problem("bad-row", r.seq, f"seq {r.seq} follows seq "
                                        f"{out.last}", len(r.raw)))
            out.bad_batches.add(r.batch_id)
        elif out.last is not None and r.seq != out.last + 1:
            out.gaps.append((out.last, r.seq))
        out.last = max(r.seq, out.last or 0)
        run.append(r)
    if run:
        _run(out, run)
    return out


def _run(out: Verified, run: list[StoredRow]) -> None:
    """One run of rows of one batch id (``verify_rows``)."""
    bid = run[0].batch_id
    ok = out.batch(bid, run[0].seq, [out.row(r.seq, bid, r.raw) for r in run])
    right = {run[i].seq: reason for i, reason in batch_boundaries(ok)} if ok else {}
    for r in run:
        want = right.get(r.seq)
        if r.boundary != want and bid not in out.bad_batches:
            out.problems.append(Problem("projection", r.seq, f"boundary {r.boundary!r}, the "
                                        f"row says {want!r}"))
            out.projection[r.seq] = want
        if want is not None:
            out.window, out.floor = fold(out.window, out.floor, [Boundary(r.seq, r.seq, 0, want)])
    if bid in out.bad_batches:
        out.bad_seqs += [r.seq for r in run]


def explain_gaps(out: Verified, held: Callable[[int, int], int], quarantine: str) -> None:
    """A ``seq-gap`` notice for each gap of which ``held(before, after)`` (how
    many seqs strictly between are in the quarantine, named ``quarantine``)
    does not account for every seq; nothing can fill it."""
    for before, after in out.gaps:
        if held(before, after) < after - before - 1:
            missing = f"seq {before + 1}" if after == before + 2 else \
                f"seqs {before + 1}..{after - 1}"
            out.problems.append(Problem(
                "seq-gap", after, f"seq {after} follows seq {before}: {missing} missing and "
                f"not in {quarantine} (deleted outside transcript-ledger, or their "
                "quarantine entries were removed); nothing to repair", notice=True))


def check_head(out: Verified, head: RowState) -> None:
    """``head`` problems: next seq, window and floor against what the rows show
    (the floor may stay past them, fail closed: its row may have been purged)."""
    if out.last is not None and head.next_seq <= out.last:
        out.problems.append(Problem("head", None, f"head next seq {head.next_seq} is not "
                                    f"past the last row {out.last}"))
    floor = out.floor.seq if out.floor is not None else None
    if head.floor is not None and (floor is None or floor < head.floor.seq):
        floor = head.floor.seq
    if (head.floor.seq if head.floor else None) != floor:
        out.problems.append(Problem("head", None, f"head floor {head.floor}, the rows say "
                                    f"{floor}"))
    window = max(out.window.seq if out.window is not None else 0, floor or 0)
    if head.window_seq != window:
        out.problems.append(Problem("head", None, f"head window {head.window_seq}, the rows "
                                    f"say {window}"))


def actions(quarantine: str) -> dict[str, str]:
    """What to do per code (``report``), repair putting rows in ``quarantine``."""
    return {
        "bad-row": f"tledger repair {{ws}} (its batch goes to {quarantine})",
        "torn-batch": f"tledger repair {{ws}} (the batch goes to {quarantine})",
        "seq-gap": f"none: {quarantine} does not hold the missing rows",
        "projection": "tledger repair {ws} (rewrites the row's boundary reason)",
        "head": "tledger repair {ws} (recomputes next seq, window and floor)",
    }


def report(workspace: str, problems: Iterable[Problem], actions: dict[str, str], rows: int,
           nbytes: int, engine: str) -> CheckReport:
    """The check report of ``problems``; ``actions`` says what to do per code
    (``{ws}`` is the workspace), ``engine`` fills the report's receipt field."""
    found = [Finding(NOTICE if p.notice else DAMAGE, p.code, p.message,
                     (p.action or actions[p.code]).format(ws=workspace), None, None,
                     p.length, p.seq)
             for p in problems]
    return CheckReport(workspace, found, 0, rows, nbytes, engine)


@dataclass
class RowRepair(RepairReport):
    """A row engine's repair report: the damage it found and the batches it
    moved to ``quarantine`` (the place's name, for the text)."""

    problems: list[dict[str, Any]] = field(default_factory=list)
    quarantined_batches: list[str] = field(default_factory=list)
    quarantine: str = "tl_quarantine"

    def details(self) -> dict[str, Any]:
        return {"problems": self.problems, "quarantined_batches": self.quarantined_batches}

    def text(self) -> str:
        would = "would " if self.dry_run else ""
        lines = [f"{p['code']} seq={p['seq']}: {p['message']}" for p in self.problems]
        lines += [f"{would}move batch {b!r} to {self.quarantine}"
                  for b in self.quarantined_batches]
        if self.changed:
            lines.append(f"{self.workspace}: {would}recompute the head row (a new epoch)")
        else:
            lines.append(f"{self.workspace}: consistent, nothing to repair")
        return "\n".join(lines)
