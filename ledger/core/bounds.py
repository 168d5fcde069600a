"""The per-call bounds of ``session_history`` (DESIGN.md 8) and the units an
engine's page reader reports in. The numbers are the contract; every engine
counts the raw bytes it reads against them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

RESULT_BYTES = 16 * 1024  # the serialized result
SCAN_BYTES = 2 * 1024 * 1024  # raw bytes read per call
SCAN_ROWS = 500  # rows examined per call
LINE_CAP = 1024 * 1024  # a longer line is never decoded (listed under skipped)


@dataclass
class Budget:
    """What one call has read so far (raw bytes) and examined (rows)."""

    bytes_read: int = 0
    rows: int = 0


@dataclass
class Event:
    """One line a page reader met: where it is (``part``, ``offset``: the
    engine's position, ``ledger.storage.engine``), its decoded row (None when
    it fails verification) and its bytes; ``oversized`` lines are not decoded."""

    part: int
    offset: int
    end: int  # offset just past the line's newline
    row: dict[str, Any] | None  # None: unverifiable
    line: bytes
    oversized: bool = False
    seq: int | None = None


class SkipSink(Protocol):
    """Where a reader lists a line it will not serve (the result's ``skipped``)."""

    def add_skipped(self, seq: int | None, nbytes: int) -> None: ...
