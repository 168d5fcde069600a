"""Short rows (issue 32, third round): a row shorter than
``ranking.MIN_LENGTH`` terms is length-normalised as if it had that many,
and so is each neighbour in the neighbour field, so a greeting that names
someone does not outrank what was said about them, and a row's neighbour
never outranks the row that holds the query's word."""

from __future__ import annotations

from collections import Counter

from ledger.core import ranking


def _doc(seq: int, text: str, window: int = 1, prev: int = 0, nxt: int = 0) -> ranking.Doc:
    tfs, length = ranking.term_counts(text)
    return ranking.Doc(seq, window, length, dict(tfs), prev, nxt)


def _corpus(docs: list[ranking.Doc]) -> ranking.Corpus:
    df: Counter[str] = Counter()
    for d in docs:
        df.update(d.tfs.keys())
    return ranking.Corpus(len(docs), sum(d.length for d in docs), df)


def test_a_greeting_does_not_outrank_a_sentence_about_the_person() -> None:
    """Both rows hold only the name of the question's words: the two-term
    greeting used to win on its length alone; now both count as MIN_LENGTH
    terms, score alike, and the tie goes to the newer row as always."""
    greeting = _doc(2, "Hi Paola!")
    sentence = _doc(3, "Paola goes skiing in Colorado every winter with her family")
    filler = [_doc(10 + i, f"we talked about the weather and work again, day {i}")
              for i in range(20)]
    docs = [greeting, sentence, *filler]
    corpus = _corpus(docs)
    query = ranking.parse_query("What are Paola's hobbies?")
    assert greeting.length < sentence.length <= ranking.MIN_LENGTH
    ranked = ranking.rank(docs, query, corpus)
    assert [s for s, _ in ranked] == [3, 2]
    assert ranked[0][1] == ranked[1][1]
    # a row under MIN_LENGTH terms scores as one of MIN_LENGTH terms with the same match
    longer = ranking.Doc(5, 1, ranking.MIN_LENGTH + 8, dict(greeting.tfs))
    assert ranking.bm25(longer, query, corpus) < ranking.bm25(greeting, query, corpus)


def test_a_neighbour_never_outranks_the_row_with_the_word() -> None:
    """Rows of 4-6 terms (mean below MIN_LENGTH): the row holding "cat"
    comes before the row next to it, which has "cat" only in its field (with
    the floor on a row's own length but not on its neighbours', the
    neighbour came first)."""
    a = _doc(8, "our cat knocked a glass off the table", prev=0, nxt=9)
    b = _doc(9, "the release notes mention the new api", prev=8, nxt=0)
    docs = [a, b]
    ranked = ranking.rank(docs, ranking.parse_query("pet cat"), _corpus(docs))
    assert [s for s, _ in ranked] == [8, 9]
    assert ranked[0][1] > ranked[1][1] > 0
