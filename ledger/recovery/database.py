"""``check`` and ``repair`` for histories in a database engine: the engine
verifies its own rows (``ledger.storage.postgres.verify``); this module turns
its findings into the reports the CLI prints for files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ledger.recovery.scan import DAMAGE, NOTICE, Finding

ACTIONS = {
    "bad-row": "tledger repair {ws} (its batch goes to tl_quarantine)",
    "torn-batch": "tledger repair {ws} (the batch goes to tl_quarantine)",
    "seq-gap": "none: tl_quarantine does not hold the missing rows",
    "projection": "tledger repair {ws} (recomputes the boundary column)",
    "head": "tledger repair {ws} (recomputes the head row)",
}


def is_database(history: Any) -> bool:
    return hasattr(history, "db") and hasattr(history, "_head")


def findings(ws: str, problems: list[Any]) -> list[Finding]:
    return [Finding(NOTICE if getattr(p, "notice", False) else DAMAGE, p.code, p.message,
                    (getattr(p, "action", None) or ACTIONS[p.code]).format(ws=ws), None, None,
                    p.length, p.seq)
            for p in problems]


def check(history: Any) -> Any:
    from ledger.core.errors import WorkspaceNotFound
    from ledger.recovery.check import Report
    from ledger.storage.postgres.verify import verify

    if not history.exists():
        raise WorkspaceNotFound(f"workspace {history.workspace!r} has no history in "
                                f"{history.db.where}")
    found = verify(history)
    return Report(history.workspace, findings(history.workspace, found.problems), 0,
                  found.rows, found.bytes, "database")


@dataclass
class DatabaseRepair:
    workspace: str
    policy: str
    dry_run: bool
    changed: bool = False
    problems: list[dict[str, Any]] = field(default_factory=list)
    quarantined_batches: list[str] = field(default_factory=list)
    epoch: int | None = None
    after: Any = None

    @property
    def consistent(self) -> bool:
        return self.after is None or self.after.ok

    def exit_code(self) -> int:
        if self.dry_run:
            return 1 if self.changed else 0
        return 0 if self.consistent else 1

    def to_dict(self) -> dict[str, Any]:
        return {"workspace": self.workspace, "policy": self.policy, "dry_run": self.dry_run,
                "changed": self.changed, "consistent": self.consistent,
                "problems": self.problems, "quarantined_batches": self.quarantined_batches,
                "epoch": self.epoch,
                "check": self.after.to_dict() if self.after is not None else None}

    def text(self) -> str:
        would = "would " if self.dry_run else ""
        lines = [f"{p['code']} seq={p['seq']}: {p['message']}" for p in self.problems]
        lines += [f"{would}move batch {b!r} to tl_quarantine" for b in self.quarantined_batches]
        if self.changed:
            lines.append(f"{self.workspace}: {would}recompute the head row (a new epoch)")
        else:
            lines.append(f"{self.workspace}: consistent, nothing to repair")
        return "\n".join(lines)


def repair(history: Any, policy: str, dry_run: bool) -> DatabaseRepair:
    from ledger.core.errors import RecoveryError
    from ledger.storage.postgres.verify import repair as repair_rows

    if policy == "strict":
        found = check(history)
        if not found.ok:
            raise RecoveryError(f"workspace {history.workspace!r}: damage found and policy "
                                "strict refuses to remove anything")
    out = repair_rows(history, dry_run)
    report = DatabaseRepair(history.workspace, policy, dry_run, out["changed"],
                            out["problems"], out["quarantined_batches"], out["epoch"])
    if not dry_run:
        report.after = check(history)
    return report
