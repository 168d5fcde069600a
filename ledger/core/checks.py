"""What an engine's ``verify``, ``repair``, ``load_rows`` and
``clean_quarantine`` return (``ledger.storage.engine.WorkspaceEngine``), for
every engine: findings with a severity, the check report, the base of the
repair reports, and the counts of a load and of a quarantine cleanup.

Every finding has a severity: **damage** (bytes or rows that fail
verification; ``check`` exits 1) or **notice** (reported, nothing lost;
``check`` exits 0). Pure: no I/O.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from ledger.core.errors import RecoveryError

DAMAGE = "damage"
NOTICE = "notice"

# How ``repair`` chooses what leaves the log (docs/how-to/recover.md): keep every
# verified batch, cut only a damaged tail, keep the prefix before the first
# damage, or refuse when anything is damaged.
POLICIES = ("salvage", "tail", "prefix", "strict")

# A long check or repair reports (bytes done, bytes in all) to this callback.
Progress = Callable[[int, int], None]


def check_policy(policy: str) -> None:
    """RecoveryError unless ``policy`` is one of ``POLICIES``."""
    if policy not in POLICIES:
        raise RecoveryError(f"unknown repair policy {policy!r}; use one of {', '.join(POLICIES)}")


@dataclass
class Finding:
    """One problem ``verify`` found: severity, code, what and what to do, and
    where (the file engine: segment, offset and length; the row engines: seq)."""

    severity: str
    code: str
    message: str
    action: str
    segment: str | None = None
    offset: int | None = None
    length: int | None = None
    seq: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"severity": self.severity, "code": self.code, "segment": self.segment,
                "offset": self.offset, "length": self.length, "seq": self.seq,
                "message": self.message, "action": self.action}


def count(findings: list[Finding], severity: str) -> int:
    return sum(1 for f in findings if f.severity == severity)


@dataclass
class CheckReport:
    """The result of ``verify``: findings plus what was read. ``receipt`` is
    the file engine's receipt status; a row engine names itself there
    (``database``, ``memory``) and reads no segments."""

    workspace: str
    findings: list[Finding]
    segments: int
    rows: int
    bytes: int
    receipt: str

    @property
    def damage(self) -> int:
        return count(self.findings, DAMAGE)

    @property
    def notices(self) -> int:
        return count(self.findings, NOTICE)

    @property
    def ok(self) -> bool:
        return self.damage == 0

    def to_dict(self) -> dict[str, Any]:
        return {"workspace": self.workspace, "ok": self.ok, "damage": self.damage,
                "notices": self.notices, "segments": self.segments, "rows": self.rows,
                "bytes": self.bytes, "receipt": self.receipt,
                "findings": [f.to_dict() for f in self.findings]}

    def text(self) -> str:
        lines = []
        for f in self.findings:
            where = f.segment or "-"
            if f.offset is not None:
                where += f"@{f.offset}"
            seq = f" seq={f.seq}" if f.seq is not None else ""
            length = f" ({f.length} bytes)" if f.length is not None else ""
            lines.append(f"{f.severity:6} {where}{seq}: {f.message}{length} -- {f.action}")
        verdict = "damaged" if self.damage else "ok"
        lines.append(
            f"{self.workspace}: {verdict}: {self.damage} damage, {self.notices} notices "
            f"({self.segments} segments, {self.rows} rows, {self.bytes} bytes; receipt "
            f"{self.receipt})"
        )
        return "\n".join(lines)


@dataclass
class RepairReport(ABC):
    """The result of ``repair``: what changed (or, with ``dry_run``, would),
    a refusal when the policy cannot make the workspace consistent, the new
    epoch, and ``after``, the check that runs once the repair is done. Each
    engine says what it removed in ``details`` (the keys its JSON report has
    between ``consistent`` and ``epoch``) and in ``text``."""

    workspace: str
    policy: str
    dry_run: bool
    changed: bool = False
    refused: str | None = None
    epoch: int | None = None
    after: CheckReport | None = field(default=None)

    @property
    def consistent(self) -> bool:
        return self.refused is None and (self.after is None or self.after.ok)

    def exit_code(self) -> int:
        """0 when consistent afterwards; with ``dry_run``, 0 when nothing would change."""
        if self.dry_run:
            return 1 if self.changed or self.refused else 0
        return 0 if self.consistent else 1

    @abstractmethod
    def details(self) -> dict[str, Any]:
        """The engine's own part of ``to_dict`` (what was removed, and where to)."""

    @abstractmethod
    def text(self) -> str:
        """The report as ``tledger repair`` prints it."""

    def to_dict(self) -> dict[str, Any]:
        return {"workspace": self.workspace, "policy": self.policy, "dry_run": self.dry_run,
                "changed": self.changed, "consistent": self.consistent, **self.details(),
                "epoch": self.epoch,
                "check": self.after.to_dict() if self.after is not None else None}


@dataclass(frozen=True)
class Counts:
    """Counts an engine operation reports (its JSON: ``to_dict``)."""

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class Loaded(Counts):
    """What ``load_rows`` wrote: rows and bytes (each line with its newline)."""

    rows: int
    bytes: int


@dataclass(frozen=True)
class QuarantineCleaned(Counts):
    """What ``clean_quarantine`` removed: entries and their bytes."""

    removed: int
    bytes: int
