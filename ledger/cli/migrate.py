"""``tledger migrate``: copy workspaces between roots of any engine."""

from __future__ import annotations

import argparse
from typing import Any

from ledger.cli.registry import arg, command


@command(
    "migrate",
    help="copy workspaces between roots (files <-> PostgreSQL), byte for byte",
    description="Copy every workspace of SRC (or those named with --workspace) into DST, "
    "rows byte-identical. Either root may be a directory or a postgresql:// URL. A "
    "workspace damaged at SRC or already in DST is refused before anything is copied; "
    "each copy is all-or-nothing and checked afterwards. SRC is only read.",
    example="tledger migrate ./.tledger postgresql://agent@db/transcripts",
    args=[
        arg("src", metavar="SRC"),
        arg("dst", metavar="DST"),
        arg("--workspace", action="append", default=None, metavar="WS",
            help="copy only this workspace (repeatable)"),
    ],
    json_help="print the result as JSON",
)
def cmd_migrate(args: argparse.Namespace, ctx: Any) -> int:
    from ledger.cli import durable_root
    from ledger.core.ids import validate_workspace
    from ledger.transcript.store import Store
    from recovery.migrate import migrate

    names = [validate_workspace(w) for w in args.workspace] if args.workspace else None
    out = migrate(Store(durable_root(args.src)), Store(durable_root(args.dst)), names)
    lines = [f"{c['workspace']}: {c['rows']} rows, {c['bytes']} bytes" for c in out["copied"]]
    ctx.emit_result(args.json, out, "\n".join(lines) or "nothing to copy")
    return 0
