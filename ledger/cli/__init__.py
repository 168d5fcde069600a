"""``tledger``: a thin command line over the Python API.

Each command opens the store, calls one API method and formats the result.
Exit codes: 0 fine, 1 damage found or operation failed (every ``LedgerError``,
``OSError``, ...: see ``run``), 2 bad usage (unknown command or flag, bad
argument syntax, invalid workspace id, malformed root URL). Errors are one line
on stderr, with control characters written out (``ledger.core.terminal``).
This is the only place that turns errors into exit codes, and the only ledger
package that may import ``recovery``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

import msgspec

from ledger.cli import registry
from ledger.core.errors import InvalidRoot, InvalidWorkspace, LedgerError
from ledger.core.redact import redact
from ledger.core.terminal import visible, visible_line

Handler = registry.Handler
TRACEBACK_ENV = "TLEDGER_TRACEBACK"


class UsageError(Exception):
    """Bad usage detected after parsing (exit 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"tledger: error: {visible_line(message)}\n")


@dataclass
class Context:
    root: str
    stdout: Any
    stderr: Any
    explicit_root: str | None = None  # --root or $TLEDGER_ROOT, when given
    secret_roots: list[str] = field(default_factory=list)  # hidden in error lines
    embedder: str | None = None  # --embedder or $TLEDGER_EMBEDDER (ledger.core.embedders)

    def store(self, **options: Any) -> Any:
        from ledger.transcript.store import Store

        if self.embedder and "embedder" not in options:
            from ledger.core.embedders import from_spec

            options["embedder"] = from_spec(self.embedder)
        return Store(durable_root(self.root), **options)

    def emit_json(self, obj: Any) -> None:
        self.stdout.write(msgspec.json.encode(obj).decode("utf-8") + "\n")

    def emit_line(self, text: str) -> None:
        """A line (or lines) for people: control characters written out."""
        self.stdout.write(visible(text) + "\n")

    def emit_result(self, as_json: bool, result: Any, text: str) -> None:
        """A command's result: the JSON document with ``--json``, else one line."""
        if as_json:
            self.emit_json(result)
        else:
            self.emit_line(text)

    def emit_rows(self, rows: Iterable[Any]) -> None:
        """Rows (``Row``) as canonical JSONL, one a line."""
        for row in rows:
            self.emit_json(row.to_dict())


def durable_root(root: str) -> str:
    """``root``, unless it names an engine whose rows die with the process
    (``memory://``): each ``tledger`` command is a process of its own, so such
    a store would be gone before the next command (UsageError, exit 2)."""
    from ledger.storage.registry import engine_for

    spec = engine_for(root)
    if not spec.durable:
        raise UsageError(
            f"{root.split('://', 1)[0]}:// is the {spec.name} engine: its store lives in one "
            "process and dies with it, so tledger (a process per command) does not open it; "
            "use a directory or a postgresql:// URL"
        )
    return root


def _load_commands() -> None:
    """Import the command modules: each declares its commands with
    ``ledger.cli.registry.command`` (help lists them in this order)."""
    from ledger.cli import (  # noqa: F401
        core,
        db,
        forks,
        interop,
        mcp,
        migrate,
        recovery_cmds,
        tokens,
    )


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
    parser.add_argument(
        "--embedder",
        default=None,
        metavar="SPEC",
        help="the semantic channel of ranked search: wordllama or wordllama:DIM (64, 128, "
        "256; the semantic extra) (default: $TLEDGER_EMBEDDER, else none: lexical only)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    _load_commands()
    registry.install(sub)
    return parser


def _fail(ctx: Context, code: int, line: str) -> int:
    """One line on stderr (control characters written out), then exit ``code``."""
    try:
        ctx.stderr.write(visible_line(redact(line, *ctx.secret_roots)) + "\n")
        ctx.stderr.flush()
    except (OSError, ValueError):
        pass  # stderr is gone too: the exit code still says it
    return code


def _os_error(exc: OSError) -> str:
    what = exc.strerror or str(exc) or type(exc).__name__
    where = f": {exc.filename}" if exc.filename else ""
    return f"tledger: {type(exc).__name__}: {what}{where}"


def run(args: argparse.Namespace, ctx: Context) -> int:
    """Run the parsed command ``args`` and map what it raises to an exit code.

    The one place errors become exit codes: usage errors 2 (an invalid
    workspace id, a malformed root URL, a bad argument found after parsing); every
    ``LedgerError``, ``OSError`` (a file the command could not read or write),
    ``RecursionError`` (input nested too deeply) and ``MemoryError`` 1 with one
    line on stderr and no traceback. A closed pipe on stdout is not an error.
    Any other exception is a bug: one "internal error" line, exit 1 (the
    traceback when ``$TLEDGER_TRACEBACK`` is set). Every error line has the
    secrets of the connection strings among the arguments hidden.
    """
    handler: Handler = args.handler
    ctx.secret_roots = [ctx.root, *(v for v in vars(args).values() if isinstance(v, str))]
    try:
        return handler(args, ctx)
    except (InvalidWorkspace, InvalidRoot, UsageError) as exc:
        return _fail(ctx, 2, f"tledger: error: {exc}")
    except LedgerError as exc:
        return _fail(ctx, 1, f"tledger: {type(exc).__name__}: {exc}")
    except BrokenPipeError:
        _quiet_stdout(ctx)
        return 0
    except OSError as exc:
        return _fail(ctx, 1, _os_error(exc))
    except RecursionError:
        return _fail(ctx, 1, "tledger: error: the input is nested too deeply to process "
                     "(RecursionError)")
    except MemoryError:
        return _fail(ctx, 1, "tledger: error: out of memory (MemoryError)")
    except KeyboardInterrupt:
        return _fail(ctx, 130, "tledger: interrupted")
    except Exception as exc:  # a bug: still one line; the traceback on request
        if os.environ.get(TRACEBACK_ENV):
            raise
        return _fail(ctx, 1, f"tledger: internal error: {type(exc).__name__}: {exc} (a bug; "
                     f"{TRACEBACK_ENV}=1 prints the traceback, please report it)")


def _quiet_stdout(ctx: Context) -> None:
    """After a closed pipe: point stdout at /dev/null so the interpreter's own
    flush at exit does not complain about it (Python's documented recipe). Only
    for the process's own stdout, never a stream a caller swapped in."""
    if ctx.stdout is sys.stdout and sys.stdout is sys.__stdout__ and sys.stdout is not None:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass


def main(argv: Sequence[str] | None = None) -> int:
    # psycopg_pool logs each failed connection attempt as a warning; with no
    # handler configured Python would print them to stderr. The command reports
    # the failure itself, on one line.
    logging.getLogger("psycopg.pool").addHandler(logging.NullHandler())
    parser = build_parser()
    args = parser.parse_args(argv)
    explicit = args.root or os.environ.get("TLEDGER_ROOT") or None
    root = explicit or os.path.join(".", ".tledger")
    ctx = Context(root=root, stdout=sys.stdout, stderr=sys.stderr, explicit_root=explicit,
                  embedder=args.embedder or os.environ.get("TLEDGER_EMBEDDER") or None)
    return run(args, ctx)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
