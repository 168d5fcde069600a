"""``tledger db``: the database behind a ``postgresql://`` root (Citus layout)."""

from __future__ import annotations

import argparse
from typing import Any

from ledger.cli.registry import arg, command


def _describe(out: dict[str, Any]) -> str:
    if not out["citus"]:
        return f"{out['database']}: plain PostgreSQL (no citus extension)"
    lines = [f"{out['database']}: Citus"]
    if not out["tables"]:
        lines.append("  no transcript tables yet: a store creates them distributed")
    for name, t in out["tables"].items():
        by = f" by {t['column']}" if t["column"] else ""
        lines.append(f"  {name}: {t['kind']}{by}")
    for node in out["nodes"]:
        lines.append(f"  node {node['node']}: {node['tl_rows_shards']} tl_rows shards"
                     + ("" if node["active"] else " (inactive)"))
    if out.get("converted"):
        lines.append(f"  distributed now: {', '.join(out['converted'])}")
    lines += [f"  problem: {p}" for p in out["problems"]]
    return "\n".join(lines)


@command(
    "db",
    help="the database of a postgresql:// root: Citus layout, and converting to it",
    description="status: how the database holds the transcript tables (plain PostgreSQL, "
    "or Citus: each table distributed by workspace or a reference table, and the nodes "
    "with their share of tl_rows shards). distribute: convert a schema created before "
    "the citus extension to the distributed layout in place, in one transaction (Citus "
    "copies the rows into shards; writers wait for it); running it again changes "
    "nothing. A store refuses a Citus database whose tables are still plain. Exit 1 "
    "when status finds the layout wrong.",
    example="tledger --root postgresql://agent@db/transcripts db distribute",
    args=[arg("action", choices=["status", "distribute"])],
    json_help="print the layout as JSON",
    exits={1: "also when status finds the layout wrong (problems listed)"},
)
def cmd_db(args: argparse.Namespace, ctx: Any) -> int:
    from ledger.cli import UsageError
    from ledger.storage.registry import engine_for

    spec = engine_for(ctx.root)
    if spec.name != "postgresql":
        what = "a directory of the file engine" if spec.name == "files" else \
            f"a root of the {spec.name} engine"
        raise UsageError("db needs a postgresql:// root (--root or $TLEDGER_ROOT); "
                         f"{ctx.root!r} is {what}")
    from ledger.storage.postgres import admin

    out = admin.distribute(ctx.root) if args.action == "distribute" else admin.status(ctx.root)
    ctx.emit_result(args.json, out, _describe(out))
    return 1 if out.get("problems") else 0
