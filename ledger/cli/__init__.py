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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import msgspec

from ledger.core.errors import InvalidWorkspace, LedgerError

Handler = Callable[[argparse.Namespace, "Context"], int]


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


def _command_modules() -> list[Any]:
    from ledger.cli import core, interop, mcp, recovery_cmds, tokens

    return [core, tokens, recovery_cmds, interop, mcp]


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
    for module in _command_modules():
        module.register(sub)
    for command in sub.choices.values():
        _conventions(command)
    return parser


def _workspace_id(text: str) -> str:
    """argparse type of every WS argument: an invalid id is a usage error
    (exit 2), reported before any input is read."""
    from ledger.core.ids import validate_workspace

    try:
        return validate_workspace(text)
    except InvalidWorkspace as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _conventions(command: argparse.ArgumentParser) -> None:
    """What every command shares, applied in one place: WS arguments are
    checked as workspace ids while parsing, and ``--json`` is accepted
    anywhere after the command name (commands whose output is already JSON or
    JSONL print the same with it)."""
    for action in command._actions:
        if action.dest == "workspace":
            action.type = _workspace_id
    if not any("--json" in action.option_strings for action in command._actions):
        command.add_argument("--json", action="store_true",
                             help="print JSON (this command's output already is JSON)")


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
