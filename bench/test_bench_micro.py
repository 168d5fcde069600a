"""Micro benchmarks of the hot functions (pytest-benchmark).

Run: ``python -m pytest bench/test_bench_micro.py`` (``bench/`` is outside
the test suite's ``testpaths``). Rows are real-transcript rows when
``../shared/real-transcripts`` is present, else the seeded synthetic corpus.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.corpus import load_corpus
from bench.workspace import workspace_dir
from ledger.core.format import rows as fmt
from ledger.core.rows import prepare_batch
from ledger.storage.files.bulk import bulk_load
from ledger.storage.files.index import scan_segment
from ledger.storage.files.segments import list_segments, segment_path, stamp
from ledger.transcript.store import Store

CORPUS = load_corpus()


def _row_of(size: int) -> dict[str, Any]:
    """A corpus row whose stored size is closest to ``size`` bytes."""
    k = min(range(len(CORPUS.rows)), key=lambda i: abs(CORPUS.sizes[i] - size))
    return CORPUS.rows[k]


@pytest.fixture(scope="module", params=[500, 2048, 16384], ids=["500B", "2KiB", "16KiB"])
def line(request: pytest.FixtureRequest) -> tuple[dict[str, Any], bytes]:
    stored, lines = prepare_batch([_row_of(request.param)], 1, "b_bench", 1 << 26)
    return stored[0], lines[0][:-1]


def test_encode_row(benchmark: Any, line: tuple[dict[str, Any], bytes]) -> None:
    row, raw = line
    out = benchmark(fmt.encode_line, row)
    assert out[:-1] == raw


def test_prepare_one_row_batch(benchmark: Any, line: tuple[dict[str, Any], bytes]) -> None:
    """What append_many does per row: check, order, round-trip, frame."""
    caller = _row_of(len(line[1]))
    _stored, lines = benchmark(prepare_batch, [caller], 1, "b_bench", 1 << 26)
    assert len(lines) == 1


def test_decode_row(benchmark: Any, line: tuple[dict[str, Any], bytes]) -> None:
    row, raw = line
    assert benchmark(fmt.decode_line, raw) == row


def test_checksum(benchmark: Any, line: tuple[dict[str, Any], bytes]) -> None:
    _, raw = line
    body = fmt.body_of(raw)
    assert body is not None
    assert benchmark(fmt.checksum_hex, body) == raw[-18:-2]


def test_verify_line(benchmark: Any, line: tuple[dict[str, Any], bytes]) -> None:
    """Framing + checksum check without decoding (``body_of``)."""
    _, raw = line
    assert benchmark(fmt.body_of, raw) is not None


def test_reset_candidate_scan_unreadable(benchmark: Any,
                                         line: tuple[dict[str, Any], bytes]) -> None:
    """``raw_may_be_reset`` on a line that fails verification (no match)."""
    _, raw = line
    damaged = raw[:-3] + b'x"}'
    assert benchmark(fmt.raw_may_be_reset, damaged) is False


def test_reset_check_readable(benchmark: Any, line: tuple[dict[str, Any], bytes]) -> None:
    """``readable_row_is_reset`` on an ordinary row (what every search page
    and every index scan runs per line)."""
    row, raw = line
    assert benchmark(fmt.readable_row_is_reset, raw, row) is False


def test_reset_candidate_scan_match(benchmark: Any) -> None:
    hidden = b'{"seq":9,"k\\u0069nd" : "res\\u0065t","parts":[' + b"x" * 2000
    assert benchmark(fmt.raw_may_be_reset, hidden) is True


def test_scan_segment_64k(benchmark: Any, tmp_path: Path) -> None:
    """Index entry of one sealed 64 KiB segment (what sealing costs)."""
    h = Store(tmp_path, durability="off").history("ws")
    bulk_load(h, CORPUS.batches(64 << 10, seed=1), segment_target_bytes=64 << 10)
    path = workspace_dir(h)
    number = list_segments(path)[0]
    st = stamp(segment_path(path, number))
    assert st is not None
    info = benchmark(scan_segment, path, number, st)
    assert info.rows > 0
