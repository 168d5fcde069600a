"""Counting rows as a provider API receives them (``ledger.tokens.counting.RowShape``).

Each row is rendered by the API's adapter, with the bytes of genuine media
parts taken out first; the rendered JSON is then charged as JSON and each
media part gets its documented allowance instead of being counted as text.
A tool call is rendered with its result and a result with its call, the way
the adapter pairs them; both are charged where they stand, so a pair is
counted about twice its framing: conservative, never short.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ledger.adapters import ADAPTERS
from ledger.tokens.counting import CANONICAL, Accountant, Count, RowShape, media_info

__all__ = [
    "FAMILY_API",
    "AdapterShape",
    "shape_for",
]

# The API a model family's requests go to (others use Chat Completions, the
# most common wire shape).
FAMILY_API = {"openai": "openai-chat", "anthropic": "anthropic"}
_PLACEHOLDER = "AAAA"


class AdapterShape:
    """Rows as the adapter of ``api`` renders them."""

    def __init__(self, api: str) -> None:
        if api not in ADAPTERS:
            raise ValueError(f"unknown API {api!r}: one of {sorted(ADAPTERS)}")
        self.api = api
        self.key = f"adapter-{api}-1"

    def measure(self, row: Mapping[str, Any], acct: Accountant) -> Count:
        parts = row.get("parts")
        media: list[dict[str, Any]] = []
        if isinstance(parts, list):
            stripped = []
            for part in parts:
                info = media_info(part) if isinstance(part, Mapping) else None
                if info is not None:
                    media.append(info)
                    part = {**part, "data": _PLACEHOLDER} if "data" in part else part
                stripped.append(part)
            row = {**row, "parts": stripped}
        body = ADAPTERS[self.api].to_request([row])
        body.pop("model", None)
        total = acct.json(body)
        for info in media:
            total += acct.media(info)
        return total


def shape_for(api: str | None = None, family: str | None = None) -> RowShape:
    """The row shape of ``api``, or of a model ``family``'s usual API;
    ``"canonical"`` counts the canonical JSON row."""
    if api == "canonical":
        return CANONICAL
    if api is None:
        api = FAMILY_API.get(family or "", "openai-chat")
    return AdapterShape(api)
