"""Claude Code session JSONL -> import events (pure).

A session file holds one JSON object a line, typed by ``type``: ``user`` and
``assistant`` rows carry ``message`` (an Anthropic message: ``content`` is a
string or a list of ``text`` / ``thinking`` / ``redacted_thinking`` /
``tool_use`` / ``tool_result`` / ``image`` blocks); ``system``, ``progress``,
``summary``, ``file-history-snapshot`` and ``queue-operation`` rows are the
client's bookkeeping. Rows are linked by ``uuid`` / ``parentUuid``; they are
imported in file order (a branch abandoned by a rewind is imported as it stands
in the file; the links stay in ``meta.source``).

Mapping:

- ``user`` with a string, or with text/image blocks -> a ``user`` row; a ``user``
  row holding ``tool_result`` blocks -> a ``tool`` row (its other blocks stay in
  that row, after the results). ``isMeta`` rows (caveats, hook feedback) are sent
  to the model by Claude Code, so they are ordinary rows too.
- ``assistant`` -> an ``assistant`` row: text, ``thinking`` -> ``reasoning``
  (with ``signature``), ``redacted_thinking`` -> ``reasoning`` with ``redacted``,
  ``tool_use`` -> ``tool_call``. Claude Code writes each block of one API message
  as its own row; they stay separate rows (the adapters merge them).
- Blocks of other types are kept as parts ``{"type": "anthropic:<type>", "raw"}``
  (the Anthropic adapter sends them back as they were).
- ``system`` with ``subtype: "compact_boundary"`` followed by a ``user`` row with
  ``isCompactSummary: true`` -> a compaction whose summary row is that user row
  (the boundary record is kept in the row's ``meta.compact_boundary``).
- Sidechain rows (``isSidechain``) are subagent turns. A subagent file (every row
  a sidechain) imports as a conversation of its own. In a file that mixes chains,
  rows of the chain other than its first conversation row's are bookkeeping, so a
  subagent's turns never enter the parent's provider view.
- Everything else -- other ``system`` rows, ``progress``, ``summary`` (session
  titles), ``file-history-snapshot``, ``queue-operation``, unknown types, and
  conversation rows with no content -- is bookkeeping, kept whole in meta.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ledger.adapters.anthropic import from_messages
from recovery.events import Event, source_row
from recovery.salvage import Record

FORMAT = "claude-code"
_SIDE_TYPES = {
    "summary": "leafUuid",
    "file-history-snapshot": "snapshot",
    "queue-operation": "operation",
}


def looks_like_record(value: dict[str, Any]) -> bool:
    """Whether an object found inside a damaged line is a session row (nested
    objects -- content blocks, the messages inside ``progress`` rows -- are not)."""
    kind = value.get("type")
    if not isinstance(kind, str):
        return False
    if kind in _SIDE_TYPES:
        return _SIDE_TYPES[kind] in value
    return "sessionId" in value and "uuid" in value


def _parts(message: Mapping[str, Any], role: str) -> list[dict[str, Any]]:
    """Canonical parts of one Claude Code message, through the Anthropic adapter
    (one mapping of Anthropic blocks in the code base), results first."""
    content = message.get("content")
    rows = from_messages([{"role": role, "content": content}])
    return [part for row in rows for part in row["parts"]]


def convert(records: list[Record]) -> list[Event]:
    """Import events for the records of one session file, in file order."""
    events: list[Event] = []
    main_chain: bool | None = None
    compaction: Event | None = None
    for record in records:
        value = record.value
        kind = value.get("type")
        message = value.get("message")
        conversational = kind in ("user", "assistant") and isinstance(message, Mapping)
        if conversational and main_chain is None:
            main_chain = bool(value.get("isSidechain", False))
        if kind == "system" and value.get("subtype") == "compact_boundary":
            compaction = Event("compaction", [record])
            events.append(compaction)
            continue
        if not conversational or bool(value.get("isSidechain", False)) != main_chain:
            events.append(Event("bookkeeping", [record]))
            continue
        assert isinstance(message, Mapping)
        role = "assistant" if kind == "assistant" else "user"
        parts = _parts(message, role)
        if not parts:
            events.append(Event("bookkeeping", [record]))
            continue
        if role == "user" and any(p.get("type") == "tool_result" for p in parts):
            role = "tool"
        if compaction is not None and kind == "user" and value.get("isCompactSummary"):
            boundary = compaction.records[0].value
            compaction.records.append(record)
            compaction.rows.append(
                source_row(role, parts, record, FORMAT, compact_boundary=boundary)
            )
            compaction = None
            continue
        compaction = None
        events.append(Event("row", [record], [source_row(role, parts, record, FORMAT)]))
    return events
