"""Where a snippet centres (``ranking.best_offset``), however fast it is
found, is where its definition says: the densest spot of the words of the
row's first SNIPPET_SCAN code points that give a query term (a word's stem
is one, or an identifier's part's). It is found fast (the distinct words
split in C, each judged once, then found whole in C), for ASCII rows and
others alike; every engine's snippets come from it, so it must answer as
the definition on any text."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from ledger.core import ranking

_WORD = re.compile(r"[^\W_]+")
_CAMEL = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def defined_offset(text: str, query: ranking.Query) -> int:
    """best_offset as defined, word by word (no phrases here)."""
    wanted = set(query.terms)
    hits = []
    for m in _WORD.finditer(text, 0, ranking.SNIPPET_SCAN):
        w = m.group()
        lw = w.lower() if w.isascii() else ranking.fold(w)
        parts = _CAMEL.findall(w) if len(w) > 3 and not w.islower() and not w.isupper() else []
        if ranking._stem(lw) in wanted or wanted & {ranking._stem(p.lower()) for p in parts}:
            hits.append(m.start())
    if not hits:
        return 0
    best, count = hits[0], 0
    for i, h in enumerate(hits):
        n = sum(1 for x in hits[i:] if x - h <= 150)
        if n > count:
            best, count = h, n
    return best


# ASCII words that are terms, parts of identifiers, inside longer words,
# next to underscores and digits; separators of every kind.
WORDS = ["deploy", "deploys", "Deploy", "redeploy", "deploy_x", "x_deploy", "deployX",
         "parseDeployPlan", "DEPLOY", "log", "catalog", "logs", "9log", "log9", "a", "c",
         "the", "run", "running", "HTTPRequest", "request", "é", "x" * 63, "y" * 64]
SEPS = [" ", "  ", ".", "_", "-", "\n", "(", ")", "'", ""]
TEXT = st.lists(st.tuples(st.sampled_from(WORDS), st.sampled_from(SEPS)), max_size=80).map(
    lambda ws: "".join(w + s for w, s in ws))
QUERY = st.lists(st.sampled_from(["deploy", "log", "request", "a", "the", "run", "plan",
                                  "x" * 63, "y" * 64, "c"]), min_size=1, max_size=4)


@given(TEXT, QUERY)
def test_the_snippet_centre_follows_its_definition(text: str, words: list[str]) -> None:
    q = ranking.parse_query(" ".join(words))
    assert ranking.best_offset(text, q) == defined_offset(text, q)
    assert ranking.best_offset(text, q) == defined_offset(text, q)  # the words kept


# Text that is not ASCII: accented and decomposed words (a combining mark is
# no letter: it ends a word), non-Latin scripts, digits of other scripts,
# identifiers, words that hold a query word, marks and symbols between.
UWORDS = ["déploy", "de\u0301ploy", "DÉPLOY", "Café", "cafe", "café_x", "xcafé", "日本語",
          "ΔeployLog", "parseCaféPlan", "log", "logé", "éLog", "٣log", "log٣", "Straße",
          "strasse", "ﬁle", "file", "Ⅻ", "naïve", "naive", "x" * 63, "é" * 64, "deploy"]
USEPS = [" ", "\u00a0", "\u2014", "\u0301", "\u3000", "_", "·", "\n", "é", ""]
UTEXT = st.lists(st.tuples(st.sampled_from(UWORDS), st.sampled_from(USEPS)), max_size=80).map(
    lambda ws: "".join(w + s for w, s in ws))
UQUERY = st.lists(st.sampled_from(["deploy", "log", "cafe", "file", "strasse", "naive",
                                   "plan", "日本語", "x" * 63, "the"]), min_size=1, max_size=4)


@given(UTEXT, UQUERY)
def test_the_snippet_centre_of_text_not_ascii_follows_its_definition(
        text: str, words: list[str]) -> None:
    q = ranking.parse_query(" ".join(words))
    assert ranking.best_offset(text, q) == defined_offset(text, q)
    assert ranking.best_offset(text, q) == defined_offset(text, q)  # the words kept


def test_a_word_cut_at_the_scan_limit_counts_as_cut() -> None:
    q = ranking.parse_query("deploy")
    pad = "z " * ((ranking.SNIPPET_SCAN - 6) // 2)
    cut = pad + "deployment"  # "deploy" ends exactly at the limit: a word there
    assert len(pad) + 6 == ranking.SNIPPET_SCAN
    assert ranking.best_offset(cut, q) == defined_offset(cut, q) == len(pad)
    whole = pad[2:] + "deployment"  # the whole word lies inside: no hit
    assert ranking.best_offset(whole, q) == defined_offset(whole, q) == 0


def test_the_snippet_word_cache_is_bounded() -> None:
    q = ranking.parse_query("deploy")
    for i in range(ranking._WORDS_KEPT // 1000 + 1):
        ranking.best_offset(" ".join(f"w{i}x{j}" for j in range(1000)), q)
    assert len(ranking._word_stems) <= ranking._WORDS_KEPT
    ranking.best_offset("y" * 64 + " deploy", q)
    assert b"y" * 64 not in ranking._word_stems
    for i in range(ranking._WORDS_KEPT // 1000 + 1):
        ranking.best_offset(" ".join(f"é{i}x{j}" for j in range(1000)), q)
    assert len(ranking._str_stems) <= ranking._WORDS_KEPT
    ranking.best_offset("é" * 64 + " deploy", q)
    assert "é" * 64 not in ranking._str_stems
