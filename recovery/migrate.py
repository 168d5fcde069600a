"""Moving workspaces between engines (``tledger migrate SRC DST``).

A workspace is copied only when ``check`` finds no damage in it (repair it
first), into a destination where it does not exist yet. Its rows travel as
their stored bytes -- unknown fields, key order and imported bytes included
-- and land through the destination engine's ``load_rows``, which is
all-or-nothing: one transaction on PostgreSQL, one directory rename on files.
So a failure mid-way leaves the destination without a partial workspace.
``check`` runs on the result before the copy is reported done.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ledger.core.errors import LedgerError, RecoveryError
from ledger.transcript.store import Store
from recovery.check import check

__all__ = ["migrate"]

def migrate(src: Store, dst: Store, workspaces: Sequence[str] | None = None) -> dict[str, Any]:
    """Copy ``workspaces`` (default: all of ``src``) into ``dst``; returns what
    was copied. Refuses, before copying anything, a workspace that is damaged
    at the source or already present at the destination."""
    names = list(workspaces) if workspaces else src.workspaces()
    present = set(dst.workspaces())
    for ws in names:
        if ws in present:
            raise LedgerError(f"workspace {ws!r} already exists in {dst!r}; nothing was copied")
        report = check(src.history(ws))
        if not report.ok:
            raise RecoveryError(f"workspace {ws!r} is damaged at {src!r} ({report.damage} "
                                f"findings): run `tledger repair {ws}` there first; nothing "
                                "was copied")
    copied = []
    for ws in names:
        target = dst.history(ws)
        out = target.engine.load_rows(src.history(ws).rows())
        after = check(target)
        if not after.ok:
            raise RecoveryError(f"workspace {ws!r}: the copy in {dst!r} fails check "
                                f"({after.damage} findings)")
        copied.append({"workspace": ws, **out.to_dict()})
    return {"source": repr(src), "destination": repr(dst), "copied": copied}
