"""Token accounting benchmarks (pytest-benchmark), side by side per group.

Run: ``python -m pytest bench/test_bench_tokens.py`` (``bench/`` is outside the
test suite's ``testpaths``). Groups:

- ``count``: ledger's chunked count against raw ``tiktoken.encode_ordinary`` on
  the corpus text (target ratio <= 1.15);
- ``rebudget``: a 500-row window counted cold, then warm after one appended row
  (target <= 5% of cold);
- ``pathological-<kind>``: 1, 2, 4 and 6 MB without whitespace (linear time
  shows as time proportional to size).

The numbers for the bench report come from :func:`bench.tokens_bench.run`.
"""

from __future__ import annotations

from typing import Any

import pytest

from bench.tokens_bench import MB, _corpus, _pathological
from ledger.tokens.counting import RowTokenCache, TokenCounter
from ledger.tokens.encodings import get_encoding

TEXT, ROWS, _SOURCE = _corpus()
COUNTER = TokenCounter("gpt-4o", cache=None)
ENC = get_encoding("o200k_base")


@pytest.mark.benchmark(group="count")
def test_count_ledger(benchmark: Any) -> None:
    counted = benchmark(COUNTER.text, TEXT)
    assert counted.exact and counted.tokens == len(ENC.encode_ordinary(TEXT))


@pytest.mark.benchmark(group="count")
def test_count_tiktoken_raw(benchmark: Any) -> None:
    assert len(benchmark(ENC.encode_ordinary, TEXT)) > 0


@pytest.mark.benchmark(group="rebudget")
def test_rebudget_cold_500_rows(benchmark: Any) -> None:
    window = ROWS[:500]

    def cold() -> int:
        return TokenCounter("gpt-4o", cache=RowTokenCache()).rows(window).tokens

    assert benchmark(cold) > 0


@pytest.mark.benchmark(group="rebudget")
def test_rebudget_after_one_append(benchmark: Any) -> None:
    counter = TokenCounter("gpt-4o", cache=RowTokenCache())
    counter.rows(ROWS[:500])
    grown = ROWS[:501]
    tokens = benchmark(lambda: counter.rows(grown).tokens)
    assert tokens == TokenCounter("gpt-4o", cache=None).rows(grown).tokens


@pytest.mark.parametrize("kind", ["one-letter", "base64", "unicode"])
@pytest.mark.parametrize("mb", [1, 2, 4, 6])
def test_pathological_size_scaling(benchmark: Any, kind: str, mb: int) -> None:
    import random

    benchmark.group = f"pathological-{kind}"
    text = _pathological(kind, mb * MB, random.Random(mb))
    counted = benchmark.pedantic(COUNTER.text, args=(text,), rounds=2, iterations=1)
    assert counted.tokens > 0
    assert counted.exact == (kind != "one-letter")
