"""One way to declare a CLI command, so every command follows the same rules.

A command module declares each command with ``command(...)``: its name, one
line of help, a description, one example, and its arguments (``arg(...)``,
with ``WS`` for the workspace id wherever it belongs). ``install`` turns the
declarations into argparse subcommands and applies what they all share:

- the example becomes the epilog (``tledger COMMAND --help`` shows it);
- a ``WS`` argument is checked as a workspace id while parsing, so an invalid
  id is a usage error (exit 2) before any input is read;
- ``--json`` is accepted after the command name, before or after the
  workspace: commands that report something print for people without it and
  JSON with it; commands whose output is already JSON or JSONL print the same.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ledger.core.errors import InvalidWorkspace

Handler = Callable[[argparse.Namespace, Any], int]

__all__ = ["WS", "Arg", "Command", "arg", "command", "commands", "install", "non_negative",
           "positive_int"]


@dataclass(frozen=True)
class Arg:
    """One ``add_argument`` call, kept until the parser is built."""

    flags: tuple[str, ...]
    options: dict[str, Any] = field(default_factory=dict)


def arg(*flags: str, **options: Any) -> Arg:
    """An argument of a command, with ``argparse.add_argument``'s parameters."""
    return Arg(flags, options)


WS = arg("workspace", metavar="WS", help="the workspace id")
"""The workspace argument (validated while parsing)."""


@dataclass(frozen=True)
class Command:
    name: str
    handler: Handler
    help: str
    description: str
    example: str
    args: tuple[Arg, ...]
    json_help: str | None
    exits: Mapping[int, str] = field(default_factory=dict)


_COMMANDS: dict[str, Command] = {}


def command(
    name: str,
    *,
    help: str,
    description: str,
    example: str,
    args: Sequence[Arg] = (),
    json_help: str | None = None,
    exits: Mapping[int, str] | None = None,
) -> Callable[[Handler], Handler]:
    """Declare the decorated function as the handler of ``tledger NAME``.

    ``json_help`` says what ``--json`` does for a command that reports to
    people by default; leave it out for commands whose output is JSON anyway.
    ``exits`` gives what an exit code means for this command beyond what it
    means for every command (0 ok, 1 failure or damage, 2 usage), for the CLI
    reference (``docsgen.cli``).
    """
    if not example.startswith("tledger "):
        raise ValueError(f"the example of {name!r} must be a tledger command line")

    def declare(handler: Handler) -> Handler:
        if name in _COMMANDS:
            raise ValueError(f"command {name!r} is declared twice")
        _COMMANDS[name] = Command(name, handler, help, description, example, tuple(args),
                                  json_help, dict(exits or {}))
        return handler

    return declare


def commands() -> list[Command]:
    """The declared commands, in declaration order."""
    return list(_COMMANDS.values())


def non_negative(text: str) -> float:
    """An argument type: a finite number >= 0 (``nan``, ``inf`` and negatives are
    usage errors, exit 2)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """An argument type: an integer >= 1 (else a usage error, exit 2)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {text!r}")
    return value


def _workspace_id(text: str) -> str:
    from ledger.core.ids import validate_workspace

    try:
        return validate_workspace(text)
    except InvalidWorkspace as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def install(sub: Any) -> None:
    """Add every declared command to the subparsers ``sub``."""
    for cmd in _COMMANDS.values():
        parser = sub.add_parser(cmd.name, help=cmd.help, description=cmd.description,
                                epilog=f"Example: {cmd.example}")
        for a in cmd.args:
            options = dict(a.options)
            if a is WS or options.get("dest") == "workspace":
                options["type"] = _workspace_id  # WS, or an option naming the workspace
            parser.add_argument(*a.flags, **options)
        parser.add_argument(
            "--json", action="store_true",
            help=cmd.json_help or "print JSON (this command's output already is JSON)",
        )
        parser.set_defaults(handler=cmd.handler)
