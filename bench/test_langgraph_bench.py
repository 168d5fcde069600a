"""``bench.langgraph_bench``: the warm-up and the ``--cold`` hook stay out of
what is measured.

Run: ``python -m pytest bench/test_langgraph_bench.py`` (``bench/`` is outside
the test suite's ``testpaths``; needs the langgraph extra).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.base")

from bench import langgraph_bench as lb


def test_the_warm_up_runs_on_its_own_instance_and_leaves_the_measured_one_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lb, "WARMUP_STEPS", 3)
    made: list[lb.Ledger] = []

    def make() -> lb.Ledger:
        made.append(lb.Ledger(str(tmp_path / f"c{len(made)}")))
        return made[-1]

    lb.warm_up(make, lambda _msg: None)
    measured = make()
    warm = made[0]
    assert warm is not measured
    state = warm.saver().get_tuple({"configurable": {"thread_id": "warm-up-ledger"}})
    assert state is not None and len(state.checkpoint["channel_values"]["messages"]) == 6
    assert measured.bytes() == 0
    assert measured.saver().get_tuple(
        {"configurable": {"thread_id": "warm-up-ledger"}}) is None


def test_the_before_hook_runs_once_before_each_saver_call(tmp_path: Path) -> None:
    calls: list[str] = []
    saver = lb.Ledger(str(tmp_path)).saver()
    for name in ("get_tuple", "put", "put_writes"):
        inner = getattr(saver, name)

        def traced(*a: Any, _inner: Any = inner, _name: str = name, **k: Any) -> Any:
            calls.append(_name)
            return _inner(*a, **k)

        setattr(saver, name, traced)
    timer = lb.Timed(saver, before=lambda: calls.append("evict"))
    app = lb.build_graph(saver)
    lb._step(app, timer, {"configurable": {"thread_id": "t"}}, 0)
    assert calls and calls[::2] == ["evict"] * (len(calls) // 2)
    assert calls[1::2] == [c for c in calls if c != "evict"]
    assert {"get_tuple", "put", "put_writes"} <= set(calls)
    assert timer.cpu > 0
