"""The in-memory engine's page reader for ``session_history``: the row
engines' rules (``ledger.storage.seqpages``) over a workspace's list, held
under the root's lock for the whole call; ranked search from ``recall.py``."""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from ledger.core.bounds import LINE_CAP
from ledger.core.errors import CursorExpired
from ledger.core.ranking import Query
from ledger.storage.engine import Candidate
from ledger.storage.memory.recall import Recall
from ledger.storage.seqpages import RowState, SeqReader

if TYPE_CHECKING:
    from ledger.storage.memory.space import MemHandle, Space


class MemRows:
    """``RowSource`` over one workspace's rows (read under the lock)."""

    def __init__(self, sp: Space) -> None:
        self.sp = sp

    def lengths(self, first: int, stop: int, limit: int) -> list[tuple[int, int]]:
        sp = self.sp
        i = bisect.bisect_left(sp.seqs, first)
        out: list[tuple[int, int]] = []
        while i < len(sp.rows) and len(out) < limit and sp.seqs[i] < stop:
            out.append((sp.seqs[i], len(sp.rows[i].line)))
            i += 1
        return out

    def fetch(self, seqs: list[int]) -> dict[int, bytes]:
        out = {}
        for seq in seqs:
            i = self.sp.index_of(seq)
            if i is not None:
                out[seq] = self.sp.rows[i].line
        return out


class MemReader(SeqReader):
    """The memory engine's ``PageReader[RowState]`` for one workspace."""

    def __init__(self, ws: MemHandle) -> None:
        self.ws = ws
        self.workspace = ws.workspace
        self.sp: Space | None = None

    def exists(self) -> bool:
        return self.ws.exists()

    @contextmanager
    def locked(self) -> Iterator[None]:
        with self.ws.locked():
            try:
                yield
            finally:
                self.sp = None

    def state(self) -> RowState:
        sp = self.ws.root.spaces.get(self.workspace)
        if sp is None:
            raise CursorExpired("the history is gone; start a new query")
        self.sp = sp
        return sp.state()

    def _space(self) -> Space:
        assert self.sp is not None, "call state() under locked() first"
        return self.sp

    def binding(self, st: RowState) -> str:
        return f"m{st.epoch}"

    def source(self) -> MemRows:
        return MemRows(self._space())

    def is_boundary(self, seq: int) -> bool:
        bounds = self._space().bounds
        i = bisect.bisect_left(bounds, seq)
        return i < len(bounds) and bounds[i] == seq

    def boundary_before(self, seq: int) -> int:
        bounds = self._space().bounds
        i = bisect.bisect_left(bounds, seq)
        return bounds[i - 1] if i else 0

    def row_at(self, seq: int) -> tuple[int, bytes | None] | None:
        sp = self._space()
        i = sp.index_of(seq)
        if i is None:
            return None
        line = sp.rows[i].line
        return len(line), line if len(line) <= LINE_CAP else None

    def prepare_ranked(self) -> None:
        """Nothing: ``ranked`` brings the recall index up to date under the lock."""

    def ranked(
        self, st: RowState, query: Query, after: int, high: int, window: int | None
    ) -> list[Candidate]:
        """From the workspace's recall index (``recall.py``)."""
        sp = self._space()
        if sp.recall is None:
            sp.recall = Recall()
        recall = sp.recall
        recall.refresh(sp.rows, sp.epoch, st.floor.seq if st.floor is not None else 0)
        return recall.candidates(query, after, high, window)
