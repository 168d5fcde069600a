"""ledger.aio: the asyncio face, under concurrent tasks."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from ledger.aio import AsyncStore
from ledger.core.errors import InvalidRow, InvalidWorkspace, WindowChanged
from ledger.transcript.history import History
from tests.helpers import msg


def test_concurrent_tasks_get_gap_free_seqs(tmp_path: Path) -> None:
    async def main() -> None:
        store = AsyncStore(tmp_path, durability="off")
        histories = [store.history("a"), store.history("b")]

        async def writer(h: Any, task: int) -> list[int]:
            seqs: list[int] = []
            for i in range(5):
                r = await h.append_many([msg(f"{task}.{i}.0"), msg(f"{task}.{i}.1")])
                seqs.extend(r.seqs)
            return seqs

        results = await asyncio.gather(*[writer(histories[t % 2], t) for t in range(8)])
        for h in histories:
            rows = [row async for row in h.rows(chunk=7)]
            assert [r.seq for r in rows] == list(range(1, 41))
            # Each batch stayed whole and in order.
            texts = [r.to_dict()["parts"][0]["text"] for r in rows]
            assert all(a[:-1] == b[:-1] for a, b in zip(texts[::2], texts[1::2], strict=True))
        assert all(len(seqs) == 10 for seqs in results)
        assert sorted(s for seqs in results[0::2] for s in seqs) == list(range(1, 41))
        assert await store.workspaces() == ["a", "b"]

    asyncio.run(main())


def test_blocking_work_runs_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    threads: list[int] = []
    real = History.append_many

    def slow(self: History, *args: Any, **kwargs: Any) -> Any:
        threads.append(threading.get_ident())
        # Waits for the event loop to prove it still runs; a blocked loop never sets it.
        assert release.wait(30), "the event loop was blocked by the append"
        return real(self, *args, **kwargs)

    monkeypatch.setattr(History, "append_many", slow)

    async def main() -> None:
        h = AsyncStore(tmp_path, durability="off").history("ws")
        task = asyncio.create_task(h.append_many([msg("x")]))
        while not threads:
            await asyncio.sleep(0.001)
        release.set()  # runs only because the loop is free while the append waits
        r = await task
        assert r.seqs == [1]
        assert threads[0] != threading.get_ident()

    asyncio.run(main())


def test_cancelled_write_keeps_the_queue_and_retry_is_safe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    started = threading.Event()
    real = History.append_many

    def gated(self: History, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("batch_id") == "turn-1" and not release.is_set():
            started.set()
            assert release.wait(30)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(History, "append_many", gated)

    async def main() -> None:
        h = AsyncStore(tmp_path, durability="off").history("ws")
        first = asyncio.create_task(h.append_many([msg("one")], batch_id="turn-1"))
        while not started.is_set():
            await asyncio.sleep(0.001)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        second = asyncio.create_task(h.append_many([msg("two")]))
        await asyncio.sleep(0.01)
        assert not second.done()  # queued behind the cancelled write, still running
        release.set()
        assert (await second).seqs == [2]
        retry = await h.append_many([msg("one")], batch_id="turn-1")
        assert retry.seqs == [1]  # committed once: the retry wrote nothing
        assert [r.seq async for r in h.rows()] == [1, 2]

    asyncio.run(main())


def test_errors_and_state_pass_through(tmp_path: Path) -> None:
    async def main() -> None:
        store = AsyncStore(store=AsyncStore(tmp_path, durability="off").store)
        with pytest.raises(InvalidWorkspace):
            store.history("../x")
        h = store.history("ws")
        assert not await h.exists()
        with pytest.raises(InvalidRow):
            await h.append({"kind": "reset", "role": "system", "parts": []})
        await h.append(msg("a"))
        r = await h.rollover([msg("b")])
        assert await h.window() == r.window == r.seqs[0]
        with pytest.raises(WindowChanged):
            await h.append(msg("c"), expect_window=0)
        view = await h.provider_view()
        assert [row.kind for row in view] == ["lead_in", "message"]
        got = await h.get(view[-1].seq)
        assert got is not None and got.to_dict()["parts"][0]["text"] == "b"
        await h.compact([msg("summary")])
        await h.clear_soft()
        assert await h.epoch() == (await h.snapshot()).epoch
        assert [row.seq async for row in h.rows(after_seq=4)] == [5, 6, 7]
        await h.append(msg("after the floor"))
        tool = h.session_history()
        assert tool.definition("openai")
        found = await asyncio.gather(*[tool.call({"action": "search", "query": "the FLOOR"})
                                       for _ in range(4)])
        assert all(json.loads(text)["items"][0]["seq"] == 8 for text in found), found[0]
        assert json.loads(await tool.call({"action": "search", "query": "summary"}))[
            "items"] == []  # behind the privacy floor

    asyncio.run(main())
    with pytest.raises(TypeError):
        AsyncStore()
