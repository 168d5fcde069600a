"""Provider message adapters: canonical rows <-> one API's request shape.

One module per API, each a set of pure functions over row dicts:
:mod:`~ledger.adapters.openai_chat`, :mod:`~ledger.adapters.openai_responses` and
:mod:`~ledger.adapters.anthropic`. What they share (which rows are visible, how
tool calls and results stay paired) is in :mod:`~ledger.adapters.common`.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import ModuleType
from typing import Any

from ledger.adapters import anthropic, openai_chat, openai_responses
from ledger.adapters.common import Row

ADAPTERS: dict[str, ModuleType] = {
    "openai-chat": openai_chat,
    "openai-responses": openai_responses,
    "anthropic": anthropic,
}


def to_request(api: str, rows: Iterable[Row], **options: Any) -> dict[str, Any]:
    """The request body of ``api`` (a key of :data:`ADAPTERS`) for ``rows``."""
    return dict(ADAPTERS[api].to_request(rows, **options))


def from_request(api: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """Canonical input rows for a request body of ``api``."""
    return list(ADAPTERS[api].from_request(body))


__all__ = ["ADAPTERS", "anthropic", "from_request", "openai_chat", "openai_responses",
           "to_request"]
