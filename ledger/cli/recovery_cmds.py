"""Recovery and retention commands: check, repair, import-legacy, purge,
truncate, reject, delete, backup.

Each opens the store, calls one function of ``recovery`` or one
operation of the workspace (``History`` or its engine: ``clean_quarantine``)
and prints its report (text, or JSON with ``--json``).
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from ledger.cli.registry import WS, arg, command, non_negative
from ledger.cli.tables import is_terminal, print_table

Progress = Callable[[int, int], None]


@contextlib.contextmanager
def _progress_bar(ctx: Any, desc: str) -> Iterator[Progress | None]:
    """A progress bar on stderr for long runs, only when stderr is a terminal.

    tqdm draws it (maintained, handles terminal width and rate display); it
    appears after one second, so short runs print nothing. Without tqdm, or
    off a terminal, there is no bar.
    """
    stream = ctx.stderr
    if not (hasattr(stream, "isatty") and stream.isatty()):
        yield None
        return
    try:
        from tqdm import tqdm
    except ImportError:
        yield None
        return
    bar = tqdm(total=0, unit="B", unit_scale=True, unit_divisor=1024, file=stream, delay=1.0,
               leave=False, desc=desc, mininterval=0.25)

    def update(done: int, total: int) -> None:
        if bar.total != total:
            bar.total = total
        bar.update(done - bar.n)

    try:
        yield update
    finally:
        bar.close()


def _emit(ctx: Any, args: argparse.Namespace, report: Any) -> None:
    if getattr(args, "json", False):
        ctx.emit_json(report.to_dict() if hasattr(report, "to_dict") else report)
    elif hasattr(report, "text"):
        ctx.emit_line(report.text())
    else:
        for key, value in report.items():
            ctx.emit_line(f"{key}: {value}")


@command(
    "check",
    help="read-only verification of a history",
    description="Verify framing, every row's checksum, UTF-8, batch completeness, "
    "sequences, the receipt and stamps, and stray temp files, without writing anything. "
    "Exit 1 when damage is found (notices alone exit 0).",
    example="tledger check ws-1 --json",
    exits={0: "no damage (notices alone exit 0)", 1: "damage found"},
    args=[WS],
    json_help="print the report as JSON",
)
def cmd_check(args: argparse.Namespace, ctx: Any) -> int:
    from recovery.check import check

    h = ctx.store().history(args.workspace)
    with _progress_bar(ctx, "check") as progress:
        report = check(h, progress=progress)
    if not args.json and is_terminal(ctx.stdout) and report.findings:
        _findings_table(ctx, report)
    else:
        _emit(ctx, args, report)
    return 0 if report.ok else 1


def _findings_table(ctx: Any, report: Any) -> None:
    """check's findings as a table, for a person at a terminal."""
    rows = []
    for f in report.findings:
        where = (f.segment or "-") + (f"@{f.offset}" if f.offset is not None else "")
        length = f" ({f.length} bytes)" if f.length is not None else ""
        rows.append([f.severity, where, f.seq, f.message + length, f.action])
    verdict = report.text().splitlines()[-1]  # the summary line scripts also get
    print_table(ctx.stdout, ["severity", "where", "seq", "problem", "action"], rows,
                caption=verdict, numeric=["seq"])


@command(
    "repair",
    help="repair a damaged history (removed bytes go to quarantine)",
    description="Settle an interrupted rewrite, then remove what fails verification "
    "according to --policy: salvage (keep every verified complete batch), tail (cut only "
    "a damaged tail), prefix (keep what precedes the first damage), strict (refuse if "
    "anything is damaged). Removed bytes go to quarantine/. Exit 0 when the history is "
    "consistent afterwards; with --dry-run, 0 when nothing would change.",
    example="tledger repair ws-1 --dry-run --policy tail",
    exits={0: "the history is consistent afterwards; with --dry-run, nothing would change",
           1: "the history is still not consistent (a policy refused); with --dry-run, "
           "something would change"},
    args=[
        WS,
        arg("--policy", choices=["salvage", "tail", "prefix", "strict"], default="salvage"),
        arg("--dry-run", action="store_true", help="print what would change; write nothing"),
    ],
    json_help="print the report as JSON",
)
def cmd_repair(args: argparse.Namespace, ctx: Any) -> int:
    from recovery.repair import repair

    h = ctx.store().history(args.workspace)
    with _progress_bar(ctx, "repair") as progress:
        report = repair(h, policy=args.policy, dry_run=args.dry_run, progress=progress)
    _emit(ctx, args, report)
    return report.exit_code()


@command(
    "import-legacy",
    help="import a legacy session directory (chat.jsonl, chat-archive.jsonl)",
    description="Import the reference design's session directory DIR into workspace WS: "
    "rows get fresh seqs (legacy sequences are kept in meta), damaged lines go to "
    "quarantine, a crashed truncation is settled. Importing the same directory again adds "
    "nothing. The source directory is only read.",
    example="tledger import-legacy ~/.mux/sessions/ws-1 ws-1",
    exits={1: "also when the imported workspace does not check clean afterwards"},
    args=[arg("dir", metavar="DIR"), WS],
    json_help="print the report as JSON",
)
def cmd_import_legacy(args: argparse.Namespace, ctx: Any) -> int:
    from recovery.check import check
    from recovery.legacy import import_legacy

    h = ctx.store().history(args.workspace)
    report = import_legacy(h, args.dir)
    after = check(h)
    report.check_ok = after.ok
    _emit(ctx, args, report)
    return 0 if after.ok else 1


@command(
    "purge",
    help="delete rows at or before the privacy floor for good",
    description="Really delete every row at or before the newest manual reset (no "
    "quarantine); unreadable lines that may be resets are kept. With "
    "--quarantine-older-than, also remove quarantine entries older than DAYS days.",
    example="tledger purge ws-1 --quarantine-older-than 30",
    args=[
        WS,
        arg("--quarantine-older-than", type=non_negative, default=None, metavar="DAYS"),
        arg("--quarantine-only", action="store_true",
            help="only clean the quarantine; leave the rows"),
    ],
    json_help="print the result as JSON",
)
def cmd_purge(args: argparse.Namespace, ctx: Any) -> int:
    h = ctx.store().history(args.workspace)
    out: dict[str, Any] = {"workspace": args.workspace}
    purged = None
    if not args.quarantine_only:
        purged = h.purge_before_floor()
        out["rows"] = purged.to_dict()
    if args.quarantine_older_than is not None:
        seconds = args.quarantine_older_than * 86400.0
        out["quarantine"] = h.engine.clean_quarantine(seconds).to_dict()
    if args.json:
        ctx.emit_json(out)
    else:
        if purged is not None:
            floor = purged.floor
            where = (f"at or before the privacy floor (seq {floor.seq})" if floor is not None
                     else "(no privacy floor: nothing to purge)")
            ctx.emit_line(f"{args.workspace}: purged {purged.purged_rows} rows, "
                          f"{purged.purged_bytes} bytes {where}")
        q = out.get("quarantine")
        if q is not None:
            ctx.emit_line(f"{args.workspace}: removed {q['removed']} quarantine entries, "
                          f"{q['bytes']} bytes")
    return 0


@command(
    "truncate",
    help="drop every row after a seq (to quarantine)",
    description="Drop every row after SEQ (which must end its batch). The dropped bytes "
    "go to quarantine/; a new epoch.",
    example="tledger truncate ws-1 --after 41",
    args=[WS, arg("--after", type=int, required=True, metavar="SEQ")],
    json_help="print the result as JSON",
)
def cmd_truncate(args: argparse.Namespace, ctx: Any) -> int:
    return _run_on_history(
        ctx, args, lambda h: h.truncate_after(args.after),
        lambda out: f"removed {out.removed_rows} rows after seq {args.after} "
                    f"({out.removed_bytes} bytes to quarantine)")


def _run_on_history(ctx: Any, args: argparse.Namespace, op: Callable[[Any], Any],
                    line: Callable[[Any], str]) -> int:
    """Run ``op`` on the workspace's history and print its typed result:
    ``to_dict()`` as JSON with ``--json``, else ``WS: line(result)``."""
    out = op(ctx.store().history(args.workspace))
    ctx.emit_result(args.json, out.to_dict(), f"{args.workspace}: {line(out)}")
    return 0


@command(
    "reject",
    help="quarantine persisted requests as empty assistant records",
    description="Rewrite the requests SEQ... (and the synthetic prelude rows they own) as "
    "empty assistant records holding the original under meta.quarantine: hidden from "
    "the model, shown by display and export.",
    example="tledger reject ws-1 57",
    args=[WS, arg("seqs", type=int, nargs="+", metavar="SEQ")],
    json_help="print the result as JSON",
)
def cmd_reject(args: argparse.Namespace, ctx: Any) -> int:
    return _run_on_history(
        ctx, args, lambda h: h.reject(args.seqs),
        lambda out: f"rejected seqs {out.rejected}"
                    + (f" (already rejected: {out.already})" if out.already else ""))


@command(
    "delete",
    help="delete a workspace for good",
    description="Delete workspace WS and its quarantine. A tombstone is written first, "
    "so a concurrent writer fails instead of recreating it; running it again after a "
    "crash finishes the job.",
    example="tledger delete ws-1 --yes",
    args=[WS, arg("--yes", action="store_true", help="confirm: this cannot be undone")],
    json_help="print the result as JSON",
)
def cmd_delete(args: argparse.Namespace, ctx: Any) -> int:
    from ledger.cli import UsageError

    if not args.yes:
        raise UsageError(f"delete removes workspace {args.workspace!r} for good; add --yes")
    deleted = ctx.store().delete(args.workspace)
    ctx.emit_result(args.json, {"workspace": args.workspace, "deleted": deleted},
                    f"{args.workspace}: " + ("deleted" if deleted else "nothing to delete"))
    return 0


@command(
    "backup",
    help="consistent copy of a workspace into a new directory",
    description="Copy workspace WS (segments, quarantine, a fresh receipt) into the new "
    "directory DEST under the lock. Restore by copying DEST back as ROOT/WS.",
    example="tledger backup ws-1 /backups/ws-1-2025-06-01",
    args=[WS, arg("dest", metavar="DEST")],
    json_help="print the result as JSON",
)
def cmd_backup(args: argparse.Namespace, ctx: Any) -> int:
    return _run_on_history(
        ctx, args, lambda h: h.backup(args.dest),
        lambda out: f"copied {out.files} files, {out.bytes} bytes to {out.dest}")
