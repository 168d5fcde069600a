"""What a format converter (``claude_code``, ``codex``) hands the importer:
events in file order, and canonical rows built from source records."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from recovery.salvage import Record


@dataclass
class Event:
    """One step of a converted transcript, in file order.

    ``kind`` is ``"row"`` (``rows`` holds one conversation row), ``"compaction"``
    (``rows`` holds the summary rows, possibly none) or ``"bookkeeping"``. ``records``
    are the source records the event came from.
    """

    kind: str
    records: list[Record]
    rows: list[dict[str, Any]] = field(default_factory=list)


def parse_ts(value: Any) -> int | None:
    """Milliseconds since the epoch for an ISO-8601 timestamp, else None."""
    if not isinstance(value, str) or not value:
        return None
    text = value[:-1] + "+00:00" if value.endswith("Z") else value
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    return int(moment.timestamp() * 1000)


def source_row(
    role: str, parts: list[dict[str, Any]], record: Record, fmt: str, **meta: Any
) -> dict[str, Any]:
    """A canonical row for a conversation record; ``meta.import`` is filled by plan()."""
    row: dict[str, Any] = {"kind": "message", "role": role, "parts": parts,
                           "meta": {"source": record.value, **meta}}
    ts = parse_ts(record.value.get("timestamp"))
    if ts is not None:
        row["ts"] = ts
    return row
