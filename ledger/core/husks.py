"""Rejected requests as stored rows (DESIGN.md 3): the empty assistant record
("husk") that keeps the original row, byte for byte, under ``meta.quarantine``.

Pure rules shared by every engine's ``reject``.
"""

from __future__ import annotations

import secrets
from typing import Any

from ledger.core.errors import RewriteRefused
from ledger.core.format import rows as fmt
from ledger.core.rows import new_id, now_ms

QUARANTINE_VERSION = 1


def is_husk(row: dict[str, Any]) -> bool:
    """A rejected request's outer record (DESIGN.md 3)."""
    meta = row.get("meta")
    q = meta.get("quarantine") if isinstance(meta, dict) else None
    return (
        isinstance(q, dict)
        and q.get("v") == QUARANTINE_VERSION
        and isinstance(q.get("row"), dict)
        and row.get("role") == "assistant"
        and row.get("parts") == []
        and row.get("partial", False) is False
    )


def rejected_original(row: dict[str, Any]) -> dict[str, Any]:
    """What display and export show: the original of a rejected request, else
    the row itself."""
    if is_husk(row):
        return dict(row["meta"]["quarantine"]["row"])
    return row


def husk_line(line: bytes, row: dict[str, Any]) -> bytes:
    """The stored line of the empty assistant record that quarantines ``row``.

    The original row's JSON (unknown fields included) is spliced in as raw
    bytes, so it survives byte for byte.
    """
    body = fmt.body_of(line)
    if body is None:
        raise RewriteRefused("cannot reject a line that does not verify")
    return hiding_line(body, row, row.get("kind", "message"), {})


def hiding_line(body: bytes, row: dict[str, Any], kind: Any, extra: dict[str, Any]) -> bytes:
    """The framed line of an empty assistant record of ``kind`` that hides
    ``row`` (its verified JSON ``body``), spliced in byte for byte under
    ``meta.quarantine.row`` beside ``extra``: ``row``'s seq, id (a new one
    when it has none), ts (now when it has none) and batch are kept. Shared
    by a reject (``husk_line``) and a rewind (``forks.rewind_line``)."""
    sentinel = f"tl-row-{secrets.token_hex(12)}"
    ts = row.get("ts")
    outer: dict[str, Any] = {
        "seq": row["seq"],
        "id": row.get("id") if isinstance(row.get("id"), str) and row.get("id") else new_id("r_"),
        "kind": kind,
        "role": "assistant",
        "parts": [],
        "partial": False,
        "meta": {"quarantine": {"v": QUARANTINE_VERSION, "row": sentinel, **extra}},
        "ts": ts if isinstance(ts, int) and not isinstance(ts, bool) else now_ms(),
        "batch": row["batch"],
    }
    enc = fmt.encode_json(outer)
    enc = enc.replace(fmt.encode_json(sentinel), body, 1)
    return fmt.frame(enc)


def owns(prelude: dict[str, Any], request: dict[str, Any]) -> bool:
    """A synthetic row right before a request in its batch belongs to it:
    ``meta.synthetic: true``, or ``meta.owner`` = the request's id."""
    got = prelude.get("meta")
    meta: dict[str, Any] = got if isinstance(got, dict) else {}
    return meta.get("synthetic") is True or (
        meta.get("owner") is not None and meta.get("owner") == request.get("id")
    )
