"""Interop commands: export, show, import-claude-code, import-codex.

Part of the CLI face (like ``ledger.cli``): the import commands call
``recovery.imports``, imported inside the handlers.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ledger.cli import display
from ledger.cli.registry import WS, arg, command, positive_int
from ledger.storage.engine import DURABILITY_LEVELS

API_FORMATS = ("openai-chat", "openai-responses", "anthropic")
EXPORT_FORMATS = (*API_FORMATS, "markdown", "jsonl")


@command(
    "export",
    help="print the provider view as an API request body, or the history",
    description="Print the provider view as the request body of an API (openai-chat, "
    "openai-responses, anthropic), or the whole history as markdown or jsonl.",
    example="tledger export ws-1 --format anthropic --model claude-sonnet-4-5",
    args=[
        WS,
        arg("--format", choices=EXPORT_FORMATS, required=True),
        arg("--model", default=None, help="model in the request body"),
        arg("--max-tokens", type=positive_int, default=4096, help="anthropic max_tokens"),
        arg("--system-role", choices=("system", "developer"), default="system",
            help="role of system rows for the OpenAI APIs"),
        arg("--no-reasoning", action="store_true", help="markdown: leave reasoning out"),
    ],
)
def cmd_export(args: argparse.Namespace, ctx: Any) -> int:
    from ledger.adapters import to_request

    h = ctx.store().history(args.workspace)
    if args.format in API_FORMATS:
        options: dict[str, Any] = {}
        if args.model:
            options["model"] = args.model
        if args.format == "anthropic":
            options["max_tokens"] = args.max_tokens
        else:
            options["system_role"] = args.system_role
        body = to_request(args.format, [r.to_dict() for r in h.provider_view()], **options)
        ctx.emit_json(body)
        return 0
    if args.format == "jsonl":
        ctx.emit_rows(h.rows())
        return 0
    blocks = display.layout(
        (r.to_dict() for r in h.rows()), reasoning=not args.no_reasoning, max_lines=None
    )
    for line in display.render_markdown(blocks, title=f"Transcript: {args.workspace}"):
        ctx.emit_line(line)
    return 0


def _use_color(choice: str, stream: Any) -> bool:
    if choice == "always":
        return True
    if choice == "never" or os.environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


@command(
    "show",
    help="render the whole history for people",
    description="Render every window of a history: boundaries as separators, lead-ins "
    "hidden, warnings as machine messages, rejected requests restored and marked. "
    "Colour and a pager in a terminal; plain text when piped.",
    example="tledger show ws-1 --full",
    args=[
        WS,
        arg("--color", choices=("auto", "always", "never"), default="auto"),
        arg("--no-pager", action="store_true"),
        arg("--full", action="store_true", help="do not cut long tool input/output"),
        arg("--max-lines", type=positive_int, default=40, help="lines per tool input/output"),
        arg("--no-reasoning", action="store_true", help="leave reasoning out"),
    ],
    json_help="print the rows as JSONL instead of rendering them",
)
def cmd_show(args: argparse.Namespace, ctx: Any) -> int:
    h = ctx.store().history(args.workspace)
    if args.json:  # the rows themselves, for a script that asked for JSON
        ctx.emit_rows(h.rows())
        return 0
    rows = (r.to_dict() for r in h.rows())
    blocks = display.layout(
        rows, reasoning=not args.no_reasoning, max_lines=None if args.full else args.max_lines
    )
    rich_ok = True
    if _use_color(args.color, ctx.stdout):
        try:
            from rich.console import Console
        except ImportError:  # rich is optional at run time: plain text still works
            rich_ok = False
        if rich_ok:
            console = Console(
                file=ctx.stdout, force_terminal=True, highlight=False, soft_wrap=False
            )
            page = not args.no_pager and ctx.stdout is sys.stdout and sys.stdout.isatty()
            if page:
                # less needs -R for colours; -F quits at once when the text fits
                # on one screen and -X keeps it on screen afterwards (git's default).
                os.environ.setdefault("LESS", "FRX")
                with console.pager(styles=True):
                    for renderable in display.render_rich(blocks):
                        console.print(renderable)
            else:
                for renderable in display.render_rich(blocks):
                    console.print(renderable)
            return 0
    width = os.get_terminal_size().columns if _is_tty(ctx.stdout) else 80
    for line in display.render_text(blocks, width=min(width, 120)):
        ctx.emit_line(line)
    return 0


def _is_tty(stream: Any) -> bool:
    try:
        return bool(stream.isatty()) and stream is sys.stdout
    except (AttributeError, ValueError):
        return False


def _import(fmt: str) -> Any:
    def handler(args: argparse.Namespace, ctx: Any) -> int:
        from recovery.imports import import_file

        store = ctx.store(durability=args.durability)
        report = import_file(store, args.workspace, args.file, fmt, strict=args.strict)
        ctx.emit_json(report.to_dict())
        return 0

    return handler


for _name, _fmt, _what in (
    ("import-claude-code", "claude-code", "a Claude Code session JSONL"),
    ("import-codex", "codex", "a Codex CLI rollout JSONL"),
):
    command(
        _name,
        help=f"import {_what} (salvaging damage)",
        description=f"Import {_what} into WS. Readable records become rows (the original "
        "in meta.source) or bookkeeping in meta; unreadable bytes go to quarantine with "
        "their offsets. Importing the same file again adds nothing. Prints a report.",
        example=f"tledger {_name} session.jsonl ws-1",
        exits={1: "also with --strict when any byte would be quarantined (nothing written)"},
        args=[
            arg("file", metavar="FILE"),
            WS,
            arg("--strict", action="store_true",
                help="import nothing (exit 1) if any byte would be quarantined"),
            arg("--durability", choices=DURABILITY_LEVELS, default="full"),
        ],
    )(_import(_fmt))
