"""Workspace ids: what may name a history (a directory below a root, a key
in a table). One rule for every engine."""

from __future__ import annotations

import re

from ledger.core.errors import InvalidWorkspace

MAX_WORKSPACE_LEN = 128
WORKSPACE_RE = re.compile(r"[A-Za-z0-9._@+=-]+")


def validate_workspace(ws: object) -> str:
    """Return ``ws`` when it can name a directory below the root, else raise
    InvalidWorkspace: no separators, no ``.``/``..``, no NUL or control
    characters, no leading dot (hidden names are the store's), bounded length."""
    if not isinstance(ws, str):
        raise InvalidWorkspace(f"workspace id must be a string, got {type(ws).__name__}")
    if not ws or len(ws) > MAX_WORKSPACE_LEN:
        raise InvalidWorkspace(
            f"workspace id must be 1 to {MAX_WORKSPACE_LEN} characters, got {len(ws)}"
        )
    if ws in (".", "..") or ws.startswith(".") or not WORKSPACE_RE.fullmatch(ws):
        raise InvalidWorkspace(
            f"invalid workspace id {ws!r}: use letters, digits and . _ @ + = -, "
            "not starting with a dot (no separators, NUL or control characters)"
        )
    return ws
