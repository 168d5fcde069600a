"""Core commands: append, clear, rows, context, stat, ls, history, demo."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import msgspec

from ledger.core.errors import InvalidRow, LedgerError
from ledger.storage.files import segments as segs


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
        try:
            row = msgspec.json.decode(line)
        except msgspec.DecodeError as exc:
            raise InvalidRow(f"{source} line {number}: not valid JSON ({exc})") from None
        if not isinstance(row, dict):
            raise InvalidRow(f"{source} line {number}: a row must be a JSON object")
        rows.append((number, row))
    return rows


def _result(ctx: Any, r: Any) -> int:
    ctx.emit_json({"seqs": r.seqs, "epoch": r.epoch, "window": r.window})
    return 0


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


def cmd_clear(args: argparse.Namespace, ctx: Any) -> int:
    return _result(ctx, ctx.store().history(args.workspace).clear_soft())


def cmd_rows(args: argparse.Namespace, ctx: Any) -> int:
    h = ctx.store().history(args.workspace)
    out = ctx.stdout
    for row in h.rows(after_seq=args.after):
        out.write(msgspec.json.encode(row.to_dict()).decode("utf-8") + "\n")
    return 0


def cmd_context(args: argparse.Namespace, ctx: Any) -> int:
    h = ctx.store().history(args.workspace)
    for row in h.provider_view():
        ctx.stdout.write(msgspec.json.encode(row.to_dict()).decode("utf-8") + "\n")
    return 0


def stat_report(h: Any) -> dict[str, Any]:
    """The stat document of a history (read-only; ``History.stat``)."""
    return h.stat()  # type: ignore[no-any-return]


def _is_terminal(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _stat_lines(report: dict[str, Any]) -> list[tuple[str, str]]:
    """The stat document as aligned lines for a person at a terminal."""
    receipt = report["receipt"]
    floor = report["floor"]
    segments = report["segments"]
    return [
        ("workspace", str(report["workspace"])),
        ("epoch", str(report["epoch"])),
        ("window", str(report["window"])),
        ("next seq", str(report["next_seq"])),
        ("floor", "none" if floor is None else f"seq {floor['seq']} ({floor['segment']})"),
        ("rows", str(report["rows"])),
        ("bytes", str(report["bytes"])),
        ("segments", f"{len(segments)}" + (f" (newest {segments[-1]['name']})" if segments
                                           else "")),
        ("receipt", f"{receipt['status']}, stamps match: {receipt['stamps_match']}"),
        ("quarantine bytes", str(report["quarantine_bytes"])),
    ]


def cmd_stat(args: argparse.Namespace, ctx: Any) -> int:
    h = ctx.store().history(args.workspace)
    report = stat_report(h)
    if args.json or not _is_terminal(ctx.stdout):
        ctx.emit_json(report)  # scripts and pipes get the JSON document (DESIGN.md 12)
        return 0
    for key, value in _stat_lines(report):
        ctx.emit_line(f"{key:<18} {value}")
    return 0


def cmd_ls(args: argparse.Namespace, ctx: Any) -> int:
    names = ctx.store().workspaces()
    if args.json:
        ctx.emit_json(names)
        return 0
    for ws in names:
        ctx.emit_line(ws)
    return 0


def cmd_history(args: argparse.Namespace, ctx: Any) -> int:
    from ledger.transcript.retrieval import SessionHistory

    h = ctx.store().history(args.workspace)
    h.require()  # a missing workspace is an error here (exit 1), as for rows/context
    call: dict[str, Any] = {"action": args.action}
    if args.query is not None:
        if args.action == "search":
            call["query"] = args.query
        else:
            raise LedgerError(f"QUERY is only for the search action, not {args.action!r}")
    for key in ("window", "seq", "cursor", "limit", "offset"):
        value = getattr(args, key)
        if value is not None:
            call[key] = value
    text = SessionHistory(h).call(call)
    ctx.stdout.write(text + "\n")
    return 1 if text.startswith('{"error"') else 0


def cmd_demo(args: argparse.Namespace, ctx: Any) -> int:
    from ledger.interop.demo import run_demo

    return run_demo(args.dir or ctx.explicit_root, ctx.stdout)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "append",
        help="append JSONL rows from FILE or stdin as ONE batch",
        description="Append the JSONL rows of FILE (or stdin) as one all-or-nothing batch.",
        epilog="Example: tledger append ws-1 rows.jsonl",
    )
    p.add_argument("workspace", metavar="WS")
    p.add_argument("file", metavar="FILE", nargs="?")
    p.add_argument("--batch-id", default=None, help="idempotency key: a retry writes nothing")
    p.add_argument("--expect-window", type=int, default=None, help="fail if the window moved")
    p.add_argument("--durability", choices=segs.DURABILITY_LEVELS, default="full")
    p.set_defaults(handler=cmd_append)

    p = sub.add_parser(
        "clear",
        help="manual soft clear: a new privacy floor",
        description="Append a manual reset row (/clear --soft): the new privacy floor.",
        epilog="Example: tledger clear ws-1",
    )
    p.add_argument("workspace", metavar="WS")
    p.set_defaults(handler=cmd_clear)

    p = sub.add_parser(
        "rows",
        help="print rows in order as JSONL",
        description="Print every row (or those after --after SEQ) as canonical JSONL.",
        epilog="Example: tledger rows ws-1 --after 100",
    )
    p.add_argument("workspace", metavar="WS")
    p.add_argument("--after", type=int, default=None, metavar="SEQ")
    p.set_defaults(handler=cmd_rows)

    p = sub.add_parser(
        "context",
        help="print the provider view as JSONL",
        description="Print the rows the model sees (the active window) as JSONL.",
        epilog="Example: tledger context ws-1",
    )
    p.add_argument("workspace", metavar="WS")
    p.set_defaults(handler=cmd_context)

    p = sub.add_parser(
        "stat",
        help="receipt, epoch, window, segments, rows, bytes, floor",
        description="Show the receipt, whether the stamps match, epoch, window, floor, "
        "segments, rows and bytes of a history (read-only).",
        epilog="Example: tledger stat ws-1",
    )
    p.add_argument("workspace", metavar="WS")
    p.set_defaults(handler=cmd_stat)

    p = sub.add_parser(
        "ls",
        help="list workspaces",
        description="List the workspaces under the root, one id a line.",
        epilog="Example: tledger --root ./.tledger ls",
    )
    p.set_defaults(handler=cmd_ls)

    p = sub.add_parser(
        "history",
        help="one session_history tool call",
        description="Run one session_history call (list, search, read) and print its JSON.",
        epilog='Example: tledger history ws-1 search "stack trace"',
    )
    p.add_argument("workspace", metavar="WS")
    p.add_argument("action", choices=["list", "search", "read"])
    p.add_argument("query", nargs="?", default=None, metavar="QUERY")
    p.add_argument("--window", type=int, default=None)
    p.add_argument("--seq", type=int, default=None)
    p.add_argument("--cursor", default=None)
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--offset", type=int, default=None)
    p.set_defaults(handler=cmd_history)

    p = sub.add_parser(
        "demo",
        help="run the embedded demo (a few seconds)",
        description="Create a store, append batches, SIGKILL a writer mid-stream, reopen, "
        "show the rows, windows and a session_history search.",
        epilog="Example: tledger demo /tmp/tledger-demo",
    )
    p.add_argument("dir", metavar="DIR", nargs="?", default=None)
    p.set_defaults(handler=cmd_demo)
