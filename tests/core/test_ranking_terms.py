"""The terms of a text, however fast they are computed, are those of their
definition (ranking's module doc): NFKD, every combining mark dropped,
words split at anything not a letter or digit, each case-folded, an
identifier's parts after it. Every engine's index holds these terms, so a
faster path that differs on any text would make indexes disagree."""

from __future__ import annotations

import re
import unicodedata
from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from ledger.core import ranking

_CAMEL = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def defined_words(text: str) -> list[str]:
    decomposed = "".join(c for c in unicodedata.normalize("NFKD", text)
                         if not unicodedata.combining(c))
    out: list[str] = []
    for w in re.findall(r"[^\W_]+", decomposed):
        out.append(w.casefold())
        parts = _CAMEL.findall(w) if len(w) > 3 and not w.islower() and not w.isupper() else []
        if len(parts) > 1:
            out.extend(p.casefold() for p in parts)
    return out


# ASCII with the characters where the definition has corners: accents precomposed
# and combining, dotted capital I, sharp s, ligatures, CJK, emoji, Arabic marks.
TEXT = st.text(alphabet=st.one_of(
    st.characters(min_codepoint=32, max_codepoint=126),
    st.sampled_from("éÉ\u0301\u0308İıßẞﬁ—’中文😀\u064b\u0627\u3099Å\u212bΣσς\u0345"),
    st.characters()), max_size=60)


@given(TEXT)
def test_words_fold_and_terms_follow_their_definition(text: str) -> None:
    words = defined_words(text)
    assert ranking.words(text) == words
    assert ranking.fold(text) == "".join(
        c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c)
    ).casefold()
    assert ranking.terms(text) == [ranking._stem(w) for w in words
                                   if w not in ranking.STOP and len(w) < ranking.WORD_MAX]


# Pieces between ASCII separators that hold non-ASCII characters: symbols
# beside numbers and words (as in tool output), non-ASCII spaces and
# separators, marks, a lone surrogate (JSON can carry one).
PIECES = st.lists(st.one_of(
    st.sampled_from([" ", "\n", "12\u2192", "\u2502", "\u25cf ", "caf\u00e9", "e\u0301x",
                     "\u00a0", "\u3000", "\u2028", "a\u2019s", "x_y", "\ud800", "\u00e9" * 70,
                     "Stra\u00dfeHTTP", "\u4e2d\u6587x"]),
    st.characters(min_codepoint=32, max_codepoint=126), st.characters()), max_size=40).map("".join)


@given(PIECES)
def test_non_ascii_terms_follow_their_definition_twice(text: str) -> None:
    want = [ranking._stem(w) for w in defined_words(text)
            if w not in ranking.STOP and len(w) < ranking.WORD_MAX]
    assert ranking.terms(text) == want
    assert ranking.terms(text) == want  # from the pieces and words kept the first time


def test_a_few_texts() -> None:
    assert ranking.words("Café parseHTTPRequest — naïve") == [
        "cafe", "parsehttprequest", "parse", "http", "request", "naive"]
    assert ranking.fold("İSTANBUL Straße") == "istanbul strasse"


# Every ASCII character, and words around WORD_MAX long: the ASCII path
# splits bytes in C, and each word's terms are kept once worked out.
ASCII = st.lists(st.one_of(st.characters(max_codepoint=127),
                          st.sampled_from(["a" * 62, "B" * 63, "cD" * 32, "_x9", "aAa"])),
                 max_size=40).map("".join)


@given(ASCII)
def test_ascii_terms_follow_their_definition_twice(text: str) -> None:
    want = [ranking._stem(w) for w in defined_words(text)
            if w not in ranking.STOP and len(w) < ranking.WORD_MAX]
    assert ranking.terms(text) == want
    assert ranking.terms(text) == want  # from the words kept the first time


def test_the_word_caches_are_bounded_and_give_the_same_terms() -> None:
    text = " ".join(f"deployWord{i} caf\u00e9{i}" for i in range(3000))
    first = ranking.terms(text)
    assert first[:5] == ["deployword0", "deploy", "word", "0", "cafe0"]
    for i in range(ranking._WORDS_KEPT // 1000 + 1):
        ranking.terms(" ".join(f"w{i}x{j}" for j in range(1000)))
        ranking.terms(" ".join(f"\u00e9{i}x{j}" for j in range(1000)))
    assert len(ranking._ascii_words) <= ranking._WORDS_KEPT
    assert len(ranking._str_words) <= ranking._WORDS_KEPT
    assert len(ranking._pieces) <= ranking._WORDS_KEPT
    assert ranking.terms(text) == first
    assert ranking.terms("x" * 63) == ["x" * 63] and ranking.terms("x" * 64) == []
    assert b"x" * 64 not in ranking._ascii_words
    assert ranking.terms("\u2192" + "x" * 63) == ["x" * 63]
    assert ranking.terms("\u2192" + "x" * 64) == []
    assert ("\u2192" + "x" * 62).encode() not in ranking._pieces  # 65 bytes: not kept


@given(st.one_of(TEXT, PIECES, ASCII))
def test_term_counts_are_the_terms_counted_in_their_order(text: str) -> None:
    """What an index stores of a row: each term's count, keys in the order
    the text first names them (a fold gives new terms their ids in that
    order), and the length in terms."""
    want = [ranking._stem(w) for w in defined_words(text)
            if w not in ranking.STOP and len(w) < ranking.WORD_MAX]
    tfs, length = ranking.term_counts(text)
    assert list(tfs.items()) == list(Counter(want).items())
    assert length == len(want)
