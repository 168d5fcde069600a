"""The one row a benchmark's SQL query returns (a size, a count)."""

from __future__ import annotations

from typing import TypeVar

_R = TypeVar("_R")


def one(row: _R | None, query: str) -> _R:
    """``row`` (a cursor's ``fetchone()``), which an aggregate query always
    returns: ``RuntimeError`` naming ``query`` when there is none."""
    if row is None:
        raise RuntimeError(f"no row from {query!r}")
    return row
