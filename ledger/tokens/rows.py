"""Token costs of rows: the accountant, the canonical and rendered row shapes,
and the per-row token cache.

A row's ``kind`` or a part's ``type`` that is no string, also one that cannot
be hashed (a list, an object), is a kind or a type this build does not know:
such a row is not counted (never sent), such a part is charged as JSON, its
``type`` value included, like a part of an unknown type. Counting measures
rows, it does not judge them: the store refuses such a row when it is
appended (``ledger.core.rows``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import msgspec
import xxhash

from ledger.adapters.common import is_parts_output
from ledger.core.errors import InvalidRow
from ledger.tokens.costs import (
    MediaHook,
    TextFn,
    _media_part,
    json_cost,
    media_tokens,
)
from ledger.tokens.units import MESSAGE_FRAMING, PART_FRAMING, PART_FRAMING_OTHER, ZERO, Count

__all__ = [
    "CANONICAL",
    "DEFAULT_CACHE",
    "VISIBLE_KINDS",
    "Accountant",
    "CanonicalShape",
    "RenderedShape",
    "RowShape",
    "RowTokenCache",
]

# --------------------------------------------------------------------------- rows

VISIBLE_KINDS = frozenset({"message", "lead_in", "warning", "truncation"})


class Accountant:
    """The counting primitives a :class:`RowShape` uses: text, JSON and media
    under one encoding (or the approximation) and one media profile."""

    def __init__(self, text: TextFn, media_profile: str) -> None:
        self.text = text
        self.media_profile = media_profile

    def json(self, obj: Any, media: MediaHook | None = None) -> Count:
        return json_cost(obj, self.text, media)

    def value(self, obj: Any) -> Count:
        """A string as text, anything else as JSON, None as nothing."""
        if obj is None:
            return ZERO
        return self.text(obj) if isinstance(obj, str) else self.json(obj)

    def media(self, info: Mapping[str, Any]) -> Count:
        tokens = media_tokens(
            self.media_profile,
            info["mime"],
            data=info.get("data"),
            width=info.get("width"),
            height=info.get("height"),
            pages=info.get("pages"),
        )
        return Count(tokens, False)

    def tool_output(self, output: Any) -> Count:
        if output is None:
            return ZERO
        if isinstance(output, str):
            return self.text(output)
        if not is_parts_output(output):
            return self.json(output)
        total = Count(2, False)
        for part in output:
            info = _media_part(part)
            if info is not None:
                total += Count(PART_FRAMING["media"], False) + self.media(info)
            else:
                total += Count(PART_FRAMING["text"], False) + self.text(part["text"])
        return total


class RowShape(Protocol):
    """How rows reach the provider. ``key`` joins the cache key: change it when
    ``measure`` changes. Provider adapters implement this with the
    :class:`Accountant` primitives (``acct.json(body, media=hook)`` counts an
    adapter-produced request body with a path-aware media hook)."""

    key: str

    def measure(self, row: Mapping[str, Any], acct: Accountant) -> Count: ...


class CanonicalShape:
    """The canonical JSON row, as documented in this module."""

    key = "canonical-1"

    def measure(self, row: Mapping[str, Any], acct: Accountant) -> Count:
        try:  # only an unhashable kind raises: a kind this build does not know
            if row.get("kind", "message") not in VISIBLE_KINDS:
                return ZERO
        except TypeError:
            return ZERO
        parts = row.get("parts", [])
        if not isinstance(parts, list):
            raise InvalidRow(f"'parts' must be a list, not {type(parts).__name__}")
        total = Count(MESSAGE_FRAMING, False)
        for part in parts:
            total += self._part(part, acct)
        return total

    def _part(self, part: Any, acct: Accountant) -> Count:
        if not isinstance(part, Mapping):
            return Count(PART_FRAMING_OTHER, False) + acct.json(part)
        kind = part.get("type")
        try:  # only an unhashable type raises: an unknown part, charged as JSON below
            framing = Count(PART_FRAMING.get(kind, PART_FRAMING_OTHER), False)  # type: ignore[arg-type]
        except TypeError:
            framing = Count(PART_FRAMING_OTHER, False)
        if kind in ("text", "reasoning") and isinstance(part.get("text"), str):
            return framing + acct.text(part["text"])
        if kind == "tool_call":
            name, call_id = acct.value(part.get("name")), acct.value(part.get("id"))
            return framing + name + call_id + acct.value(part.get("input"))
        if kind == "tool_result":
            error = part.get("error")
            return (
                framing
                + acct.value(part.get("id"))
                + (acct.text(error) if isinstance(error, str) else ZERO)
                + acct.tool_output(part.get("output"))
            )
        if kind == "media":
            info = _media_part(part)
            if info is not None:
                return framing + acct.media(info)
        return framing + acct.json(part)


class RenderedShape:
    """Rows rendered by a provider adapter into its own JSON (one message object
    or a list of them per row), counted as JSON with a media hook."""

    def __init__(
        self,
        key: str,
        render: Callable[[Mapping[str, Any]], Any],
        media: MediaHook | None = None,
    ) -> None:
        self.key = key
        self._render = render
        self._media = media

    def measure(self, row: Mapping[str, Any], acct: Accountant) -> Count:
        return Count(MESSAGE_FRAMING, False) + acct.json(self._render(row), self._media)


CANONICAL = CanonicalShape()


class RowTokenCache:
    """An LRU of row costs keyed by a 16-byte digest: derived data, safe to drop
    at any time. Lookups take no lock (a hit only reorders); inserts do."""

    def __init__(self, maxsize: int = 65536) -> None:
        self.maxsize = maxsize
        self._data: OrderedDict[bytes, Count] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: bytes) -> Count | None:
        found = self._data.get(key)
        if found is None:
            self.misses += 1
            return None
        self.hits += 1
        try:
            self._data.move_to_end(key)
        except KeyError:  # evicted by another thread meanwhile; the value is still right
            pass
        return found

    def put(self, key: bytes, value: Count) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def __len__(self) -> int:
        return len(self._data)


DEFAULT_CACHE = RowTokenCache()

_row_encoder = msgspec.json.Encoder()


def _row_key(row: Mapping[str, Any], seed: int) -> bytes | None:
    """xxh3-128 of what the provider sees of a row (kind, role, parts), seeded
    by the counting profile so that profiles never share an entry."""
    try:
        raw = _row_encoder.encode((row.get("kind"), row.get("role"), row.get("parts")))
    except (TypeError, ValueError, OverflowError):
        return None
    return xxhash.xxh3_128_digest(raw, seed)




