"""Branch commands: fork, rewind, branches (docs/fork.md)."""

from __future__ import annotations

import argparse
from typing import Any

from ledger.cli.registry import WS, arg, command
from ledger.cli.tables import print_table


@command(
    "fork",
    help="make a new workspace from a workspace's rows up to a seq",
    description="Make workspace NEW hold WS's rows up to and including SEQ (default: the "
    "newest row) byte for byte -- seqs, windows, the privacy floor -- then an origin event; "
    "WS is not changed. SEQ must end its batch and lie after the privacy floor.",
    example="tledger fork ws-1 ws-1-retry --at 41",
    args=[WS, arg("new", metavar="NEW"),
          arg("--at", type=int, default=None, metavar="SEQ", help="the last row to take")],
    json_help="print the fork's origin as JSON",
)
def cmd_fork(args: argparse.Namespace, ctx: Any) -> int:
    from ledger.core.ids import validate_workspace

    new = validate_workspace(args.new)  # InvalidWorkspace: a usage error (exit 2)
    fork = ctx.store().history(args.workspace).fork(new, at=args.at)
    origin = fork.origin
    assert origin is not None  # the fork just wrote its origin event
    ctx.emit_result(args.json, origin.to_dict(),
                    f"{new}: forked from {args.workspace} at seq {origin.seq}")
    return 0


@command(
    "rewind",
    help="hide every row after a seq (non-destructive undo)",
    description="Hide every row of WS after SEQ from the model and from session_history: "
    "each becomes a record keeping the original (export and `rows` still show it; "
    "`truncate` deletes for real). A rollover or compaction after SEQ is undone with it. "
    "A new epoch. Undoing a manual clear takes --restore-cleared.",
    example="tledger rewind ws-1 --to 41",
    args=[WS, arg("--to", type=int, required=True, metavar="SEQ"),
          arg("--expect-epoch", type=int, default=None, metavar="EPOCH",
              help="refuse unless the workspace is still at this epoch"),
          arg("--restore-cleared", action="store_true",
              help="allow bringing back rows a manual clear hides (a user's decision)")],
    json_help="print the result as JSON",
)
def cmd_rewind(args: argparse.Namespace, ctx: Any) -> int:
    h = ctx.store().history(args.workspace)
    out = h.rewind(to=args.to, expect_epoch=args.expect_epoch,
                   restore_cleared=args.restore_cleared)
    ctx.emit_result(args.json, out.to_dict(),
                    f"{args.workspace}: rewound to seq {out.to} ({len(out.rewound)} rows "
                    f"hidden, epoch {out.epoch})")
    return 0


@command(
    "branches",
    help="list the forks made of a workspace",
    description="List the workspaces forked from WS: each with the seq it was taken at, "
    "WS's epoch then, and when (ms since the epoch).",
    example="tledger branches ws-1",
    args=[WS],
    json_help="print the forks as a JSON list",
)
def cmd_branches(args: argparse.Namespace, ctx: Any) -> int:
    found = ctx.store().branches(args.workspace)
    if args.json:
        ctx.emit_json([b.to_dict() for b in found])
        return 0
    if not found:
        ctx.emit_line(f"{args.workspace}: no forks")
        return 0
    print_table(ctx, ["workspace", "seq", "epoch", "created"],
                [[b.workspace, str(b.seq), str(b.epoch), str(b.created)] for b in found])
    return 0
