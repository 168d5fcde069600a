"""A recall index kept in this process for ranked ``session_history`` over a
row engine's stored rows (``ledger.storage.primitives.StoredRows``; the
memory engine's): the file engine's index (``ledger.storage.files.recall``)
without SQLite, so both rank alike. For every searchable row: its window,
length and term counts; for every term its document frequency and postings;
the ranking itself is ``ledger.core.ranking``.

Kept per workspace and brought up to date by the first ranked search after
appends (the rows after the newest it saw); a rewrite (a new epoch) or a new
privacy floor starts it again, from the floor's row: it holds nothing before
the floor, not even in its statistics (as the file engine's). A row whose
bytes fail verification is not indexed. A query reads, for each of its
rarest terms, the best postings by impact (newest first among equals) with
seq in (after, high], ``SCAN_ROWS`` in all: the same candidates the file
engine takes.
"""

from __future__ import annotations

import bisect
from collections import Counter

from ledger.core import ranking
from ledger.core.format import rows as fmt
from ledger.core.searchable import indexed_terms
from ledger.storage.engine import Candidate
from ledger.storage.primitives import LAST_SEQ, StoredRow, StoredRows
from ledger.storage.seqpages import RowState

STEP = 1024  # rows read per step while catching up


class Recall:
    """One workspace's index (module doc)."""

    def __init__(self) -> None:
        self._start(0, 0)

    def _start(self, epoch: int, floor: int) -> None:
        self.epoch = epoch
        self.floor = floor  # the seq of the floor it starts at (0: none)
        self.upto = max(floor - 1, 0)  # the newest seq seen
        self.window = 0
        self.calls: set[str] = set()
        self.wins: list[int] = []
        self.docs: dict[int, tuple[int, int, Counter[str]]] = {}  # seq -> (window, len, tfs)
        self.order: list[int] = []  # the seqs of ``docs``, ascending
        self.df: Counter[str] = Counter()
        self.total = 0
        # term -> [(-impact in thousandths, -seq, tf)], sorted when ``dirty``
        self.postings: dict[str, list[tuple[int, int, int]]] = {}
        self.dirty: set[str] = set()

    def refresh(self, rows: StoredRows, head: RowState) -> None:
        """Index the rows not yet seen (all of them from the floor after a
        rewrite or a new floor); call under ``rows.locked()``."""
        floor = head.floor.seq if head.floor is not None else 0
        if head.epoch != self.epoch or floor != self.floor:
            self._start(head.epoch, floor)
        while got := rows.stored(self.upto + 1, LAST_SEQ, STEP):
            for s in got:
                self._add(s)
            self.upto = got[-1].seq

    def _add(self, s: StoredRow) -> None:
        row, seq = fmt.decode_line(s.raw), s.seq
        if row is None:
            return
        if row.get("kind") == "reset" or fmt.readable_row_is_reset(s.raw, row):
            self.window = seq
            self.wins.append(seq)
            return
        indexed = indexed_terms(row, self.calls, None, len(s.raw))
        if indexed is None:
            return
        tfs, length = indexed
        self.docs[seq] = (self.window, length, tfs)
        self.order.append(seq)
        self.total += length
        for t, n in tfs.items():
            self.df[t] += 1
            self.postings.setdefault(t, []).append(
                (-round(ranking.impact(n, length) * 1000), -seq, n))
            self.dirty.add(t)

    def docs_after(self, upto: int) -> list[tuple[int, int, tuple[int, int]]]:
        """The rows indexed with seq above ``upto``, in seq order: (seq,
        window, hint), what the semantic channel embeds."""
        i = bisect.bisect_right(self.order, upto)
        return [(seq, self.docs[seq][0], (seq, 0)) for seq in self.order[i:]]

    def candidates(
        self, query: ranking.Query, after: int, high: int, window: int | None
    ) -> list[Candidate]:
        """Ranked candidates (seq, window, score, (seq, 0)), best first."""
        dfs = {t: self.df[t] for t in query.terms if self.df.get(t)}
        if not dfs:
            return []
        kept, per_term, examine = ranking.postings_plan(dfs)
        if window is not None:  # a window is the seq range up to the next boundary
            after = max(after, window)
            i = bisect.bisect_right(self.wins, window)
            if i < len(self.wins):
                high = min(high, self.wins[i] - 1)
        found: dict[int, dict[str, int]] = {}
        for t in kept:
            postings = self.postings[t]
            if t in self.dirty:
                postings.sort()
                self.dirty.discard(t)
            taken = 0
            for _imp, neg, tf in postings[:examine]:
                if after < -neg <= high:
                    found.setdefault(-neg, {})[t] = tf
                    taken += 1
                    if taken >= per_term:
                        break
        corpus = ranking.Corpus(len(self.docs), self.total, dfs)
        q = ranking.Query(tuple(kept), query.phrases)
        by = {seq: self._doc(seq, found, kept) for seq in sorted(found)}
        stage = ranking.widen(list(by.values()), q, corpus)

        # The widened hits, the rows just before and after each in range
        # (their neighbours) and theirs: what the file engine reads.
        def links(seq: int) -> tuple[int, int]:
            i = bisect.bisect_left(self.order, seq)
            prev = self.order[i - 1] if i > 0 else 0
            nxt = self.order[i + 1] if i + 1 < len(self.order) else 0
            return (prev if prev > after else 0, nxt if nxt <= high else 0)

        near = {seq: links(seq) for seq in stage.wide}
        for seq in {n for pair in near.values() for n in pair if n} - near.keys():
            near[seq] = links(seq)
        for seq in sorted({n for pair in near.values() for n in pair if n} - by.keys()):
            by[seq] = self._doc(seq, found, kept)
        for seq, (prev, nxt) in near.items():
            by[seq].prev, by[seq].next = prev, nxt
        docs = [by[s] for s in sorted(by)]
        return [(s, self.docs[s][0], score, (s, 0))
                for s, score in ranking.rank(docs, q, corpus, found, stage=stage)]

    def _doc(self, seq: int, found: dict[int, dict[str, int]], kept: list[str]) -> ranking.Doc:
        """What ranking needs of row ``seq``: its frequencies of the query terms
        (from its postings in ``found``, the rest from its entry)."""
        win, length, counts = self.docs[seq]
        tfs = found.get(seq, {})
        for t in kept:
            if t not in tfs and counts.get(t):
                tfs[t] = counts[t]
        return ranking.Doc(seq, win, length, tfs)
