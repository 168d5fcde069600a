"""``tledger``: a thin command line over the Python API.

Each command opens the store, calls one API method and formats the result.
Exit codes: 0 fine, 1 damage found or operation failed (every ``LedgerError``),
2 bad usage (unknown command or flag, bad argument syntax, invalid workspace id).
This is the only place that turns errors into exit codes, and the only ledger
module that may import ``recovery``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import msgspec

from ledger.cli import registry
from ledger.core.errors import InvalidWorkspace, LedgerError

Handler = registry.Handler


class UsageError(Exception):
    """Bad usage detected after parsing (exit 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"tledger: error: {message}\n")


@dataclass
class Context:
    root: str
    stdout: Any
    stderr: Any
    explicit_root: str | None = None  # --root or $TLEDGER_ROOT, when given

    def store(self, **options: Any) -> Any:
        from ledger.transcript.store import Store

        return Store(self.root, **options)

    def emit_json(self, obj: Any) -> None:
        self.stdout.write(msgspec.json.encode(obj).decode("utf-8") + "\n")

    def emit_line(self, text: str) -> None:
        self.stdout.write(text + "\n")

    def emit_result(self, as_json: bool, result: Any, text: str) -> None:
        """A command's result: the JSON document with ``--json``, else one line."""
        if as_json:
            self.emit_json(result)
        else:
            self.emit_line(text)


def _load_commands() -> None:
    """Import the command modules: each declares its commands with
    ``ledger.cli.registry.command`` (help lists them in this order)."""
    from ledger.cli import core, db, interop, mcp, migrate, recovery_cmds, tokens  # noqa: F401


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="tledger",
        description="transcript-ledger: an event-sourced transcript store for AI agents.",
        epilog="Example: tledger --root ./.tledger append ws-1 rows.jsonl",
    )
    parser.add_argument(
        "--root",
        default=None,
        help="store root (default: $TLEDGER_ROOT, else ./.tledger)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    _load_commands()
    registry.install(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    explicit = args.root or os.environ.get("TLEDGER_ROOT") or None
    root = explicit or os.path.join(".", ".tledger")
    ctx = Context(root=root, stdout=sys.stdout, stderr=sys.stderr, explicit_root=explicit)
    handler: Handler = args.handler
    try:
        return handler(args, ctx)
    except (InvalidWorkspace, UsageError) as exc:
        ctx.stderr.write(f"tledger: error: {exc}\n")
        return 2
    except LedgerError as exc:
        message = " ".join(str(exc).split())
        ctx.stderr.write(f"tledger: {type(exc).__name__}: {message}\n")
        return 1
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
