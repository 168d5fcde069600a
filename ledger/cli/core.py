"""Core commands: append, clear, rows, context, stat, ls, history, demo."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import msgspec

from ledger.cli.registry import WS, arg, command
from ledger.cli.tables import is_terminal, print_table
from ledger.core.errors import InvalidRow, LedgerError
from ledger.core.format import rows as fmt
from ledger.core.redact import redact
from ledger.storage.engine import DURABILITY_LEVELS


def _read_input(path: str | None) -> bytes:
    if path is None or path == "-":
        return sys.stdin.buffer.read()
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise LedgerError(f"cannot read {path}: {exc.strerror}") from exc


def numbered_jsonl_rows(data: bytes, source: str) -> list[tuple[int, dict[str, Any]]]:
    """(line number, row) of each non-blank line of a JSONL input; a bad line
    raises InvalidRow naming its number."""
    rows = []
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        if fmt.too_deep(line):
            raise InvalidRow(f"{source} line {number}: JSON nested too deeply (deeper than "
                             f"{fmt.MAX_DEPTH} levels of arrays and objects, the limit "
                             "for a row)")
        try:
            row = msgspec.json.decode(line)
        except msgspec.DecodeError as exc:
            raise InvalidRow(f"{source} line {number}: not valid JSON ({exc})") from None
        except RecursionError:
            raise InvalidRow(f"{source} line {number}: JSON nested too deeply to read") from None
        if not isinstance(row, dict):
            raise InvalidRow(f"{source} line {number}: a row must be a JSON object")
        rows.append((number, row))
    return rows


def _result(ctx: Any, r: Any) -> int:
    ctx.emit_json({"seqs": r.seqs, "epoch": r.epoch, "window": r.window})
    return 0


@command(
    "append",
    help="append JSONL rows from FILE or stdin as ONE batch",
    description="Append the JSONL rows of FILE (or stdin) as one all-or-nothing batch.",
    example="tledger append ws-1 rows.jsonl",
    args=[
        WS,
        arg("file", metavar="FILE", nargs="?"),
        arg("--batch-id", default=None, help="idempotency key: a retry writes nothing"),
        arg("--expect-window", type=int, default=None, help="fail if the window moved"),
        arg("--durability", choices=DURABILITY_LEVELS, default="full"),
    ],
)
def cmd_append(args: argparse.Namespace, ctx: Any) -> int:
    source = args.file if args.file not in (None, "-") else "stdin"
    try:
        numbered = numbered_jsonl_rows(_read_input(args.file), source)
    except InvalidRow as exc:
        raise InvalidRow(f"{exc}; nothing written") from None
    if not numbered:
        raise InvalidRow(f"{source}: no rows to append; nothing written")
    rows = [row for _, row in numbered]
    h = ctx.store(durability=args.durability).history(args.workspace)
    try:
        r = h.append_many(rows, batch_id=args.batch_id, expect_window=args.expect_window)
    except InvalidRow as exc:
        if exc.index is not None:
            line = numbered[exc.index][0]
            raise InvalidRow(f"{source} line {line}: {exc}; nothing written") from exc
        raise
    return _result(ctx, r)


@command(
    "clear",
    help="manual soft clear: a new privacy floor",
    description="Append a manual reset row (/clear --soft): the new privacy floor.",
    example="tledger clear ws-1",
    args=[WS],
)
def cmd_clear(args: argparse.Namespace, ctx: Any) -> int:
    return _result(ctx, ctx.store().history(args.workspace).clear_soft())


@command(
    "rows",
    help="print rows in order as JSONL",
    description="Print every row (or those after --after SEQ) as canonical JSONL.",
    example="tledger rows ws-1 --after 100",
    args=[WS, arg("--after", type=int, default=None, metavar="SEQ")],
)
def cmd_rows(args: argparse.Namespace, ctx: Any) -> int:
    ctx.emit_rows(ctx.store().history(args.workspace).rows(after_seq=args.after))
    return 0


@command(
    "context",
    help="print the provider view as JSONL",
    description="Print the rows the model sees (the active window) as JSONL.",
    example="tledger context ws-1",
    args=[WS],
)
def cmd_context(args: argparse.Namespace, ctx: Any) -> int:
    h = ctx.store().history(args.workspace)
    h.require()  # the API reads a new workspace as an empty view; the CLI names the typo
    ctx.emit_rows(h.provider_view())
    return 0


def stat_report(h: Any, model: str | None = "gpt-4o") -> dict[str, Any]:
    """The stat document of a history (read-only): ``History.stat`` plus
    ``window_tokens``, the active window's provider view counted as ``tledger
    count --rows`` counts it for ``model`` (None with ``window_tokens_error``
    when the view cannot be read, e.g. damage; None when ``model`` is None)."""
    from ledger.tokens.counting import TokenCounter
    from ledger.tokens.shapes import count_view, shape_for

    report = h.stat().to_dict()
    if model is None:
        report["window_tokens"] = None
        return report
    counter = TokenCounter(model)
    try:
        rows = [r.to_dict() for r in h.provider_view()]
        counted = count_view(counter, rows, shape_for(api=None, family=counter.spec.family))
    except LedgerError as exc:
        report["window_tokens"] = None
        report["window_tokens_error"] = f"{type(exc).__name__}: {exc}"
    else:
        report["window_tokens"] = {"tokens": counted.tokens, "rows": len(rows),
                                   "model": counted.model, "encoding": counted.encoding,
                                   "exact": counted.exact}
    return report


def _tokens_line(report: dict[str, Any]) -> str:
    t = report.get("window_tokens")
    if t is None:
        return f"unknown ({report.get('window_tokens_error', 'not counted: --no-tokens')})"
    about = "" if t["exact"] else "about "
    return f"{about}{t['tokens']} in {t['rows']} rows ({t['model']}, {t['encoding']})"


def _stat_lines(report: dict[str, Any]) -> list[tuple[str, str]]:
    """The stat document as aligned lines for a person at a terminal."""
    receipt = report["receipt"]
    floor = report["floor"]
    segments = report["segments"]
    return [
        ("workspace", str(report["workspace"])),
        ("epoch", str(report["epoch"])),
        ("window", str(report["window"])),
        ("windows", str(report.get("windows", "?"))),
        ("window tokens", _tokens_line(report)),
        ("next seq", str(report["next_seq"])),
        ("floor", "none" if floor is None else f"seq {floor['seq']}"
         + (f" ({floor['segment']})" if floor.get("segment") else "")),
        ("rows", str(report["rows"])),
        ("bytes", str(report["bytes"])),
        ("segments", f"{len(segments)}" + (f" (newest {segments[-1]['name']})" if segments
                                           else "")),
        ("receipt", f"{receipt['status']}, stamps match: {receipt['stamps_match']}"),
        ("quarantine bytes", str(report["quarantine_bytes"])),
        ("origin", "none" if not report.get("origin") else
         f"fork of {report['origin']['source']} at seq {report['origin']['seq']}"),
    ]


@command(
    "stat",
    help="receipt, epoch, window, windows, window tokens, segments, rows, bytes, floor",
    description="Show the receipt, whether the stamps match, epoch, window, the number "
    "of windows, the active window's tokens (as count --rows counts them), floor, "
    "segments, rows and bytes of a history (read-only). Aligned lines at a terminal; "
    "the JSON document when piped or with --json.",
    example="tledger stat ws-1",
    args=[WS, arg("--model", default="gpt-4o",
                  help="model whose tokenizer counts the window (default: gpt-4o)"),
          arg("--no-tokens", action="store_true",
              help="leave the window's tokens out (skips loading the tokenizer)")],
    json_help="print the JSON document (the default when stdout is not a terminal)",
)
def cmd_stat(args: argparse.Namespace, ctx: Any) -> int:
    h = ctx.store().history(args.workspace)
    report = stat_report(h, None if args.no_tokens else args.model)
    if args.json or not is_terminal(ctx.stdout):
        ctx.emit_json(report)  # scripts and pipes get the JSON document (DESIGN.md 12)
        return 0
    for key, value in _stat_lines(report):
        ctx.emit_line(f"{key:<18} {value}")
    return 0


@command(
    "ls",
    help="list workspaces",
    description="List the workspaces under the root: a table of id, rows, window and "
    "size at a terminal; one id a line when piped; a JSON list with --json.",
    example="tledger --root ./.tledger ls",
    json_help="print a JSON list of ids",
)
def cmd_ls(args: argparse.Namespace, ctx: Any) -> int:
    store = ctx.store()
    names = store.workspaces()
    if args.json:
        ctx.emit_json(names)
        return 0
    if not is_terminal(ctx.stdout):
        for ws in names:
            ctx.emit_line(ws)  # one id a line: what scripts read
        return 0
    rows: list[list[object]] = []
    for ws in names:
        try:
            snap = store.history(ws).snapshot()
        except LedgerError as exc:
            rows.append([ws, None, None, None, None, f"{type(exc).__name__}: tledger check {ws}"])
            continue
        floor = snap.floor.seq if snap.floor is not None else None
        try:
            got = store.history(ws).origin
        except LedgerError:
            got = None  # the snapshot read it; a damaged fork event is `check`'s to report
        origin = f"{got.source}@{got.seq}" if got is not None else None
        rows.append([ws, snap.next_seq - 1, snap.window_seq, floor, origin, None])
    print_table(ctx.stdout, ["workspace", "last seq", "window", "floor", "fork of", "problem"],
                rows,
                caption=f"{len(names)} workspace{'' if len(names) == 1 else 's'} under "
                f"{redact(ctx.root)}",
                numeric=["last seq", "window", "floor"])
    return 0


@command(
    "history",
    help="one session_history tool call",
    description="Run one session_history call (list, search, read) and print its JSON. "
    "The argument after the action is the query of search, the seq of read "
    "(like --seq) or the window of list (like --window).",
    example='tledger history ws-1 search "stack trace"',
    exits={1: "also when the tool answers an error result (printed on stdout): "
           "stale_cursor, bad_request, history_unavailable, ..."},
    args=[
        WS,
        arg("action", choices=["list", "search", "read"]),
        arg("query", nargs="?", default=None, metavar="QUERY|SEQ|WINDOW",
            help="search: the query; read: the seq; list: a window"),
        arg("--window", type=int, default=None),
        arg("--seq", type=int, default=None),
        arg("--cursor", default=None),
        arg("--limit", type=int, default=None),
        arg("--offset", type=int, default=None),
        arg("--mode", choices=["literal", "ranked"], default=None,
            help="search: literal text (default) or ranked (best matches first)"),
        arg("--current", action="store_true", default=None,
            help="ranked search: the current window too (skipped by default)"),
        arg("--also", action="append", default=None, metavar="QUERY",
            help="search: another phrasing of QUERY (repeat for up to 3 more); the "
            "phrasings are ranked and fused (mode ranked)"),
    ],
)
def cmd_history(args: argparse.Namespace, ctx: Any) -> int:
    from ledger.cli import UsageError
    from ledger.transcript.retrieval import SessionHistory

    h = ctx.store().history(args.workspace)
    h.require()  # a missing workspace is an error here (exit 1), as for rows/context
    call: dict[str, Any] = {"action": args.action}
    if args.also and (args.action != "search" or args.query is None):
        raise UsageError("history: --also is another phrasing of a search's QUERY")
    if args.query is not None:
        if args.action == "search":
            call["query"] = [args.query, *args.also] if args.also else args.query
        else:
            key = "seq" if args.action == "read" else "window"
            try:
                number = int(args.query)
            except ValueError:
                raise UsageError(f"history {args.action}: {key.upper()} must be an integer, "
                                 f"got {args.query!r}") from None
            if getattr(args, key) not in (None, number):
                raise UsageError(f"history {args.action}: {key.upper()} {number} and "
                                 f"--{key} {getattr(args, key)} disagree")
            setattr(args, key, number)
    for key in ("window", "seq", "cursor", "limit", "offset", "mode", "current"):
        value = getattr(args, key)
        if value is not None:
            call[key] = value
    text = SessionHistory(h).call(call)
    ctx.stdout.write(text + "\n")
    return 1 if text.startswith('{"error"') else 0


@command(
    "demo",
    help="run the embedded demo (a few seconds)",
    description="Create a store, append batches, SIGKILL a writer mid-stream, reopen, "
    "show the rows, windows and a session_history search.",
    example="tledger demo /tmp/tledger-demo",
    exits={1: "also when the demo's own checks fail (what survived the SIGKILL is not a "
           "gap-free prefix of whole batches), or DIR already holds a demo workspace",
           2: "also when DIR (or the root) is a URL: the demo needs a directory"},
    args=[arg("dir", metavar="DIR", nargs="?", default=None)],
)
def cmd_demo(args: argparse.Namespace, ctx: Any) -> int:
    from ledger.cli import UsageError
    from ledger.cli.demo import run_demo

    where = args.dir or ctx.explicit_root
    if where and "://" in where:
        raise UsageError("the demo runs on the embedded file engine: give it a directory "
                         f"(got {where!r})")
    return run_demo(where, ctx.stdout)
