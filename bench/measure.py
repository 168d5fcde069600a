"""Timing and memory helpers shared by the benchmark series.

Every timing is wall-clock ``time.perf_counter_ns`` around one operation. A
series runs its contenders *interleaved* (A, B, C, A, B, C, …) so that disk
and CPU drift hit every contender alike and their ratios compare like with
like. Percentiles are nearest-rank over the sorted samples; p99 is reported
only where there are at least 100 samples.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

P99_MIN_RUNS = 100


@dataclass
class Sample:
    """The durations (seconds) of repeated runs of one operation."""

    times: list[float] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.times)

    def pct(self, q: float) -> float | None:
        if not self.times:
            return None
        s = sorted(self.times)
        k = max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))
        return s[k]

    @property
    def p50(self) -> float | None:
        return self.pct(50)

    def of_runs(self, q: float) -> float:
        """``pct(q)`` of a sample that has runs (every sample of
        :func:`interleave`, which runs each contender ``min_runs >= 1`` times):
        the number, not None."""
        found = self.pct(q)
        if found is None:
            raise ValueError("no runs were measured: no percentile")
        return found

    @property
    def p99(self) -> float | None:
        return self.pct(99) if self.n >= P99_MIN_RUNS else None

    @property
    def best(self) -> float | None:
        return min(self.times) if self.times else None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "n": self.n,
            "p50_ms": _ms(self.p50),
            "p99_ms": _ms(self.p99),
            "min_ms": _ms(self.best),
            "max_ms": _ms(max(self.times) if self.times else None),
        }
        out.update(self.extra)
        return out


def _ms(v: float | None) -> float | None:
    return None if v is None else round(v * 1e3, 4)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter_ns()
    out = fn()
    return (time.perf_counter_ns() - t0) / 1e9, out


def interleave(
    contenders: dict[str, Callable[[], Any]],
    *,
    min_runs: int,
    max_runs: int,
    budget_s: float,
    setup: Callable[[], None] | None = None,
) -> dict[str, Sample]:
    """Run each contender once per round, rotating the order, until every one
    has ``min_runs`` samples and either ``max_runs`` rounds are done or the
    budget is spent. ``setup`` runs untimed before every round."""
    samples = {name: Sample() for name in contenders}
    names = list(contenders)
    gc.collect()
    start = time.monotonic()
    rounds = 0
    while rounds < max_runs and (rounds < min_runs or time.monotonic() - start < budget_s):
        if setup is not None:
            setup()
        shift = rounds % len(names)
        for name in names[shift:] + names[:shift]:
            dt, _ = timed(contenders[name])
            samples[name].times.append(dt)
        rounds += 1
    return samples


def ratio(a: float | None, b: float | None, digits: int = 3) -> float | None:
    if a is None or b is None or b <= 0:
        return None
    return round(a / b, digits)


def vm_rss_bytes() -> int | None:
    """Current resident set size from /proc/self/status (Linux), else None."""
    return _status_field("VmRSS")


def vm_hwm_bytes() -> int | None:
    """Peak resident set size (high-water mark) from /proc/self/status."""
    return _status_field("VmHWM")


def reset_hwm() -> bool:
    """Start the peak (VmHWM) again from the resident set now (Linux 4.0 on:
    ``5`` written to /proc/self/clear_refs), so a peak read later is what
    ran since, not the process's start-up; False where that cannot be done
    (the peak then still holds the start-up's)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
    except OSError:
        return False
    return True


def _status_field(name: str) -> int | None:
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(name.encode() + b":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None
