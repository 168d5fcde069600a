"""Every tledger command is documented with an example (sqlite-utils' habit)."""

from __future__ import annotations

import argparse

from ledger.cli import build_parser


def test_every_command_has_help_and_an_example() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help for c in sub._choices_actions}
    assert len(sub.choices) >= 20
    for name, command in sub.choices.items():
        assert helps.get(name), f"{name} has no one-line help"
        assert command.epilog and "Example: tledger" in command.epilog, name
