"""``bench.measure``'s resident-set readings (``rss_growth_mib_scan_big``).

Run: ``python -m pytest bench/test_measure.py`` (``bench/`` is outside the
test suite's ``testpaths``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# A child process: a 64 MiB buffer touched and freed (a start-up's peak),
# then the peak read, started again, and read again.
_CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from bench.measure import reset_hwm, vm_hwm_bytes, vm_rss_bytes
buf = bytearray(64 << 20)
for i in range(0, len(buf), 4096):
    buf[i] = 1
del buf
before = vm_hwm_bytes() - vm_rss_bytes()
done = reset_hwm()
after = vm_hwm_bytes() - vm_rss_bytes()
print(json.dumps({"before": before, "done": done, "after": after}))
"""


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="Linux /proc only")
def test_reset_hwm_leaves_out_the_peak_before_it() -> None:
    out = subprocess.run([sys.executable, "-c", _CHILD, str(REPO)], capture_output=True,
                         text=True, check=True)
    got = json.loads(out.stdout)
    assert got["before"] >= 60 << 20  # the freed buffer is still in the peak
    assert got["done"] is True
    assert got["after"] < 4 << 20  # and no longer after the reset


def test_a_percentile_of_runs_is_a_number_or_an_error() -> None:
    """``Sample.of_runs``: the percentile the benches print (``pct``), never
    None in their arithmetic: an empty sample says so instead."""
    from bench.measure import Sample, interleave

    sample = Sample([0.003, 0.001, 0.002, 0.004])
    assert sample.of_runs(50) == sample.pct(50) == 0.002
    assert sample.of_runs(99) == 0.004
    with pytest.raises(ValueError, match="no runs"):
        Sample().of_runs(50)
    ran = interleave({"x": lambda: None}, min_runs=3, max_runs=3, budget_s=1)
    assert ran["x"].of_runs(50) > 0
