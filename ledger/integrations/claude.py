"""The Claude Agent SDK's ``SessionStore``, kept in ledger workspaces (extra ``claude``).

``LedgerSessionStore(store=None, root=None)`` implements ``append`` and
``load`` and every optional method: ``list_sessions``,
``list_session_summaries``, ``delete`` and ``list_subkeys``.

- One workspace per transcript: a session is ``cc-<project hash>-<session
  id>`` (``...-h<hash>`` when the id cannot name a workspace or is itself of
  the form ``h<32 hex>``, so a raw id never aliases a hashed one), and each
  subagent transcript (a key with a ``subpath``) is its own workspace beside
  it, ``<session workspace>.sub-<hash of subpath>``, so subagents never mix
  into the main conversation.
- Every entry is one row, in append-call order, kept verbatim in
  ``meta["claude"]["entry"]``; ``load`` returns exactly those. A ``user`` or
  ``assistant`` entry's Anthropic message is also the row's canonical parts
  (``ledger.adapters.anthropic``), so ``session_history``, ``tledger show``
  and the exports read a Claude Code session as a conversation; the other
  entries (titles, tags, queue operations...) are bookkeeping records
  (empty assistant records with ``meta.bookkeeping``, never provider-visible).
- ``load`` returns the entries after the session's privacy floor: once a
  user resets a session (``tledger clear``, ``History.clear_soft``), nothing
  before the reset is resumed by Claude Code or copied by the SDK's
  ``fork_session_via_store``. Entries hidden by a rewind or a reject are not
  returned either (their originals stay in the log for audit).
- ``uuid`` is the idempotency key: an entry whose uuid the transcript already
  holds is not stored again (entries without one always are).
- The session summary is folded at append with the SDK's
  ``fold_session_summary`` and written in the same batch (a bookkeeping row),
  stamped with the batch's storage time, the clock ``list_sessions`` reports.
  Appends are conditional on the log's next seq and retried, so two processes
  appending to one session never fold from a stale summary.
- ``delete`` of a session deletes its workspace and its subagents'; of a
  subpath, that transcript only.
"""

from __future__ import annotations

import asyncio
import copy
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import xxhash

from ledger.adapters import anthropic
from ledger.core.errors import (
    Conflict,
    InvalidRow,
    InvalidWorkspace,
    LedgerError,
    WorkspaceNotFound,
)
from ledger.core.ids import MAX_WORKSPACE_LEN, validate_workspace
from ledger.core.redact import redact
from ledger.core.rows import check_caller_row
from ledger.integrations import caught_up, open_store, require
from ledger.transcript.store import Store

_sdk = require("claude_agent_sdk", "claude")
from claude_agent_sdk import SessionStore, fold_session_summary  # noqa: E402

__all__ = ["META_KEY", "LedgerSessionStore", "entry_rows", "session_workspace"]

META_KEY = "claude"
_SUB = ".sub-"
_MAX_ID = 80
_MAX_RETRIES = 1000
_HASHED = re.compile(r"h[0-9a-f]{32}")  # the form of a hashed session name


def _h64(text: str) -> str:
    return xxhash.xxh3_64_hexdigest(text.encode("utf-8", "surrogatepass"))


def _project_prefix(project_key: str) -> str:
    return f"cc-{_h64(project_key)}-"


def _valid(name: str) -> bool:
    try:
        validate_workspace(name)
    except InvalidWorkspace:
        return False
    return True


def session_workspace(key: dict[str, Any]) -> str:
    """The workspace of a session key (module doc)."""
    sid = str(key["session_id"])
    if len(sid) <= _MAX_ID and _SUB not in sid and _valid(sid) and not _HASHED.fullmatch(sid):
        name = sid  # never of the hashed form below: a raw id cannot alias a hashed one
    else:
        name = "h" + xxhash.xxh3_128_hexdigest(sid.encode("utf-8", "surrogatepass"))
    ws = _project_prefix(str(key["project_key"])) + name
    subpath = key.get("subpath")
    if subpath:
        ws += _SUB + _h64(str(subpath))
    assert len(ws) <= MAX_WORKSPACE_LEN
    return ws


def _key_of(key: dict[str, Any]) -> tuple[str, str, str]:
    """A session key as the workspace name sees it (ids as strings)."""
    return (str(key.get("project_key")), str(key.get("session_id")),
            str(key.get("subpath") or ""))


def _bookkeeping(claude: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "message", "role": "assistant", "parts": [],
            "meta": {"bookkeeping": True, META_KEY: claude}}


def entry_rows(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of one entry: the first holds the entry verbatim. A user or
    assistant message becomes canonical rows; anything else (or a message the
    adapter cannot read) one bookkeeping record."""
    message = entry.get("message")
    if entry.get("type") in ("user", "assistant") and isinstance(message, dict) and \
            message.get("role") in ("user", "assistant"):
        try:
            rows = anthropic.from_messages([message])
            for i, row in enumerate(rows):
                check_caller_row(row, i)
        except (InvalidRow, LedgerError, TypeError, ValueError, AttributeError):
            rows = []
        if rows:
            rows[0]["meta"] = {META_KEY: {"entry": entry}}
            for row in rows[1:]:
                row["meta"] = {META_KEY: {"part_of": True}}
            return rows
    return [_bookkeeping({"entry": entry})]


@dataclass
class _Transcript:
    """What one workspace's rows say (a projection, rebuilt on a new epoch)."""

    epoch: int = -1
    next_seq: int = 1
    key: dict[str, Any] | None = None
    uuids: set[str] = field(default_factory=set)
    summary: dict[str, Any] | None = None
    mtime: int = 0

    def apply(self, row: dict[str, Any]) -> None:
        self.next_seq = max(self.next_seq, int(row.get("seq", self.next_seq - 1)) + 1)
        claude = (row.get("meta") or {}).get(META_KEY)
        if not isinstance(claude, dict):
            return
        if self.key is None and isinstance(claude.get("key"), dict):
            self.key = claude["key"]
        ts = row.get("ts")
        if isinstance(ts, int):
            self.mtime = max(self.mtime, ts)
        entry = claude.get("entry")
        if isinstance(entry, dict) and isinstance(entry.get("uuid"), str):
            self.uuids.add(entry["uuid"])
        if isinstance(claude.get("summary"), dict):
            self.summary = claude["summary"]


def _floor_seq(history: Any, ws: str) -> int | None:
    """The seq of the session's privacy floor (its newest manual reset), or
    None. A floor that cannot be read fails closed (``LedgerError``)."""
    floor = history.snapshot().floor
    if floor is None:
        return None
    if not floor.readable:
        raise LedgerError(f"session {ws!r}: its privacy floor cannot be read; nothing is "
                          "loaded until `tledger repair` settles it")
    return int(floor.seq)


class LedgerSessionStore(SessionStore):
    """A Claude Agent SDK ``SessionStore`` over a ledger store (module doc).

    ``store`` or ``root`` pick the store (default ``$TLEDGER_ROOT``, else
    ``./.tledger``).
    """

    def __init__(
        self, store: Store | None = None, root: str | os.PathLike[str] | None = None
    ) -> None:
        self.store = open_store(store, root)
        self._cache: dict[str, _Transcript] = {}
        self._lock = threading.RLock()
        self._last_ms = 0

    def __repr__(self) -> str:
        return f"LedgerSessionStore(root={redact(self.store.root)!r})"

    # --- the projection ---------------------------------------------------------------

    def _refresh(self, ws: str) -> _Transcript | None:
        t = caught_up(self.store.history(ws), self._cache.get(ws), _Transcript,
                      lambda t, row: t.apply(row.data))
        if t is None:
            self._cache.pop(ws, None)
        else:
            self._cache[ws] = t
        return t

    def _owned(self, ws: str, key: dict[str, Any]) -> _Transcript | None:
        """The workspace's transcript, refused (``LedgerError``) when its rows
        say it is another key's: the workspace name holds hashes (of the
        project key, of an id that cannot name a workspace, of a subpath), and
        should two keys ever share one, neither reads, writes or deletes the
        other's transcript (caller holds the lock)."""
        t = self._refresh(ws)
        if t is not None and t.key is not None and _key_of(t.key) != _key_of(key):
            raise LedgerError(f"session {ws!r} holds the transcript of another session key "
                              "(its workspace name collides); nothing was read or written")
        return t

    def _now_ms(self) -> int:
        now = int(time.time() * 1000)
        self._last_ms = now = max(now, self._last_ms + 1)
        return now

    # --- sync methods (the async ones run these in a thread) --------------------------

    def append_sync(self, key: dict[str, Any], entries: list[dict[str, Any]]) -> None:
        if not entries:
            return
        ws = session_workspace(key)
        main = not key.get("subpath")
        plain_key = {k: key[k] for k in ("project_key", "session_id", "subpath") if k in key}
        history = self.store.history(ws)
        with self._lock:
            for _ in range(_MAX_RETRIES):
                t = self._owned(ws, key) or _Transcript()
                seen = set(t.uuids)
                fresh: list[dict[str, Any]] = []
                for entry in entries:
                    uid = entry.get("uuid") if isinstance(entry, dict) else None
                    if not isinstance(entry, dict):
                        raise LedgerError(f"session {ws!r}: an entry must be a JSON object, "
                                          f"got {type(entry).__name__}")
                    if isinstance(uid, str):
                        if uid in seen:
                            continue
                        seen.add(uid)
                    fresh.append(entry)
                if not fresh:
                    return
                now = self._now_ms()
                rows: list[dict[str, Any]] = []
                for entry in fresh:
                    rows.extend(entry_rows(copy.deepcopy(entry)))
                rows[0]["meta"][META_KEY]["key"] = plain_key
                if main:
                    folded = dict(fold_session_summary(t.summary, key, fresh))  # type: ignore[arg-type]
                    folded["mtime"] = now
                    rows.append(_bookkeeping({"summary": folded}))
                for row in rows:
                    row["ts"] = now
                try:
                    result = history.append_many(rows, expect_next_seq=t.next_seq)
                except Conflict:
                    continue  # another writer appended first: fold again from its state
                for seq, row in zip(result.seqs, rows, strict=True):
                    t.apply({**row, "seq": seq})
                if t.epoch not in (-1, result.epoch):
                    self._cache.pop(ws, None)  # a rewrite ran meanwhile: read it again
                    return
                t.epoch = result.epoch
                self._cache[ws] = t
                return
        raise LedgerError(f"session {ws!r}: gave up after {_MAX_RETRIES} conflicting appends")

    def load_sync(self, key: dict[str, Any]) -> list[dict[str, Any]] | None:
        ws = session_workspace(key)
        history = self.store.history(ws)
        with self._lock:
            self._owned(ws, key)
        try:
            rows = history.rows(after_seq=_floor_seq(history, ws))
            out = []
            for row in rows:
                claude = row.meta.get(META_KEY)
                if isinstance(claude, dict) and isinstance(claude.get("entry"), dict):
                    out.append(claude["entry"])
        except WorkspaceNotFound:
            return None
        return out

    def _sessions(self, project_key: str) -> list[tuple[str, _Transcript]]:
        prefix = _project_prefix(project_key)
        out = []
        with self._lock:
            for ws in self.store.workspaces():
                if not ws.startswith(prefix) or _SUB in ws:
                    continue
                t = self._refresh(ws)
                if t is not None and t.key is not None and t.key.get("project_key") == \
                        project_key:
                    out.append((ws, t))
        return out

    def list_sessions_sync(self, project_key: str) -> list[dict[str, Any]]:
        return [{"session_id": str(t.key["session_id"]), "mtime": t.mtime}  # type: ignore[index]
                for _ws, t in self._sessions(project_key)]

    def list_session_summaries_sync(self, project_key: str) -> list[dict[str, Any]]:
        return [dict(t.summary) for _ws, t in self._sessions(project_key)
                if t.summary is not None]

    def _subkeys(self, key: dict[str, Any]) -> list[tuple[str, str]]:
        prefix = session_workspace({k: key[k] for k in ("project_key", "session_id")}) + _SUB
        out = []
        with self._lock:
            for ws in self.store.workspaces():
                if ws.startswith(prefix):
                    t = self._refresh(ws)
                    if t is not None and t.key is not None and t.key.get("subpath") and \
                            _key_of(t.key)[:2] == _key_of(key)[:2]:
                        out.append((ws, str(t.key["subpath"])))
        return out

    def delete_sync(self, key: dict[str, Any]) -> None:
        with self._lock:
            ws = session_workspace(key)
            self._owned(ws, key)
            if not key.get("subpath"):
                for sub_ws, _sub in self._subkeys(key):
                    self.store.delete(sub_ws)
                    self._cache.pop(sub_ws, None)
            self.store.delete(ws)
            self._cache.pop(ws, None)

    def list_subkeys_sync(self, key: dict[str, Any]) -> list[str]:
        return sorted(sub for _ws, sub in self._subkeys(key))

    # --- the SessionStore protocol ----------------------------------------------------

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.to_thread(fn, *args)

    async def append(self, key: Any, entries: list[Any]) -> None:
        await self._run(self.append_sync, key, entries)

    async def load(self, key: Any) -> list[Any] | None:
        return await self._run(self.load_sync, key)

    async def list_sessions(self, project_key: str) -> list[Any]:
        return await self._run(self.list_sessions_sync, project_key)

    async def list_session_summaries(self, project_key: str) -> list[Any]:
        return await self._run(
            self.list_session_summaries_sync, project_key)

    async def delete(self, key: Any) -> None:
        await self._run(self.delete_sync, key)

    async def list_subkeys(self, key: Any) -> list[str]:
        return await self._run(self.list_subkeys_sync, key)
