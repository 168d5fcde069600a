"""``tledger import-legacy DIR WS``: import a session directory of the
reference design into a ledger workspace.

The directory holds ``chat-archive.jsonl`` (older rows) and ``chat.jsonl``
(active rows), one AI-SDK-style message a line (``{id, role, parts, metadata,
workspaceId?}``), and after a crashed truncation maybe
``chat-archive.jsonl.truncate.json`` (the marker) and ``chat-archive.jsonl.truncate``
(the pre-truncation archive). The source directory is only read: the crashed
truncation is settled *virtually* by the file engine's routine that settles its
own markers, and the import reads the files the settled directory would hold
(the tombstone in place of the archive when the truncation rolls back). That
reading is the file engine's one entry point here
(``ledger.storage.files.legacy``); the mapping below is this module's.

Any engine takes the import: the batches go in through the engine's
``append_batch`` and the lines set aside through its ``put_quarantine`` (a
workspace that does not exist yet is created empty first, by ``load_rows``);
on a file workspace the file engine's bulk load writes them all with one fsync.

Mapping, in file order (archive, then chat), each record to one batch:

- a **complete rollover boundary** (assistant, empty parts,
  ``contextBoundaryKind: "reset"``, valid ``context-window-rollover``
  ``muxMetadata``, not rejected, not partial) directly followed by its
  lead-in (``context-window-lead-in`` with the same ``rolloverId``) becomes
  one batch ``[reset(rollover), lead_in]``;
- **any other reset row** -- a boundary without its lead-in (a partial
  rollover prefix), with malformed rollover metadata, rejected or partial --
  becomes a **manual** reset: the old window stays sealed, no lead-in is
  invented, nothing is duplicated;
- a lead-in whose boundary is not right before it goes to the quarantine;
- ``context-budget-warning`` rows become ``warning`` rows;
- ``contextBudgetRejected`` rows become rejected records (an empty assistant
  record holding the original under ``meta.quarantine``);
- compaction boundaries (``compactionBoundary: true``, ``compacted``, a
  positive integer ``compactionEpoch``) become ``[reset(compaction), summary]``;
- ``partial`` rows keep ``partial: true``; everything else is a message.

Parts: ``text`` and ``reasoning`` as they are, ``file`` as ``media {mime,
url}``, ``dynamic-tool`` as ``tool_call`` plus, once settled, ``tool_result``
(``error: true`` for ``output-error``); unknown part types and fields are
kept. Every row keeps its legacy ``historySequence`` (when present, even
repeated), metadata and extra fields in ``meta.legacy`` and gets a fresh
ledger seq. Torn and unreadable lines, records that are not messages and rows
the store refuses (too large, outside the JSON domain) go to the quarantine;
where their bytes may be a reset, a manual reset row takes their place.

Importing the same directory again adds nothing: each record is keyed by the
digest of its line and the number of identical lines before it
(``meta.legacy.key``), and keys already in the workspace are skipped.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import xxhash

from ledger.core.batches import PendingBatch
from ledger.core.errors import InvalidRow, LedgerError, RecoveryError
from ledger.core.format import rows as fmt
from ledger.core.husks import QUARANTINE_VERSION
from ledger.core.rows import new_id, now_ms, prepare_batch, prepare_bodies
from ledger.storage.files.legacy import (
    ARCHIVE,
    CHAT,
    LegacyView,
    bulk_import,
    legacy_lines,
    settle_view,
)
from ledger.transcript.history import History

__all__ = ["ImportReport", "Record", "import_legacy", "map_part", "read_records"]

ROLLOVER = "context-window-rollover"
LEAD_IN = "context-window-lead-in"
WARNING = "context-budget-warning"
_ROLES = ("user", "assistant", "system")


@dataclass
class Record:
    source: str  # path of the legacy file
    offset: int
    raw: bytes  # the line without its newline
    msg: dict[str, Any] | None  # None: unreadable
    problem: str | None  # why it is unreadable / not a message
    key: str


@dataclass
class ImportReport:
    workspace: str
    source: str
    resolution: dict[str, Any] | None = None
    records: int = 0
    imported_rows: int = 0
    batches: int = 0
    skipped: int = 0  # records already imported
    quarantined: list[dict[str, Any]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    epoch: int | None = None
    check_ok: bool | None = None

    def bump(self, what: str, n: int = 1) -> None:
        self.counts[what] = self.counts.get(what, 0) + n

    def to_dict(self) -> dict[str, Any]:
        return {"workspace": self.workspace, "source": self.source,
                "truncation_marker": self.resolution, "records": self.records,
                "imported_rows": self.imported_rows, "batches": self.batches,
                "skipped_already_imported": self.skipped, "quarantined": self.quarantined,
                "counts": dict(sorted(self.counts.items())), "epoch": self.epoch,
                "check_ok": self.check_ok}

    def text(self) -> str:
        out = []
        if self.resolution is not None:
            out.append(f"crashed truncation: {self.resolution['action']}")
        for q in self.quarantined:
            reset = " (a manual reset takes its place)" if q.get("reset") else ""
            out.append(f"quarantined {os.path.basename(q['source'])}@{q['offset']} "
                       f"({q['length']} bytes): {q['reason']} -> {q['entry']}{reset}")
        counts = ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))
        out.append(f"{self.workspace}: imported {self.imported_rows} rows in {self.batches} "
                   f"batches from {self.records} records ({self.skipped} already imported; "
                   f"{len(self.quarantined)} quarantined){'; ' + counts if counts else ''}")
        return "\n".join(out)


# --- reading -------------------------------------------------------------------


class _PairsDict(dict[str, Any]):
    pairs: list[tuple[str, Any]]


def _pairs_hook(items: list[tuple[str, Any]]) -> _PairsDict:
    d = _PairsDict(items)
    d.pairs = items
    return d


def _hidden_reset(raw: bytes) -> bool:
    """A duplicate ``contextBoundaryKind: "reset"`` in ``metadata`` that a
    last-wins decoder hid (fail closed)."""
    try:
        top = json.loads(raw, object_pairs_hook=_pairs_hook)
    except ValueError:
        return True
    md = top.get("metadata") if isinstance(top, dict) else None
    return isinstance(md, _PairsDict) and any(
        k == "contextBoundaryKind" and v == "reset" for k, v in md.pairs
    )


def read_records(view: LegacyView) -> Iterator[Record]:
    """Every line of the archive, then the chat, classified (streaming)."""
    seen: dict[str, int] = {}
    for line in legacy_lines(view):
        raw = line.data
        if not raw.strip(b" \t\r"):
            continue
        digest = xxhash.xxh3_128_hexdigest(raw)
        k = seen.get(digest, 0)
        seen[digest] = k + 1
        key = f"{digest}:{k}"
        msg = fmt.decode_unframed(raw)
        problem = None
        if msg is None:
            if not line.complete:
                problem = "torn line (no newline at the end of the file)"
            else:
                try:
                    raw.decode("utf-8")
                    problem = "unreadable line (not a JSON object)"
                except UnicodeDecodeError:
                    problem = "invalid UTF-8"
        elif msg.get("role") not in _ROLES or not isinstance(msg.get("parts"), list):
            problem = "unknown record (not a message with a role and parts)"
        yield Record(line.source, line.offset, raw, msg if problem is None else None, problem,
                     key)


# --- mapping -----------------------------------------------------------------------


def _meta_of(msg: dict[str, Any]) -> dict[str, Any]:
    md = msg.get("metadata")
    return md if isinstance(md, dict) else {}


def _is_reset(rec: Record) -> bool:
    assert rec.msg is not None
    md = _meta_of(rec.msg)
    if md.get("contextBoundaryKind") == "reset":
        return True
    return fmt.raw_may_be_reset(rec.raw) and _hidden_reset(rec.raw)


def _mux(msg: dict[str, Any]) -> dict[str, Any]:
    m = _meta_of(msg).get("muxMetadata")
    return m if isinstance(m, dict) else {}


def _valid_rollover_meta(m: dict[str, Any]) -> bool:
    def num(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    return (
        m.get("type") == ROLLOVER
        and isinstance(m.get("rolloverId"), str) and bool(m["rolloverId"])
        and isinstance(m.get("reason"), str)
        and (m.get("previousWindowId") is None or isinstance(m.get("previousWindowId"), str))
        and "flushOpportunity" in m
        and num(m.get("contextTokens")) and num(m.get("maxTokens"))
    )


def _complete_boundary(rec: Record) -> bool:
    msg = rec.msg
    assert msg is not None
    md = _meta_of(msg)
    return (
        msg.get("role") == "assistant" and msg.get("parts") == [] and _is_reset(rec)
        and _valid_rollover_meta(_mux(msg)) and md.get("contextBudgetRejected") is not True
        and md.get("partial") is not True
    )


def _is_lead_in_for(rec: Record, rollover_id: str | None) -> bool:
    if rec.msg is None:
        return False
    m = _mux(rec.msg)
    return m.get("type") == LEAD_IN and (rollover_id is None or m.get("rolloverId") == rollover_id)


def _valid_compaction(md: dict[str, Any]) -> bool:
    epoch = md.get("compactionEpoch")
    return (
        md.get("compactionBoundary") is True and bool(md.get("compacted"))
        and isinstance(epoch, int) and not isinstance(epoch, bool) and epoch > 0
        and md.get("partial") is not True
    )


def map_part(p: Any) -> list[Any]:
    """Canonical part(s) for one AI-SDK part; unknown ones are kept."""
    if not isinstance(p, dict) or not isinstance(p.get("type"), str):
        return [{"type": "legacy-part", "value": p}]
    t = p["type"]
    rest = {k: v for k, v in p.items() if k != "type"}
    if t in ("text", "reasoning") and isinstance(p.get("text"), str):
        return [{"type": t, **rest}]
    if t == "file" and isinstance(p.get("mediaType"), str):
        extra = {k: v for k, v in rest.items() if k not in ("mediaType", "url")}
        out = {"type": "media", "mime": p["mediaType"]}
        if "url" in p:
            out["url"] = p["url"]
        return [{**out, **extra}]
    if t == "dynamic-tool" and isinstance(p.get("toolCallId"), str) and isinstance(
        p.get("toolName"), str
    ):
        used = ("toolCallId", "toolName", "input", "output", "errorText")
        extra = {k: v for k, v in rest.items() if k not in used}
        call = {"type": "tool_call", "id": p["toolCallId"], "name": p["toolName"],
                "input": p.get("input"), **extra}
        state = p.get("state")
        if state == "output-available" or (state is None and "output" in p):
            return [call, {"type": "tool_result", "id": p["toolCallId"],
                           "output": p.get("output"), "error": False}]
        if state == "output-error":
            return [call, {"type": "tool_result", "id": p["toolCallId"],
                           "output": p.get("errorText"), "error": True}]
        return [call]
    return [p]


def _parts(parts: Any) -> list[Any]:
    out: list[Any] = []
    for p in parts if isinstance(parts, list) else []:
        out.extend(map_part(p))
    return out


def _legacy_meta(rec: Record, msg: dict[str, Any]) -> dict[str, Any]:
    md = msg.get("metadata")
    legacy: dict[str, Any] = {"key": rec.key}
    seq = md.get("historySequence") if isinstance(md, dict) else None
    if isinstance(seq, int) and not isinstance(seq, bool):
        legacy["sequence"] = seq
    if md is not None:
        legacy["metadata"] = md
    extra = {k: v for k, v in msg.items() if k not in ("id", "role", "parts", "metadata")}
    if extra:
        legacy["fields"] = extra
    return legacy


Put = Callable[..., str]  # (data, *, source, offset, reason) -> the quarantine entry's name
Rows = list[dict[str, Any]]


class _Mapper:
    def __init__(self, max_row_bytes: int, report: ImportReport, put: Put,
                 known: set[str]) -> None:
        self.max_row_bytes = max_row_bytes
        self.report = report
        self.put = put
        self.known = known
        self.ts = 0
        self.seqs: dict[int, int] = {}

    def _ts(self, msg: dict[str, Any]) -> int:
        t = _meta_of(msg).get("timestamp")
        if isinstance(t, int) and not isinstance(t, bool) and 0 <= t < 1 << 53:
            self.ts = t
        elif not self.ts:
            self.ts = fmt_now()
        return self.ts

    def _row(self, rec: Record, kind: str, **over: Any) -> dict[str, Any]:
        msg = rec.msg
        assert msg is not None
        meta: dict[str, Any] = {"legacy": _legacy_meta(rec, msg)}
        md = _meta_of(msg)
        if md.get("synthetic") is True:
            meta["synthetic"] = True
        row: dict[str, Any] = {"kind": kind, "role": msg["role"], "parts": _parts(msg["parts"]),
                               "partial": md.get("partial") is True, "meta": meta,
                               "ts": self._ts(msg)}
        if isinstance(msg.get("id"), str) and msg["id"]:
            row["id"] = msg["id"]
        row.update(over)
        return row

    def _manual_reset(self, rec: Record, recovered: str | None = None) -> dict[str, Any]:
        self.report.bump("manual_resets")
        meta: dict[str, Any] = {}
        if recovered is not None:
            meta["recovered"] = recovered
            meta["legacy"] = {"key": rec.key}
        else:
            assert rec.msg is not None
            meta["legacy"] = _legacy_meta(rec, rec.msg)
        row: dict[str, Any] = {"kind": "reset", "role": "system", "parts": [],
                               "reset": {"reason": "manual"}, "meta": meta}
        if rec.msg is not None:
            row["ts"] = self._ts(rec.msg)
            if isinstance(rec.msg.get("id"), str) and rec.msg["id"]:
                row["id"] = rec.msg["id"]
        problem = self._checked([row])
        if problem is not None:
            # Metadata outside the store's JSON domain (or too large): the
            # reset must land anyway, so its line goes to the quarantine.
            if recovered is None:
                recovered = self.put(rec.raw, source=rec.source, offset=rec.offset,
                                       reason=problem)
                self.report.quarantined.append({
                    "source": rec.source, "offset": rec.offset, "length": len(rec.raw),
                    "reason": problem, "entry": recovered, "reset": True})
            row["meta"] = {"recovered": recovered, "legacy": {"key": rec.key}}
            row.pop("id", None)
        return row

    def quarantine(self, rec: Record, reason: str) -> dict[str, Any] | None:
        """Put a record's line aside; returns a manual reset row for its place
        when its bytes may be a reset."""
        entry = self.put(rec.raw, source=rec.source, offset=rec.offset, reason=reason)
        is_reset = fmt.raw_may_be_reset(rec.raw)
        self.report.quarantined.append({"source": rec.source, "offset": rec.offset,
                                        "length": len(rec.raw), "reason": reason,
                                        "entry": entry, "reset": is_reset})
        self.report.bump("quarantined")
        if is_reset:
            return self._manual_reset(rec, recovered=entry)
        return None

    def _checked(self, rows: list[dict[str, Any]]) -> str | None:
        try:
            prepare_batch(rows, 1, "b_check", self.max_row_bytes, internal=True)
        except InvalidRow as exc:
            return f"refused by the store: {exc}"
        return None

    def _sequence(self, msg: dict[str, Any]) -> None:
        seq = _meta_of(msg).get("historySequence")
        if not isinstance(seq, int) or isinstance(seq, bool):
            self.report.bump("missing_sequences")
            return
        if seq in self.seqs:
            self.report.bump("repeated_sequences")
        self.seqs[seq] = self.seqs.get(seq, 0) + 1

    def batches(self, records: Iterator[Record]) -> Iterator[Rows]:
        pending: Record | None = None
        it = iter(records)
        while True:
            rec = pending if pending is not None else next(it, None)
            pending = None
            if rec is None:
                return
            self.report.records += 1
            if rec.key in self.known:
                self.report.skipped += 1
                continue
            if rec.msg is None:
                assert rec.problem is not None
                row = self.quarantine(rec, rec.problem)
                if row is not None:
                    yield self._emit([row])
                continue
            msg = rec.msg
            self._sequence(msg)
            md = _meta_of(msg)
            mux = _mux(msg)
            rows: list[dict[str, Any]]
            if _is_reset(rec):
                if _complete_boundary(rec):
                    nxt = next(it, None)
                    if nxt is not None and nxt.key not in self.known and _is_lead_in_for(
                        nxt, mux.get("rolloverId")
                    ):
                        assert nxt.msg is not None
                        self.report.records += 1
                        self._sequence(nxt.msg)
                        reset = self._row(rec, "reset", role="system", parts=[],
                                          reset={"reason": "rollover"}, partial=False)
                        rows = [reset, self._row(nxt, "lead_in")]
                        problem = self._checked(rows)
                        if problem is None:
                            self.report.bump("rollovers")
                            yield self._emit(rows)
                            continue
                        # A refused pair: seal with a manual reset, set the lead-in aside.
                        yield self._emit([self._manual_reset(rec)])
                        r = self.quarantine(nxt, "lead-in of a refused rollover: " + problem)
                        if r is not None:
                            yield self._emit([r])
                        continue
                    pending = nxt
                    self.report.bump("partial_rollovers")
                yield self._emit([self._manual_reset(rec)])
                continue
            if mux.get("type") == LEAD_IN:
                r = self.quarantine(rec, "lead-in without its rollover boundary before it")
                if r is not None:
                    yield self._emit([r])
                continue
            if md.get("contextBudgetRejected") is True:
                rows = [self._rejected(rec)]
                self.report.bump("rejected")
            elif mux.get("type") == WARNING:
                rows = [self._row(rec, "warning")]
                self.report.bump("warnings")
            elif _valid_compaction(md):
                reset = {"kind": "reset", "role": "system", "parts": [],
                         "reset": {"reason": "compaction"}, "ts": self._ts(msg),
                         "meta": {"legacy": {"key": rec.key + ":boundary"}}}
                rows = [reset, self._row(rec, "message")]
                self.report.bump("compactions")
            else:
                rows = [self._row(rec, "message")]
                if md.get("partial") is True:
                    self.report.bump("partial_rows")
            problem = self._checked(rows)
            if problem is not None:
                r = self.quarantine(rec, problem)
                if r is not None:
                    yield self._emit([r])
                continue
            yield self._emit(rows)

    def _rejected(self, rec: Record) -> dict[str, Any]:
        msg = rec.msg
        assert msg is not None
        md = _meta_of(msg)
        capsule = md.get("contextBudgetRejectedMessage")
        capsule = capsule if isinstance(capsule, dict) else {}
        inner: dict[str, Any] = {
            "kind": "message",
            "role": capsule.get("role", msg.get("role")),
            "parts": _parts(capsule.get("parts", msg.get("parts"))),
            "partial": False,
            "meta": {"legacy": _legacy_meta(rec, msg)},
        }
        if isinstance(msg.get("id"), str):
            inner["id"] = msg["id"]
        row: dict[str, Any] = {"kind": "message", "role": "assistant", "parts": [],
                               "partial": False,
                               "meta": {"quarantine": {"v": QUARANTINE_VERSION,
                                                       "row": inner}},
                               "ts": self._ts(msg)}
        if isinstance(msg.get("id"), str) and msg["id"]:
            row["id"] = msg["id"]
        return row

    def _emit(self, rows: Rows) -> Rows:
        self.report.imported_rows += len(rows)
        self.report.batches += 1
        return rows


def fmt_now() -> int:
    return now_ms()


def _known_keys(history: History) -> set[str]:
    """``meta.legacy.key`` of every row (rejected originals included)."""
    keys: set[str] = set()
    if not history.exists():
        return keys
    for row in history.rows():
        data = row.data
        for meta in (data.get("meta"), _inner_meta(data)):
            leg = meta.get("legacy") if isinstance(meta, dict) else None
            if isinstance(leg, dict) and isinstance(leg.get("key"), str):
                keys.add(leg["key"])
    return keys


def _inner_meta(row: dict[str, Any]) -> Any:
    meta = row.get("meta")
    q = meta.get("quarantine") if isinstance(meta, dict) else None
    inner = q.get("row") if isinstance(q, dict) else None
    return inner.get("meta") if isinstance(inner, dict) else None


class _Writer(Protocol):
    def put(self, data: bytes, *, source: str, offset: int, reason: str) -> str: ...

    def load(self, batches: Iterable[Sequence[dict[str, Any]]]) -> int | None: ...


class _EngineWriter:
    """Any engine: each batch through ``append_batch``, set-aside lines through
    ``put_quarantine`` (the workspace exists: created empty when it did not)."""

    def __init__(self, history: History) -> None:
        self.history = history
        if not history.exists():
            history.engine.load_rows(())

    def put(self, data: bytes, *, source: str, offset: int, reason: str) -> str:
        return self.history.engine.put_quarantine(data, source=source, offset=offset,
                                                  reason=reason)

    def load(self, batches: Iterable[Sequence[dict[str, Any]]]) -> int | None:
        epoch = None
        max_bytes = self.history.store.max_row_bytes
        for k, rows in enumerate(batches):
            bid = new_id("b_")
            try:
                prepared = prepare_bodies(rows, 0, bid, max_bytes, internal=True)
            except InvalidRow as exc:  # pragma: no cover - rows are checked before
                raise InvalidRow(f"batch {k}: {exc}", exc.index) from exc
            epoch = self.history.engine.append_batch(
                PendingBatch(rows, bid, False, True, prepared)).epoch
        return epoch


def import_legacy(history: History, dirpath: str) -> ImportReport:
    """Import the legacy session directory ``dirpath`` (module doc) into
    ``history``, on any engine."""
    if not os.path.isdir(dirpath):
        raise RecoveryError(f"{dirpath} is not a directory (expected a legacy session "
                            f"directory with {ARCHIVE} and/or {CHAT})")
    view = settle_view(dirpath)
    report = ImportReport(history.workspace, os.path.abspath(dirpath))
    if view.resolution is not None:
        report.resolution = view.resolution.to_dict()
    if view.archive is None and view.chat is None:
        raise RecoveryError(f"{dirpath}: neither {ARCHIVE} nor {CHAT} is there; nothing to import")
    writer: _Writer = bulk_import(history.engine) or _EngineWriter(history)
    known = _known_keys(history)
    mapper = _Mapper(history.store.max_row_bytes, report, writer.put, known)
    try:
        report.epoch = writer.load(mapper.batches(read_records(view)))
    except InvalidRow as exc:  # pragma: no cover - rows are checked before the load
        raise RecoveryError(f"import into {history.workspace!r} refused a row: {exc}") from exc
    except LedgerError:
        raise
    return report
