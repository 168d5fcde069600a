"""An asyncio face over the store, for runtimes whose event loop must not block.

Every call that touches a file (lock, read, fsync, rename) runs in a worker thread
(the loop's default executor, or the one given); the event loop only awaits. The
guarantees are the store's own, unchanged: each call is one call of the
synchronous API on a fresh :class:`~ledger.transcript.history.History` handle, and the
workspace lock (``flock`` on its own file description per acquisition) excludes
threads exactly as it excludes processes.

Writes to one workspace made through one :class:`AsyncStore` are queued in call
order by an :class:`asyncio.Lock`, so worker threads never poll the file lock
against each other. A cancelled write is not interrupted -- a commit cannot be
half-undone -- and it keeps the queue until its thread finishes: the batch may
be committed or not, exactly as after ``CommitUncertain``, and retrying it with
the same ``batch_id`` is safe. Reads are not queued.

Example::

    store = AsyncStore("./.tledger")
    h = store.history("ws-1")
    r = await h.append_many(rows, batch_id="turn-42")
    async for row in h.rows():
        ...
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import Executor
from typing import Any, TypeVar

from ledger.core.ids import validate_workspace
from ledger.core.redact import redact
from ledger.core.rows import Row
from ledger.storage.engine import Snapshot
from ledger.transcript.history import AppendResult, History
from ledger.transcript.store import Store

__all__ = ["AsyncHistory", "AsyncStore", "AsyncTool"]

T = TypeVar("T")


class AsyncStore:
    """The async counterpart of :class:`~ledger.transcript.store.Store`.

    Give a root and the ``Store`` options, or an existing ``store=``. ``executor``
    runs the blocking calls (default: the event loop's default executor).
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        store: Store | None = None,
        executor: Executor | None = None,
        **options: Any,
    ) -> None:
        if (root is None) == (store is None):
            raise TypeError("give either root (with Store options) or store=")
        if store is None:
            assert root is not None
            store = Store(root, **options)
        self.store: Store = store
        self.executor = executor
        self._write_locks: dict[str, asyncio.Lock] = {}

    def __repr__(self) -> str:
        return f"AsyncStore({redact(self.store.root)!r})"

    def history(self, workspace: str) -> AsyncHistory:
        """The async handle of one workspace (the id is checked now; no I/O)."""
        return AsyncHistory(self, validate_workspace(workspace))

    async def workspaces(self) -> list[str]:
        """Ids of the histories under the root."""
        return await self._run(self.store.workspaces)

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, functools.partial(fn, *args, **kwargs))

    async def _write(self, workspace: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        lock = self._write_locks.setdefault(workspace, asyncio.Lock())
        await lock.acquire()
        try:
            loop = asyncio.get_running_loop()
            future = loop.run_in_executor(self.executor, functools.partial(fn, *args, **kwargs))
        except BaseException:
            lock.release()
            raise

        def finished(done: asyncio.Future[Any]) -> None:
            lock.release()
            if not done.cancelled():
                done.exception()  # retrieved: a cancelled caller is not told twice

        future.add_done_callback(finished)
        return await asyncio.shield(future)


class AsyncHistory:
    """The async counterpart of :class:`~ledger.transcript.history.History` (same meanings,
    same errors; properties become coroutines: ``await h.epoch()``)."""

    def __init__(self, store: AsyncStore, workspace: str) -> None:
        self._store = store
        self.workspace = workspace

    def __repr__(self) -> str:
        return f"AsyncHistory({redact(self._store.store.root)!r}, {self.workspace!r})"

    def _history(self) -> History:
        return self._store.store.history(self.workspace)

    async def _read(self, name: str, *args: Any, **kwargs: Any) -> Any:
        def call() -> Any:
            return getattr(self._history(), name)(*args, **kwargs)

        return await self._store._run(call)

    async def _write(self, name: str, *args: Any, **kwargs: Any) -> AppendResult:
        def call() -> AppendResult:
            result: AppendResult = getattr(self._history(), name)(*args, **kwargs)
            return result

        return await self._store._write(self.workspace, call)

    async def append_many(
        self,
        rows: Sequence[dict[str, Any]],
        batch_id: str | None = None,
        expect_next_seq: int | None = None,
        expect_window: int | None = None,
        expect_epoch: int | None = None,
    ) -> AppendResult:
        """Commit ``rows`` as one batch (``History.append_many``)."""
        return await self._write(
            "append_many",
            list(rows),
            batch_id=batch_id,
            expect_next_seq=expect_next_seq,
            expect_window=expect_window,
            expect_epoch=expect_epoch,
        )

    async def append(self, row: dict[str, Any], **kwargs: Any) -> AppendResult:
        """A one-row batch (``History.append``)."""
        return await self._write("append", row, **kwargs)

    async def clear_soft(self, **kwargs: Any) -> AppendResult:
        """A manual reset: the new privacy floor (``History.clear_soft``)."""
        return await self._write("clear_soft", **kwargs)

    async def rollover(self, trigger_rows: Sequence[dict[str, Any]], **kwargs: Any) -> AppendResult:
        """``[reset(rollover), lead_in, *trigger_rows]`` as one batch."""
        return await self._write("rollover", list(trigger_rows), **kwargs)

    async def compact(self, summary_rows: Sequence[dict[str, Any]], **kwargs: Any) -> AppendResult:
        """``[reset(compaction), *summary_rows]`` as one batch."""
        return await self._write("compact", list(summary_rows), **kwargs)

    async def get(self, seq: int) -> Row | None:
        """One row, or None."""
        result: Row | None = await self._read("get", seq)
        return result

    async def provider_view(self) -> list[Row]:
        """The rows the model sees."""
        result: list[Row] = await self._read("provider_view")
        return result

    async def snapshot(self) -> Snapshot:
        """The validated state (epoch, window, next seq, floor)."""
        result: Snapshot = await self._read("snapshot")
        return result

    async def epoch(self) -> int:
        """The current epoch."""
        return (await self.snapshot()).epoch

    async def window(self) -> int:
        """The current window marker."""
        return (await self.snapshot()).window_seq

    async def exists(self) -> bool:
        """Whether the workspace has a history on disk."""
        result: bool = await self._read("exists")
        return result

    async def rows(self, after_seq: int | None = None, *, chunk: int = 256) -> AsyncIterator[Row]:
        """Every row in order, streaming: ``chunk`` rows per worker-thread hop."""
        iterator = self._history().rows(after_seq=after_seq)

        def pull() -> list[Row]:
            out: list[Row] = []
            for row in iterator:
                out.append(row)
                if len(out) >= chunk:
                    break
            return out

        try:
            while True:
                batch = await self._store._run(pull)
                if not batch:
                    return
                for row in batch:
                    yield row
                if len(batch) < chunk:
                    return
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                await self._store._run(close)

    def session_history(self) -> AsyncTool:
        """The retrieval tool of this workspace, with async calls."""
        return AsyncTool(self._store, self._history().session_history())


class AsyncTool:
    """``session_history`` with ``await tool.call(args)``; ``definition`` stays sync.

    Calls on one tool run one at a time (the tool keeps per-query state), each in
    a worker thread."""

    def __init__(self, store: AsyncStore, tool: Any) -> None:
        self._store = store
        self._tool = tool
        self._lock = asyncio.Lock()

    def definition(self, api: str) -> Any:
        """The tool's schema for ``api`` (pure)."""
        return self._tool.definition(api)

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        async with self._lock:
            return await self._store._run(fn, *args, **kwargs)

    async def call(self, args: dict[str, Any]) -> str:
        """One tool call; the JSON text the model gets (never raises for bad args)."""
        result: str = await self._call(self._tool.call, args)
        return result

    async def list(self, **kwargs: Any) -> Any:
        """``tool.list``: windows, or one window's rows."""
        return await self._call(self._tool.list, **kwargs)

    async def search(self, query: str | Sequence[str], **kwargs: Any) -> Any:
        """``tool.search``."""
        return await self._call(self._tool.search, query, **kwargs)

    async def read(self, seq: int, **kwargs: Any) -> Any:
        """``tool.read``."""
        return await self._call(self._tool.read, seq, **kwargs)
