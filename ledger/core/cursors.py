"""Retrieval cursors: opaque, authenticated, bound to one query and one history state.

A cursor is ``base64url(payload) "." base64url(mac)``. The payload is a small
msgspec array naming the key id, the workspace, the query (action and a digest
of its arguments), the binding (receipt epoch, or a digest of the stamps when
the receipt is not stable), the privacy floor, the snapshot high-water mark
and the scan position. The MAC is HMAC-SHA256 over the payload under a random
key made once per process; the key id inside the payload names that key.

Verification order: malformed → ``InvalidCursor``; unknown key id (another or
a restarted process) → ``CursorExpired``; bad MAC → ``InvalidCursor``; another
workspace or query → ``InvalidCursor``; another epoch or floor → ``CursorExpired``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from typing import Any

import msgspec

from ledger.core.errors import CursorExpired, InvalidCursor

MAX_CURSOR_BYTES = 4096
VERSION = 1

_KEY = secrets.token_bytes(32)
KEY_ID = secrets.token_hex(8)


class Position(msgspec.Struct, array_like=True, frozen=True):
    """Where the next page starts: a ``part`` and byte ``offset``, whose
    meaning each engine gives (``ledger.storage.engine``: a segment number, or
    a seq); ``skip`` means the offset is inside (or at the start of) a line
    to skip to its end;
    ``char`` is the code point offset inside a row being read; ``skip_from``
    and ``skip_seq`` describe an oversized line to list under ``skipped`` once
    its end is found, which may be pages later.

    Encoded as an array (``array_like``): the wire form is the values in
    this order, never the field names, so renaming a field keeps every
    cursor issued valid; the order and meaning may not change."""

    part: int
    offset: int
    skip: bool = False
    char: int = 0
    skip_from: int = -1  # start of the oversized line being skipped (-1: not listed)
    skip_seq: int | None = None  # its seq, when its first bytes showed one


SEEKING = -1  # Position.char of a read cursor still looking for its row


class ListState(msgspec.Struct, array_like=True, frozen=True):
    """A window being counted by ``list`` across pages."""

    window: int
    reason: str
    first_seq: int
    last_seq: int
    rows: int


class CursorData(msgspec.Struct, array_like=True, frozen=True):
    v: int
    kid: str
    workspace: str
    action: str
    args: str
    binding: str
    floor: str
    high: int  # the snapshot's high-water seq
    end: Position  # the end of the log when the query's first page was served
    pos: Position
    window: int  # the window the scan is in (0 before any boundary)
    listing: ListState | None = None


_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder(CursorData)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    """Strict, canonical base64url: any other character, padding or
    non-zero trailing bits make the cursor malformed (one cursor, one text)."""
    data = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
    if _b64(data) != text:
        raise ValueError("non-canonical base64")
    return data


def args_digest(action: str, args: dict[str, Any]) -> str:
    """A digest of the query's defining arguments (not cursor, limit or offset)."""
    return hashlib.sha256(_enc.encode([action, sorted(args.items())])).hexdigest()[:32]


def issue(data: CursorData) -> str:
    payload = _enc.encode(data)
    mac = hmac.new(_KEY, payload, hashlib.sha256).digest()
    token = f"{_b64(payload)}.{_b64(mac)}"
    if len(token) > MAX_CURSOR_BYTES:  # pragma: no cover - payloads are small
        raise InvalidCursor("cursor would exceed 4 KiB")
    return token


def verify(token: Any, workspace: str, action: str, args: str) -> CursorData:
    """Authenticate ``token`` and check it belongs to this query."""
    if not isinstance(token, str) or not token or len(token) > MAX_CURSOR_BYTES:
        raise InvalidCursor("cursor is not a string of at most 4 KiB")
    head, sep, tail = token.partition(".")
    if not sep:
        raise InvalidCursor("cursor is malformed")
    try:
        payload = _unb64(head)
        mac = _unb64(tail)
        data = _dec.decode(payload)
    except (binascii.Error, ValueError, msgspec.DecodeError) as exc:
        raise InvalidCursor("cursor is malformed") from exc
    if data.v != VERSION:
        raise InvalidCursor("cursor is of another version")
    if data.kid != KEY_ID:
        raise CursorExpired(
            "cursor was issued by another process (or before a restart); start a new query"
        )
    expected = hmac.new(_KEY, payload, hashlib.sha256).digest()
    if not hmac.compare_digest(mac, expected):
        raise InvalidCursor("cursor failed authentication")
    if data.workspace != workspace:
        raise InvalidCursor("cursor belongs to another workspace")
    if data.action != action or data.args != args:
        raise InvalidCursor("cursor belongs to another query")
    return data
