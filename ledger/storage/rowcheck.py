"""Check and repair reports of the engines that keep rows by seq (PostgreSQL,
memory): what their ``verify`` finds (``Problem``), the findings it becomes,
and their ``repair`` report (``RowRepair``).

The codes: ``bad-row`` (a row whose bytes fail their checksum, do not decode
or carry another seq than their key), ``torn-batch`` (a batch whose rows are
not ``i = 0 .. n-1`` side by side), ``seq-gap`` (missing seqs the quarantine
does not account for: a notice, nothing can bring them back),
``projection`` (a stored boundary reason that disagrees with the row),
``head`` (next seq, window or floor that disagree with the rows); each engine
may add its own (notices about the recall index, the quarantine).
"""

from __future__ import annotations

import builtins  # Verified has a field named bytes
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ledger.core import format as fmt
from ledger.core.checks import DAMAGE, NOTICE, CheckReport, Finding, RepairReport
from ledger.core.toolpairs import pair


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
        elif b'"tool_' in raw:
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
