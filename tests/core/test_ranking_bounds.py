"""The pure ranking's bounds (issue 30, cases 6 and 8): a query's terms and
phrases are de-duplicated and capped, the stemming cache holds only words
that can be terms, and a snippet's scan is bounded, whatever the text."""

from __future__ import annotations

import pytest

from ledger.core import ranking
from ledger.core.errors import BadRequest


def test_phrases_are_deduplicated_and_capped() -> None:
    q = ranking.parse_query(" ".join(['"cache was cold"', '"Cache  WAS cold"'] * 40))
    assert q.phrases == ("cache was cold",)
    ranking.parse_query(" ".join(f'"p{i}"' for i in range(ranking.MAX_PHRASES)))
    with pytest.raises(BadRequest, match="17 distinct quoted phrases"):
        ranking.parse_query(" ".join(f'"p{i}"' for i in range(ranking.MAX_PHRASES + 1)))


def test_terms_are_deduplicated_and_capped() -> None:
    q = ranking.parse_query(" ".join(f"w{i} deploy" for i in range(200)))
    assert len(q.terms) == ranking.QUERY_TERMS and len(set(q.terms)) == len(q.terms)
    assert q.terms[:2] == ("w0", "deploy")
    kept, per_term, examine = ranking.postings_plan({t: 1 for t in q.terms})
    assert len(kept) == ranking.MAX_TERMS
    assert per_term * len(kept) <= 500 and examine * len(kept) <= ranking.EXAMINE


def test_the_stem_cache_keeps_only_short_words() -> None:
    ranking._stem_cached.cache_clear()
    long_words = " ".join(chr(97 + i % 26) * 70 + str(i) for i in range(3000))
    q = ranking.parse_query("deploy " + long_words[:900])
    ranking.best_offset(long_words, q)
    ranking.terms(long_words)
    ranking.parse_query(long_words[:1000])  # no short term: its words are searched as terms
    info = ranking._stem_cached.cache_info()
    assert info.currsize < 10 and info.maxsize == 65536  # 3,000 long words: none kept
    assert ranking.terms("x" * 63) == ["x" * 63] and ranking.terms("x" * 64) == []
