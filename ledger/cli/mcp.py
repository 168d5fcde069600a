"""``tledger mcp``: serve one workspace's session_history over MCP (stdio, or
streamable HTTP on the loopback interface)."""

from __future__ import annotations

import argparse
from typing import Any

from ledger.cli.registry import arg, command, non_negative


@command(
    "mcp",
    help="serve session_history over MCP (stdio)",
    description="Serve the session_history tool (list, search, read) and the current "
    "window (resource ledger://window) of one workspace over MCP on stdio. Read-only "
    "unless --allow-write adds the append and clear tools; --allow-branches adds fork, "
    "rewind and branches (never a rewind past the privacy floor). Needs the mcp extra: "
    "pip install 'transcript-ledger[mcp]'.",
    example="tledger mcp --root ./.tledger --workspace ws-1",
    args=[
        arg("--root", dest="mcp_root", default=None, metavar="DIR",
            help="store root (default: tledger's --root, $TLEDGER_ROOT, ./.tledger)"),
        arg("--workspace", dest="workspace", required=True, metavar="WS"),
        arg("--allow-write", action="store_true",
            help="also offer the append and clear tools (off by default)"),
        arg("--allow-branches", action="store_true",
            help="also offer the fork, rewind and branches tools (off by default: a model "
            "must not fork or rewind its own history unless the operator allows it)"),
        arg("--http", type=int, default=None, metavar="PORT",
            help="serve streamable HTTP on 127.0.0.1:PORT (path /mcp) instead of stdio"),
        arg("--no-retrieval", action="store_true",
            help="serve with retrieval turned off (every call: retrieval_disabled)"),
        arg("--lock-timeout", type=non_negative, default=10.0, metavar="SECONDS",
            help="how long a call waits for a writer (default 10; then "
            "history_unavailable)"),
    ],
)
def cmd_mcp(args: argparse.Namespace, ctx: Any) -> int:
    from ledger.cli import durable_root
    from ledger.integrations.mcp_server import build_server

    root = durable_root(args.mcp_root or ctx.root)
    options: dict[str, Any] = {}
    if ctx.embedder:  # tledger --embedder: the semantic channel of ranked search
        from ledger.core.embedders import from_spec

        options["embedder"] = from_spec(ctx.embedder)
    server = build_server(root, args.workspace, allow_write=args.allow_write,
                          allow_branches=args.allow_branches,
                          retrieval=not args.no_retrieval, lock_timeout=args.lock_timeout,
                          **options)
    if args.http is None:
        server.run("stdio")
    else:  # loopback only: the SDK then also turns on DNS-rebinding protection
        server.run("streamable-http", host="127.0.0.1", port=args.http)
    return 0
