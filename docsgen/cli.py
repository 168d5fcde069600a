"""The CLI reference, rendered from the command registry and its parser.

Every command declared with ``ledger.cli.registry.command`` gets a section:
its one-line help, description, usage line, every argument and flag (from the
argparse parser the CLI itself builds, so a flag cannot be missing), the
example and the exit codes (the ones every command shares, plus the
command's own from ``exits=``). Nothing here is written by hand per command.
"""

from __future__ import annotations

import argparse
from typing import Any

from ledger.cli import build_parser, registry

EXIT_CODES = {
    0: "success",
    1: "damage found, or the operation failed (one line on stderr, never a traceback)",
    2: "bad usage: an unknown command or flag, bad argument syntax, an invalid workspace "
    "id, a malformed root URL",
}


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise LookupError("the tledger parser has no commands")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _flag(action: argparse.Action) -> str:
    if action.option_strings:
        names = ", ".join(f"`{o}`" for o in action.option_strings)
        if action.nargs != 0:
            metavar = action.metavar or (action.dest.upper())
            if isinstance(metavar, tuple):
                metavar = " ".join(metavar)
            names += f" `{metavar}`"
        return names
    metavar = action.metavar or action.dest
    return f"`{metavar}`"


def _details(action: argparse.Action) -> str:
    words = [action.help or ""] if action.help not in (None, argparse.SUPPRESS) else []
    if action.choices is not None and not isinstance(action.choices, dict):
        words.append("one of " + ", ".join(f"`{c}`" for c in action.choices))
    if action.nargs in ("*", "+"):
        words.append("repeatable" if action.option_strings else "one or more"
                     if action.nargs == "+" else "zero or more")
    default = action.default
    if (action.option_strings and default not in (None, False, argparse.SUPPRESS)
            and action.nargs != 0):
        words.append(f"default `{default}`")
    if action.required and action.option_strings:
        words.append("required")
    return "; ".join(w for w in words if w)


def _arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions
            if not isinstance(a, argparse._HelpAction) and a.help != argparse.SUPPRESS]


def _usage(parser: argparse.ArgumentParser) -> str:
    return " ".join(parser.format_usage().split()).removeprefix("usage: ")


def render() -> str:
    """The whole CLI reference page, as Markdown."""
    parser = build_parser()
    subs = _subparsers(parser)
    cmds = registry.commands()
    out: list[str] = [
        "# CLI commands",
        "",
        "<!-- Generated at build time from the command registry (docsgen/cli.py); "
        "edit the command's declaration, not this page. -->",
        "",
        f"`{_usage(parser)}`",
        "",
        "Global options, before the command:",
        "",
        "| option | meaning |",
        "|---|---|",
    ]
    for action in _arguments(parser):
        if action.option_strings:
            out.append(f"| {_flag(action)} | {_cell(_details(action))} |")
    out += ["", "Exit codes of every command (a command may add its own meaning below):", "",
            "| code | meaning |", "|---|---|"]
    out += [f"| {code} | {_cell(text)} |" for code, text in EXIT_CODES.items()]
    out += ["", "| command | what it does |", "|---|---|"]
    out += [f"| [`{c.name}`](#{c.name}) | {_cell(c.help)} |" for c in cmds]
    for c in cmds:
        sub = subs[c.name]
        out += ["", f"## `{c.name}` {{ #{c.name} }}", "", c.help[:1].upper() + c.help[1:] + ".",
                "", c.description, "", "```text", _usage(sub).replace("tledger", "tledger", 1),
                "```", "", "| argument | meaning |", "|---|---|"]
        for action in _arguments(sub):
            out.append(f"| {_flag(action)} | {_cell(_details(action))} |")
        out += ["", "Example:", "", "```sh", c.example, "```", "", "Exit codes:", ""]
        for code, text in {**EXIT_CODES, **c.exits}.items():
            out.append(f"- `{code}`: {text}")
    return "\n".join(out) + "\n"


def flags_of(name: str) -> list[str]:
    """Every option string of command ``name`` (for the tests)."""
    sub = _subparsers(build_parser())[name]
    return [o for a in _arguments(sub) for o in a.option_strings]


def positionals_of(name: str) -> list[Any]:
    """The metavars of command ``name``'s positional arguments (for the tests)."""
    sub = _subparsers(build_parser())[name]
    return [a.metavar or a.dest for a in _arguments(sub) if not a.option_strings]
