"""Import of agent transcripts (Claude Code, Codex CLI) into a history.

Three steps, the first two pure:

1. :func:`recovery.salvage.salvage_jsonl` reads the bytes: readable records out,
   unreadable bytes to quarantine entries.
2. A format module (:mod:`recovery.claude_code`, :mod:`recovery.codex`) turns the
   records into :class:`Event`\\ s -- conversation rows, compactions, and
   *bookkeeping* records that are not conversation -- and :func:`plan` turns those
   into steps: append batches and compactions, each with a deterministic batch id.
3. :func:`import_file` writes the steps and puts the quarantined bytes into the
   workspace's quarantine (``ledger.storage.files.retention``), skipping every record an earlier
   import of the same bytes already wrote.

Salvage is per record. A readable record the store would refuse (an integer
beyond 64 bits, a ``tool_use`` whose id is not a string, nesting deeper than a
row may hold, anything ``ledger.core.rows`` rejects) or that the format module
cannot convert is quarantined like unreadable bytes -- its bytes, its offset and
its source line, the reason naming what was refused -- and every other record is
imported. One bad record never stops an import.

Every other readable record ends up somewhere: a conversation record is a row whose
``meta.source`` is the original object; a bookkeeping record is kept whole in
``meta.bookkeeping`` (a list) of the next conversation row, or of the last one
when none follows (``meta.bookkeeping_after``). Only a file with no conversation
record at all imports nothing, and the report says so. Each row's
``meta.import`` names the format, the record's byte offset, length, line and a
digest of its bytes; that is what makes a second import add nothing, and what
lets a grown session file be imported again for only its new records.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import xxhash

from ledger.core.errors import InvalidRow, RecoveryError
from ledger.core.rows import prepare_bodies
from recovery import claude_code, codex
from recovery.events import Event, parse_ts, source_row
from recovery.salvage import Quarantined, Record, Salvage, salvage_jsonl

__all__ = ["Event", "parse_ts", "source_row"]  # re-exported: their old home

BATCH_ROWS = 256
BATCH_BYTES = 4 << 20
MAX_ROW_BYTES = 64 << 20  # the Store's default max_row_bytes


@dataclass
class Step:
    """One write: ``append`` (one batch) or ``compact``; ``first``/``last`` are the
    line numbers of the records it covers."""

    action: str
    rows: list[dict[str, Any]]
    batch_id: str
    first: int
    last: int


@dataclass
class Plan:
    """What an import will write, and what it read."""

    format: str
    digest: str
    salvage: Salvage
    steps: list[Step]
    bookkeeping: int
    unattached: int

    @property
    def rows(self) -> int:
        return sum(len(s.rows) for s in self.steps)


def record_digest(data: bytes, record: Record) -> str:
    """A digest of a record's bytes (its span in the source)."""
    return xxhash.xxh3_64_hexdigest(data[record.offset : record.offset + record.length])


def _mark(row: dict[str, Any], fmt: str, data: bytes, record: Record) -> None:
    row["meta"]["import"] = {"format": fmt, "offset": record.offset, "length": record.length,
                             "line": record.line, "digest": record_digest(data, record)}


def _size(row: dict[str, Any]) -> int:
    return len(msgspec.json.encode(row))


def refusal(row: dict[str, Any], max_row_bytes: int = MAX_ROW_BYTES) -> str | None:
    """Why the store would refuse ``row`` (its own checks, ``prepare_bodies``), or
    None when it would take it."""
    try:
        prepare_bodies([row], 1, "import-check", max_row_bytes)
    except InvalidRow as exc:
        text = str(exc)
        return text[len("row 0: "):] if text.startswith("row 0: ") else text
    except RecursionError:
        return "nested too deeply to store"
    return None


def _refuse(salvage: Salvage, data: bytes, records: Iterable[Record], why: str) -> None:
    """Quarantine readable ``records`` (``why`` says what was refused)."""
    for r in records:
        salvage.quarantine.append(Quarantined(
            r.offset, r.length, f"refused-record (line {r.line}): {why}",
            data[r.offset : r.offset + r.length], r.line))


def _storable(
    data: bytes, events: Sequence[Event], salvage: Salvage, max_row_bytes: int
) -> list[Event]:
    """``events`` without those the store would refuse: their records go to
    ``salvage.quarantine`` and leave ``salvage.records`` (module doc). A
    bookkeeping record is checked where it will be kept (``meta.bookkeeping``);
    a compaction whose summary row is refused keeps its boundary record."""
    kept: list[Event] = []
    refused: set[int] = set()
    for event in events:
        if event.kind == "bookkeeping":
            good = []
            for r in event.records:
                why = refusal({"role": "user", "meta": {"bookkeeping": [r.value]}},
                              max_row_bytes)
                if why is None:
                    good.append(r)
                else:
                    _refuse(salvage, data, [r], why)
                    refused.add(id(r))
            if good:
                kept.append(Event("bookkeeping", good))
            continue
        why = next((w for w in (refusal(row, max_row_bytes) for row in event.rows)
                    if w is not None), None)
        if why is None:
            kept.append(event)
        elif event.kind == "compaction":
            boundary, summary = event.records[:1], event.records[1:]
            _refuse(salvage, data, summary, why)
            refused.update(id(r) for r in summary)
            kept.append(Event("compaction", boundary))
        else:
            _refuse(salvage, data, event.records, why)
            refused.update(id(r) for r in event.records)
    if refused:
        salvage.records = [r for r in salvage.records if id(r) not in refused]
        salvage.quarantine.sort(key=lambda q: q.offset)
    return kept


def _convert(
    data: bytes, convert: Callable[[list[Record]], list[Event]], salvage: Salvage
) -> list[Event]:
    """``convert(salvage.records)``; when it raises, each record is converted
    alone to find those that cannot be, which are quarantined, and the rest is
    converted again."""
    try:
        return convert(salvage.records)
    except Exception:  # a converter bug or a record of an odd shape
        pass
    good: list[Record] = []
    for r in salvage.records:
        try:
            convert([r])
        except Exception as exc:  # any failure refuses this record only
            _refuse(salvage, data, [r], f"cannot convert ({type(exc).__name__}: {exc})")
        else:
            good.append(r)
    salvage.records = good
    salvage.quarantine.sort(key=lambda q: q.offset)
    try:
        return convert(good)
    except Exception as exc:
        raise RecoveryError(f"cannot convert the records ({type(exc).__name__}: {exc}); "
                            "every record converts alone, so the failure lies between "
                            "records: please report it") from exc


def plan(data: bytes, fmt: str, events: Sequence[Event], salvage: Salvage,
         max_row_bytes: int = MAX_ROW_BYTES) -> Plan:
    """Steps that write ``events``: rows batched between compactions (at most
    BATCH_ROWS rows or about BATCH_BYTES each), bookkeeping attached to rows, each
    step with a deterministic batch id. Events the store would refuse are
    quarantined first (their records leave ``salvage.records``)."""
    digest = xxhash.xxh3_128_hexdigest(data)
    events = _storable(data, events, salvage, max_row_bytes)
    pending: list[Any] = []
    bookkeeping = 0
    # (action, row, first line, last line); each "compact" item carries its rows.
    items: list[tuple[str, list[dict[str, Any]], int, int, str]] = []
    last_row: dict[str, Any] | None = None
    for event in events:
        if event.kind == "bookkeeping":
            pending.extend(r.value for r in event.records)
            bookkeeping += len(event.records)
            continue
        rows = [dict(r, meta=dict(r.get("meta", {}))) for r in event.rows]
        anchor = event.records[-1]
        for row in rows:
            _mark(row, fmt, data, anchor)
        if rows and pending:
            rows[0]["meta"]["bookkeeping"] = pending
            pending = []
        if rows:
            last_row = rows[-1]
        first, last = event.records[0].line, event.records[-1].line
        key = ",".join(f"{r.offset}:{record_digest(data, r)}" for r in event.records)
        if event.kind == "compaction":
            if not rows:
                # A compaction whose summary did not survive: the boundary record
                # rides on the next row as bookkeeping.
                pending.extend(r.value for r in event.records)
                bookkeeping += len(event.records)
            items.append(("compact", rows, first, last, key))
        else:
            items.extend(("append", [row], first, last, key) for row in rows)
    unattached = 0
    if pending:
        if last_row is not None:
            last_row["meta"]["bookkeeping_after"] = pending
        else:
            unattached = len(pending)
    steps: list[Step] = []
    batch: list[dict[str, Any]] = []
    keys: list[str] = []
    size = 0
    span = [0, 0]

    def flush() -> None:
        nonlocal batch, keys, size
        if batch:
            steps.append(Step("append", batch, _batch_id(fmt, "a", keys), span[0], span[1]))
        batch, keys, size = [], [], 0

    for action, rows, first, last, key in items:
        if action == "compact":
            flush()
            steps.append(Step("compact", rows, _batch_id(fmt, "c", [key]), first, last))
            continue
        row_size = sum(_size(r) for r in rows)
        if batch and (len(batch) + len(rows) > BATCH_ROWS or size + row_size > BATCH_BYTES):
            flush()
        if not batch:
            span[0] = first
        batch.extend(rows)
        keys.append(key)
        size += row_size
        span[1] = last
    flush()
    return Plan(fmt, digest, salvage, steps, bookkeeping, unattached)


def _batch_id(fmt: str, kind: str, keys: Sequence[str]) -> str:
    """A batch id derived from the records a step writes (their offsets and byte
    digests): the same records always get the same id, whatever else the file holds."""
    return f"imp-{kind}-" + xxhash.xxh3_128_hexdigest(f"{fmt}|{'|'.join(keys)}".encode())


def plan_file(
    data: bytes,
    fmt: str,
    convert: Callable[[list[Record]], list[Event]],
    looks_like_record: Callable[[dict[str, Any]], bool],
    max_row_bytes: int = MAX_ROW_BYTES,
) -> Plan:
    """Salvage, convert and plan one file's bytes (pure)."""
    salvage = salvage_jsonl(data, looks_like_record)
    return plan(data, fmt, _convert(data, convert, salvage), salvage, max_row_bytes)


# --- the store side -----------------------------------------------------------


def write_quarantine(history: Any, source: str, entries: Iterable[Quarantined]) -> list[str]:
    """Put quarantined import bytes aside in the workspace's quarantine
    (``WorkspaceEngine.put_quarantine``); returns the entry names. Idempotent:
    the same bytes from the same source and offset are stored once. The
    workspace must exist (its first commit creates it)."""
    engine = history.engine
    return [engine.put_quarantine(e.data, source=source, offset=e.offset, reason=e.reason)
            for e in entries]


@dataclass
class ImportReport:
    """What an import did (``to_dict()`` is what the CLI prints)."""

    source: str
    format: str
    workspace: str
    records: int  # readable records (salvaged ones included)
    imported: int  # records kept in the history: rows' sources and bookkeeping
    salvaged: int  # records recovered from a damaged line
    quarantined: int  # quarantine entries
    quarantined_bytes: int
    bookkeeping: int  # records kept in meta rather than as rows
    rows: int  # rows the file maps to
    written: int  # rows written by this run
    already_present: int  # rows an earlier import wrote (skipped)
    compactions: int  # compactions written by this run
    quarantine: list[dict[str, Any]]  # {source, offset, length, reason, digest, entry}

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _present(history: Any, fmt: str) -> tuple[set[tuple[int, str]], set[str]]:
    """(offset, digest) of every record an earlier import wrote, and batch ids."""
    records: set[tuple[int, str]] = set()
    batches: set[str] = set()
    if not history.exists():
        return records, batches
    for row in history.rows():
        batch = row.batch.get("id")
        if isinstance(batch, str) and batch.startswith("imp-"):
            batches.add(batch)
        info = row.meta.get("import")
        if (isinstance(info, dict) and info.get("format") == fmt
                and isinstance(info.get("offset"), int) and isinstance(info.get("digest"), str)):
            records.add((info["offset"], info["digest"]))
    return records, batches


def _format_module(fmt: str) -> Any:
    modules = {"claude-code": claude_code, "codex": codex}
    if fmt not in modules:
        raise RecoveryError(f"unknown import format {fmt!r}; use one of {sorted(modules)}")
    return modules[fmt]


def plan_bytes(data: bytes, fmt: str, max_row_bytes: int = MAX_ROW_BYTES) -> Plan:
    """The pure plan for ``data`` in format ``claude-code`` or ``codex``."""
    module = _format_module(fmt)
    return plan_file(data, fmt, module.convert, module.looks_like_record, max_row_bytes)


def import_file(
    store: Any, workspace: str, path: str | os.PathLike[str], fmt: str, *, strict: bool = False
) -> ImportReport:
    """Import one transcript file into ``workspace`` of ``store``; idempotent.

    The first step that creates the workspace is written first, then the
    quarantined bytes (so the evidence sits in the workspace before the rest),
    then every other step whose records are not in the history yet. A failure
    raises the store's error; running the same import again resumes. ``strict``:
    raise RecoveryError and write nothing if any byte would be quarantined.
    """
    history = store.history(workspace)
    source = os.fspath(path)
    try:
        with open(source, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise RecoveryError(f"cannot read {source}: {exc.strerror}") from exc
    result = plan_bytes(data, fmt, getattr(store, "max_row_bytes", MAX_ROW_BYTES))
    if strict and result.salvage.quarantine:
        first = result.salvage.quarantine[0]
        raise RecoveryError(
            f"{source}: {len(result.salvage.quarantine)} ranges would be quarantined "
            f"({result.salvage.quarantined_bytes} bytes; the first at offset {first.offset}, "
            f"line {first.line}: {first.reason}); strict import writes nothing"
        )
    records = len(result.salvage.records)
    if result.unattached and not result.steps:
        raise RecoveryError(
            f"{source}: {result.unattached} records but no conversation record: nothing to "
            f"import (is this a {fmt} transcript?)"
        )
    present, batches = _present(history, fmt)
    written = 0
    skipped = 0
    compactions = 0
    new_steps: list[Step] = []
    for step in result.steps:
        fresh = [r for r in step.rows
                 if (r["meta"]["import"]["offset"], r["meta"]["import"]["digest"]) not in present]
        if step.batch_id in batches or (step.rows and not fresh):
            skipped += len(step.rows)
            continue
        if step.action == "compact" and len(fresh) != len(step.rows):
            skipped += len(step.rows)
            continue
        skipped += len(step.rows) - len(fresh)
        new_steps.append(Step(step.action, fresh, step.batch_id, step.first, step.last))
    if result.salvage.quarantine and not history.exists() and not new_steps:
        raise RecoveryError(
            f"{source}: no readable record; {result.salvage.quarantined_bytes} bytes are "
            "unreadable and nothing was written"
        )
    if new_steps and not history.exists():
        # The workspace directory appears with its first commit; write that first
        # so the quarantine lands inside an existing workspace.
        step = new_steps.pop(0)
        written += _write(history, step)
        compactions += step.action == "compact"
    names = write_quarantine(history, source, result.salvage.quarantine)
    for step in new_steps:
        written += _write(history, step)
        compactions += step.action == "compact"
    return ImportReport(
        source=source, format=fmt, workspace=workspace, records=records,
        imported=records - result.unattached, salvaged=result.salvage.salvaged,
        quarantined=len(result.salvage.quarantine),
        quarantined_bytes=result.salvage.quarantined_bytes, bookkeeping=result.bookkeeping,
        rows=result.rows, written=written, already_present=skipped, compactions=compactions,
        quarantine=[dict(q.manifest(source), entry=name)
                    for q, name in zip(result.salvage.quarantine, names, strict=True)],
    )


def _write(history: Any, step: Step) -> int:
    try:
        if step.action == "compact":
            history.compact(step.rows, batch_id=step.batch_id)
        else:
            history.append_many(step.rows, batch_id=step.batch_id)
    except InvalidRow as exc:  # checked per record in plan(): name the source line anyway
        index = exc.index if step.action == "append" and exc.index is not None and \
            exc.index < len(step.rows) else None
        line = step.rows[index]["meta"]["import"]["line"] if index is not None else None
        where = f"line {line}" if line is not None else f"lines {step.first}..{step.last}"
        raise InvalidRow(f"{where} of the source: {exc}; the rows before this batch are "
                         "imported, run the import again to resume") from exc
    return len(step.rows)
