"""``python -m bench --compare``: which numbers it flags as worse.

Run: ``python -m pytest bench/test_bench_compare.py`` (``bench/`` is outside
the test suite's ``testpaths``).
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.__main__ import compare, main


def _summary(path: Path, numbers: dict[str, float]) -> str:
    path.write_text(json.dumps({"suites": {"files": {"numbers": numbers}}}))
    return str(path)


def test_compare_flags_what_got_more_than_15_percent_worse(tmp_path: Path) -> None:
    before = _summary(tmp_path / "a.json", {
        "check_over_decode_floor": 1.10,  # smaller is better
        "view_over_read_decode_floor": 1.80,
        "turn ms ledger agents @0 MiB": 2.0,
        "rewrite_baseline_over_ledger_200mib": 400.0,  # larger is better
        "turn_sqlite_over_ledger_big": 100.0,
        "ratio throughput_16_over_1": 0.98,  # larger is better
    })
    after = _summary(tmp_path / "b.json", {
        "check_over_decode_floor": 2.50,  # worse
        "view_over_read_decode_floor": 2.00,  # 11% worse: inside the bound
        "turn ms ledger agents @0 MiB": 1.0,  # better
        "rewrite_baseline_over_ledger_200mib": 300.0,  # worse (smaller)
        "turn_sqlite_over_ledger_big": 200.0,  # better (larger)
        "ratio throughput_16_over_1": 1.25,  # better (larger)
    })
    table, flagged = compare(before, after)
    assert flagged == ["files: check_over_decode_floor",
                       "files: rewrite_baseline_over_ledger_200mib"]
    assert "**worse** (+127%)" in table and "**worse** (+33%)" in table
    assert main(["--compare", before, after]) == 1
    assert main(["--compare", before, after, "--tolerance", "2"]) == 0
