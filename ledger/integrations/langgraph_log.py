"""The saver's view of its threads' logs (extra ``langgraph``; no LangGraph here).

``LedgerSaver`` (:mod:`ledger.integrations.langgraph`) maps LangGraph's
checkpoint calls onto rows; this module keeps, per thread (one workspace), what
those calls read and write through: one ``History`` for the saver's life, a
lock, the thread's projection (:class:`~ledger.integrations.langgraph_index.
ThreadIndex`) brought up to date from the rows appended since (by anyone), and
the conditional append that never forks a thread silently.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ledger.core.errors import Conflict, LedgerError
from ledger.integrations import caught_up
from ledger.integrations.langgraph_index import ThreadIndex
from ledger.transcript.history import History
from ledger.transcript.store import Store

__all__ = ["MAX_RETRIES", "CheckpointConflict", "ThreadLogs"]

MAX_RETRIES = 1000


class CheckpointConflict(Conflict):
    """A put whose parent is no longer the newest checkpoint of its namespace:
    another writer continued the thread first. Nothing was written."""


Build = Callable[[ThreadIndex], list[dict[str, Any]]]


class ThreadLogs:
    """Per workspace: its ``History``, its lock and its projection."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.indexes: dict[str, ThreadIndex] = {}
        self.histories: dict[str, History] = {}
        self.locks: dict[str, threading.RLock] = {}
        self.guard = threading.Lock()

    def lock(self, ws: str) -> threading.RLock:
        with self.guard:
            lock = self.locks.get(ws)
            if lock is None:
                lock = self.locks[ws] = threading.RLock()
            return lock

    def history(self, ws: str) -> History:
        """The thread's ``History``, one per workspace for the saver's life
        (caller holds the lock). The file engine keeps per-object caches,
        each checked against the files' stamps before use (the INDEX read so
        far, the active segment's account, the sealed segments' digest, the
        FORMAT check): a fresh object per call would read the whole INDEX
        again at every sealed segment and rescan the segment it seals, a cost
        that grows with the thread (bench/RESULTS.md, LangGraph)."""
        history = self.histories.get(ws)
        if history is None:
            history = self.histories[ws] = self.store.history(ws)
        return history

    def forget(self, ws: str) -> None:
        """Drop what is kept of a workspace (caller holds its lock)."""
        self.indexes.pop(ws, None)
        self.histories.pop(ws, None)

    def refresh(self, ws: str) -> ThreadIndex:
        """The thread's projection, brought up to date (caller holds the lock).
        A workspace never written (or deleted) has an empty projection."""
        idx = caught_up(self.history(ws), self.indexes.get(ws), ThreadIndex,
                        lambda idx, row: idx.apply(row.seq, row.data))
        if idx is None:
            self.indexes.pop(ws, None)
            return ThreadIndex()
        self.indexes[ws] = idx
        return idx

    def append(self, ws: str, build: Build) -> tuple[ThreadIndex, list[int]]:
        """Append ``build(idx)`` rows conditionally on the projection's next
        seq (caller holds the lock). The first attempt trusts the projection
        as it is (a stale one fails the condition); after a conflict -- the
        condition, or a ``CheckpointConflict`` that ``build`` raised on a
        projection not read just now -- it refreshes and builds again.
        ``build`` returns the rows, or nothing to write nothing."""
        history = self.history(ws)
        idx = self.indexes.get(ws)
        fresh = idx is None
        if idx is None:
            idx = self.refresh(ws)
        for _ in range(MAX_RETRIES):
            try:
                rows = build(idx)
            except CheckpointConflict:
                if fresh:
                    raise
                idx, fresh = self.refresh(ws), True
                continue
            if not rows:
                if fresh:
                    return idx, []
                idx, fresh = self.refresh(ws), True  # nothing to write: make sure
                continue
            try:
                result = history.append_many(rows, expect_next_seq=idx.next_seq)
            except Conflict:
                idx, fresh = self.refresh(ws), True  # another writer appended first
                continue
            for seq, row in zip(result.seqs, rows, strict=True):
                idx.apply(seq, row)
            if idx.epoch not in (-1, result.epoch):
                # A rewrite (reject, repair...) ran since the projection was
                # read: the next call reads the log again.
                self.indexes.pop(ws, None)
                return idx, result.seqs
            idx.epoch = result.epoch
            self.indexes[ws] = idx
            return idx, result.seqs
        raise LedgerError(f"workspace {ws!r}: gave up after {MAX_RETRIES} conflicting appends")
