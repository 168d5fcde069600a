"""The ``AdvancedSQLiteSession`` branch API on ``LedgerSession``, built on fork.

The Agents SDK's ``AdvancedSQLiteSession`` (``agents.extensions.memory``)
keeps branches of one session in SQLite; here each branch is a fork
(``History.fork``) of the session's workspace, on every engine. The calls,
their arguments, results and errors are the SDK's (errors are
:class:`BranchError`, a ``LedgerError`` that is also the ``ValueError`` the
SDK raises):

- A **turn** is a user message and everything after it up to the next one,
  numbered from 1 in the branch's current window (what ``get_items`` returns:
  a rolled-over window numbers its turns afresh, as the model sees them).
- ``create_branch_from_turn(n, branch_name=None)``: a new branch holding
  everything before turn ``n``'s user message (a fork at the row just before
  it: its windows, its privacy floor and the rows no longer visible all
  come along, shared, not copied), and the session switches to it. The name
  defaults to ``branch_from_turn_<n>_<unix time>``; a name in use is refused.
- ``create_branch_from_content(term, branch_name=None)``: the same from the
  first turn whose user text holds ``term`` (ASCII case-insensitive).
- ``switch_to_branch(branch_id)``, ``list_branches()`` (``branch_id``,
  ``message_count`` and ``user_turns`` of its current window, ``is_current``,
  ``created_at`` as SQLite's ``CURRENT_TIMESTAMP`` text, UTC),
  ``delete_branch(branch_id, force=False)`` (never ``main``; the current
  branch only with ``force``, which switches to ``main`` first),
  ``get_conversation_turns(branch_id=None)``, ``find_turns_by_content(term,
  branch_id=None)`` and ``get_items(limit, branch_id=None)``.
- The current branch belongs to the session object, as in the SDK: a new
  ``LedgerSession`` starts on ``main``. ``add_items``, ``pop_item``,
  ``clear_session`` and the budget act on the current branch; a branch never
  sees another's later rows. ``delete_session`` deletes every branch.

Branch ``b`` of session ``s`` is the workspace ``ab-<128-bit hash of s>-n<b>``
(``-x<hex of b>`` when ``b`` has characters a workspace id cannot hold), a
form no session id may take (``ledger.core.ids.ENCODED_RE``), so a session
id never reaches another session's branch.
"""

from __future__ import annotations

import re
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

import xxhash

from ledger.core.errors import LedgerError
from ledger.core.ids import MAX_WORKSPACE_LEN
from ledger.core.rows import Row

__all__ = [
    "MAIN",
    "BranchError",
    "Turn",
    "branch_name",
    "branch_prefix",
    "branch_workspace",
    "created_at",
    "fork_before",
    "turns",
]

MAIN = "main"
_PLAIN = re.compile(r"[A-Za-z0-9._@+=-]+")


class BranchError(LedgerError, ValueError):
    """A branch call refused: no such branch or turn, a name in use or
    blank, ``main`` or the current branch deleted without ``force``. A
    ``ValueError``, as the SDK's ``AdvancedSQLiteSession`` raises."""


def branch_prefix(session_id: str) -> str:
    """The prefix of every branch workspace of ``session_id``."""
    return "ab-" + xxhash.xxh3_128_hexdigest(session_id.encode("utf-8", "surrogatepass")) + "-"


def branch_workspace(session_id: str, name: str) -> str:
    """The workspace of branch ``name`` (``main`` is the session's own)."""
    if name == MAIN:
        return session_id
    if not isinstance(name, str) or not name.strip():
        raise BranchError("Branch name cannot be empty")
    if _PLAIN.fullmatch(name):
        ws = branch_prefix(session_id) + "n" + name
    else:
        ws = branch_prefix(session_id) + "x" + name.encode("utf-8", "surrogatepass").hex()
    if len(ws) > MAX_WORKSPACE_LEN:
        raise BranchError(
            f"branch name {name[:40]!r}... is too long: at most "
            f"{MAX_WORKSPACE_LEN - len(branch_prefix(session_id)) - 1} characters of "
            "letters, digits and . _ @ + = -, or half as many bytes of others")
    return ws


def branch_name(session_id: str, workspace: str) -> str | None:
    """The branch a workspace holds for ``session_id``, or None."""
    if workspace == session_id:
        return MAIN
    prefix = branch_prefix(session_id)
    if not workspace.startswith(prefix) or len(workspace) == len(prefix):
        return None
    tag, body = workspace[len(prefix)], workspace[len(prefix) + 1:]
    if tag == "n" and _PLAIN.fullmatch(body):
        return body
    if tag == "x":
        try:
            return bytes.fromhex(body).decode("utf-8", "surrogatepass")
        except ValueError:
            return None
    return None


def created_at(ms: int) -> str:
    """A storage time as SQLite's ``CURRENT_TIMESTAMP`` writes it (UTC)."""
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def auto_name(turn: int) -> str:
    """The SDK's default branch name."""
    return f"branch_from_turn_{turn}_{int(time.time())}"


class Turn:
    """One user turn of a window: its number, the seq of its user message
    and that message's ``content`` (a string or a list of parts)."""

    __slots__ = ("content", "number", "seq", "ts")

    def __init__(self, number: int, seq: int, content: Any, ts: int) -> None:
        self.number, self.seq, self.content, self.ts = number, seq, content, ts

    def info(self, preview: int | None) -> dict[str, Any]:
        """The SDK's dict for this turn (``get_conversation_turns`` previews
        100 characters, ``find_turns_by_content`` none)."""
        return {"turn": self.number, "content": _preview(self.content, preview),
                "full_content": self.content, "timestamp": created_at(self.ts),
                "can_branch": True}

    def matches(self, term: str) -> bool:
        """The SDK's match: ASCII case-insensitive, in the text of the content."""
        pattern = re.compile(re.escape(term), re.IGNORECASE | re.ASCII)
        texts = [self.content] if isinstance(self.content, str) else [
            p.get("text", "") for p in self.content if isinstance(p, Mapping)]
        return any(isinstance(t, str) and pattern.search(t) for t in texts)


def turns(view: Sequence[Row], items_of: Any) -> list[Turn]:
    """The user turns of a provider view, numbered from 1. ``items_of(rows)``
    gives the SDK items of rows (``rows_to_items``); a message row whose item
    has ``role`` ``user`` opens a turn (the lead-in and tool outputs do not)."""
    out: list[Turn] = []
    for row in view:
        if row.kind != "message" or row.role != "user":
            continue
        for item in items_of([row]):
            if isinstance(item, Mapping) and item.get("role") == "user":
                ts = row.data.get("ts")
                out.append(Turn(len(out) + 1, row.seq, item.get("content", ""),
                                ts if isinstance(ts, int) else 0))
                break
    return out


def _preview(content: Any, max_length: int | None) -> str:
    import json

    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    if max_length is not None and len(text) > max_length:
        return text[:max_length] + "..."
    return text


class BranchesMixin(ABC):
    """The branch calls of ``LedgerSession`` (module doc). The session gives
    ``store``, ``session_id`` (the main branch's workspace), ``history`` (the
    current branch's), and implements ``items_of`` (``rows_to_items``) and
    ``_use(ws)`` (point the session at another workspace)."""

    store: Any
    session_id: str
    history: Any
    branch: str = MAIN

    @abstractmethod
    def _use(self, workspace: str) -> None:
        """Point the session at ``workspace`` (the session's)."""

    @staticmethod
    @abstractmethod
    def items_of(rows: Sequence[Row]) -> list[Any]:
        """The SDK items of ``rows`` (the session's ``rows_to_items``)."""

    # --- reads ------------------------------------------------------------------------

    def branch_history(self, branch_id: str | None = None) -> Any:
        """The history of ``branch_id`` (the current branch when None);
        ``BranchError`` when there is no such branch."""
        if branch_id is None or branch_id == self.branch:
            return self.history
        history = self.store.history(branch_workspace(self.session_id, branch_id))
        if branch_id != MAIN and not history.exists():
            raise BranchError(f"Branch '{branch_id}' does not exist")
        return history

    def require_branch(self) -> None:
        """Refuse (``BranchError``) to write to a branch another session
        object deleted: the write would start a new, empty workspace under
        its name instead of continuing the fork."""
        if self.branch != MAIN and not self.history.exists():
            raise BranchError(f"Branch '{self.branch}' does not exist (deleted by another "
                              "session object); switch to another branch; nothing was stored")

    def turns_of(self, branch_id: str | None = None) -> list[Turn]:
        """The user turns of a branch's current window."""
        return turns(self.branch_history(branch_id).provider_view(), self.items_of)

    def branch_names(self) -> list[str]:
        """``main`` and every branch of the session, by workspace name."""
        prefix = branch_prefix(self.session_id)
        names = [MAIN]
        for ws in self.store.workspaces():
            if ws.startswith(prefix):
                name = branch_name(self.session_id, ws)
                if name is not None:
                    names.append(name)
        return names

    def branches(self) -> list[dict[str, Any]]:
        """``list_branches`` without the event loop."""
        out: list[tuple[int, dict[str, Any]]] = []
        for name in self.branch_names():
            history = self.store.history(branch_workspace(self.session_id, name))
            if not history.exists():
                continue  # main before its first write (the SDK lists branches with rows)
            view = history.provider_view()
            ms = _created_ms(history)
            out.append((ms, {
                "branch_id": name, "message_count": len(self.items_of(view)),
                "user_turns": len(turns(view, self.items_of)),
                "is_current": name == self.branch, "created_at": created_at(ms)}))
        out.sort(key=lambda pair: (pair[0], pair[1]["branch_id"] != MAIN))
        return [info for _ms, info in out]

    # --- writes -----------------------------------------------------------------------

    def branch_from_turn(self, turn_number: int, branch_name: str | None = None) -> str:
        """``create_branch_from_turn`` without the event loop."""
        if branch_name is not None and not branch_name.strip():
            raise BranchError("Branch name cannot be empty")
        if isinstance(turn_number, bool) or not isinstance(turn_number, int):
            raise BranchError(f"turn_number must be an integer, got {type(turn_number).__name__}")
        found = [t for t in self.turns_of() if t.number == turn_number]
        if not found:
            raise BranchError(
                f"Turn {turn_number} does not contain a user message in branch '{self.branch}'")
        name = branch_name if branch_name is not None else auto_name(turn_number)
        if name == MAIN:
            raise BranchError("Branch ID 'main' has already been used. Choose a new branch ID.")
        ws = branch_workspace(self.session_id, name)
        target = self.store.history(ws)
        if target.exists():
            raise BranchError(f"Branch ID '{name}' has already been used. Choose a new branch ID.")
        try:
            fork_before(self.history, ws, found[0].seq)
        except LedgerError as exc:
            if target.exists():
                raise BranchError(f"Branch ID '{name}' has already been used. Choose a new "
                                  "branch ID.") from exc
            raise
        self._use(ws)
        self.branch = name
        return name

    def branch_from_content(self, search_term: str, branch_name: str | None = None) -> str:
        """``create_branch_from_content`` without the event loop."""
        found = [t for t in self.turns_of() if t.matches(search_term)]
        if not found:
            raise BranchError(f"No user turns found containing '{search_term}'")
        return self.branch_from_turn(found[0].number, branch_name)

    def switch(self, branch_id: str) -> None:
        """``switch_to_branch`` without the event loop."""
        ws = branch_workspace(self.session_id, branch_id)
        if not self.store.history(ws).exists():
            raise BranchError(f"Branch '{branch_id}' does not exist")
        self._use(ws)
        self.branch = branch_id

    def drop_branch(self, branch_id: str, force: bool = False) -> None:
        """``delete_branch`` without the event loop."""
        if not isinstance(branch_id, str) or not branch_id.strip():
            raise BranchError("Branch ID cannot be empty")
        if branch_id == MAIN:
            raise BranchError("Cannot delete the 'main' branch")
        ws = branch_workspace(self.session_id, branch_id)
        if not self.store.history(ws).exists():
            raise BranchError(f"Branch '{branch_id}' does not exist")
        if branch_id == self.branch:
            if not force:
                raise BranchError(f"Cannot delete current branch '{branch_id}'. Use "
                                  "force=True or switch branches first")
            self._use(self.session_id)
            self.branch = MAIN
        if not self.store.delete(ws):
            raise BranchError(f"Branch '{branch_id}' does not exist")

    def drop_all_branches(self) -> None:
        """Delete every branch workspace of the session (not ``main``)."""
        for name in self.branch_names():
            if name != MAIN:
                self.store.delete(branch_workspace(self.session_id, name))
        if self.branch != MAIN:
            self._use(self.session_id)
            self.branch = MAIN


def fork_before(history: Any, workspace: str, seq: int) -> Any:
    """Fork ``history`` into ``workspace`` with everything before row
    ``seq`` visible, and nothing from ``seq`` on.

    A fork point must end its batch and lie after the privacy floor
    (``History.fork``). When the row before ``seq`` is such a point (the
    usual case: a user message starts its ``add_items`` batch), that is the
    fork, in one step. Otherwise (the first turn of a history, the first
    after a manual reset, a message inside a batch such as a rollover's
    copied trigger) the fork is taken at the end of ``seq``'s batch and the
    rows of that batch from ``seq`` on are rejected in it (hidden from the
    model, kept for audit, as ``pop_item`` does): two steps, so a crash
    between them leaves a branch still showing that turn (delete it and
    branch again)."""
    row = history.get(seq)
    if row is None:
        raise BranchError(f"row {seq} of workspace {history.workspace!r} cannot be read")
    batch = row.batch
    i, n = int(batch.get("i", 0)), int(batch.get("n", 1))
    floor = history.snapshot().floor
    before = seq - 1
    if i == 0 and before >= 1 and (floor is None or before > floor.seq):
        return history.fork(workspace, at=before)
    end = seq + (n - 1 - i)
    fork = history.fork(workspace, at=end)
    hide = [r.seq for r in fork.provider_view() if r.seq >= seq and r.kind == "message"]
    if hide:
        fork.reject(hide)
    return fork


def _created_ms(history: Any) -> int:
    """When a branch began: its fork's time, else its first row's."""
    origin = getattr(history, "origin", None)
    if origin is not None and isinstance(getattr(origin, "created", None), int):
        return int(origin.created)
    for row in history.rows():
        ts = row.data.get("ts")
        return ts if isinstance(ts, int) else 0
    return 0
