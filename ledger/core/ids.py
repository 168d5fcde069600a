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


# The names the framework stores (ledger.integrations) give the ids they
# encode: LangGraph's hashed thread names, every Claude session workspace and
# the Agents SDK session's branches (ab-<32 hex of the session id>-<branch>).
# No raw id of any framework store takes one (LangGraph hashes such a thread
# id, the Agents SDK and LangChain histories refuse such a session id), so no
# framework id reaches data another id was stored under.
ENCODED_RE = re.compile(r"lg-[0-9a-f]{32}|cc-[0-9a-f]{16}-.+|ab-[0-9a-f]{32}-.+")


def is_encoded(ws: str) -> bool:
    """True when ``ws`` has the form of a framework store's encoded name."""
    return ENCODED_RE.fullmatch(ws) is not None


def validate_session(ws: object, what: str = "session id") -> str:
    """A framework session id that names its workspace as it is: a valid
    workspace id that is not in the encoded namespace (InvalidWorkspace)."""
    name = validate_workspace(ws)
    if is_encoded(name):
        raise InvalidWorkspace(
            f"invalid {what} {name!r}: names of the form lg-<32 hex>, "
            "cc-<16 hex>-... and ab-<32 hex>-... are reserved for the LangGraph, Claude "
            "and Agents SDK branch stores' encoded ids"
        )
    return name
