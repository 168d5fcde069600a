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


def test_cold_long_times_three_threads_in_turn_and_reports_both_points_cold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lb, "WINDOW", 3)
    monkeypatch.setattr(lb, "REF_STEPS", 5)
    monkeypatch.setattr(lb, "COLD_EVICT_MIB", 1)
    order: list[str] = []
    step = lb._step

    def traced(app: Any, timer: lb.Timed, cfg: dict[str, Any], k: int) -> Any:
        order.append(cfg["configurable"]["thread_id"])
        return step(app, timer, cfg, k)

    monkeypatch.setattr(lb, "_step", traced)
    out = lb.run_cold(str(tmp_path), lambda _msg: None, long_steps=8)
    timed = order[-9:]  # the grown steps come first, then three rounds of three
    assert [timed[i:i + 3] for i in (0, 3, 6)] == [
        ["cold-warm", "cold-cold", "cold-long"],
        ["cold-cold", "cold-long", "cold-warm"],
        ["cold-long", "cold-warm", "cold-cold"]]
    assert out["long_steps"] == 8
    assert out["long_over_cold"] == out["long_saver_cpu_ms"] / out["cold_saver_cpu_ms"]
    assert out["long_over_warm"] == out["long_saver_cpu_ms"] / out["warm_saver_cpu_ms"]
    assert out["ratio"] == out["cold_saver_cpu_ms"] / out["warm_saver_cpu_ms"]
    from ledger import Store
    from ledger.integrations.langgraph import LedgerSaver

    state = LedgerSaver(store=Store(str(tmp_path / "cold-long"), durability="off")).get_tuple(
        {"configurable": {"thread_id": "cold-long"}})
    assert state is not None and len(state.checkpoint["channel_values"]["messages"]) == 16


def test_long_without_cold_is_refused() -> None:
    with pytest.raises(SystemExit):
        lb.main(["--long"])
