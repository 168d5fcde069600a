"""The provider view builds its rows with the cyclic garbage collector paused
(``ledger.core.gcpause``): no collection runs while the window is read, and
the collector is left as the caller had it -- on, off, or after an error."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger import History, Store
from ledger.core.errors import Unavailable
from ledger.core.windows import provider_rows
from tests.helpers import msg


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    try:
        yield
    finally:
        (gc.enable if was else gc.disable)()


def _big_window(tmp_path: Path) -> History:
    h = Store(tmp_path, durability="off").history("ws")
    # Rows with nested parts: thousands of containers, far past the
    # collector's young-generation threshold (700 allocations).
    parts = [{"type": "text", "text": f"part {k}"} for k in range(4)]
    for i in range(0, 1500, 100):
        h.append_many([{**msg(f"row {j}"), "parts": parts} for j in range(i, i + 100)])
    return h


def _collections(fn: Any) -> int:
    """How many collections ran while ``fn()`` ran (counted before anything
    else is allocated: a new object may set off the one that is due)."""
    runs: list[int] = []

    def count(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            runs.append(info["generation"])

    gc.collect()
    gc.callbacks.append(count)
    try:
        kept = fn()
        during = len(runs)
        del kept
    finally:
        gc.callbacks.remove(count)
    return during


def test_no_collection_while_the_view_is_built(tmp_path: Path, collector_on: None) -> None:
    h = _big_window(tmp_path)
    # Read without the pause, the same rows set off a collection every 700
    # containers allocated (this test would see that).
    assert _collections(lambda: provider_rows(h.engine.window_rows())) > 5
    # With it: none, not even on the way out (the one the allocations made
    # due runs at the caller's next allocation, or never when the caller has
    # freed the rows by then).
    assert _collections(h.provider_view) == 0
    assert _collections(h.window_rows) == 0
    assert gc.isenabled()
    view = h.provider_view()
    assert len(view) == 1500
    assert [r.data["parts"][1]["text"] for r in view[:2]] == ["part 1", "part 1"]


def test_a_collector_the_caller_switched_off_stays_off(tmp_path: Path,
                                                       collector_on: None) -> None:
    h = _big_window(tmp_path)
    gc.disable()
    assert len(h.provider_view()) == 1500
    assert len(h.window_rows()) == 1500
    assert not gc.isenabled()


def test_the_collector_is_back_on_after_a_failed_read(tmp_path: Path, collector_on: None,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    h = _big_window(tmp_path)

    def fail() -> list[Any]:
        assert not gc.isenabled()  # the read runs with the collector paused
        raise Unavailable("the disk went away")

    monkeypatch.setattr(h.engine, "window_rows", fail)
    with pytest.raises(Unavailable):
        h.provider_view()
    assert gc.isenabled()
