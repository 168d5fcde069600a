"""The unindexed tail of a file workspace's recall index: the rows the log
holds after the index's mark, read by this process and kept in memory, never
written (``ledger.storage.files.recall`` says when it is read and folded).

Why: bringing the SQLite index up to date after a small batch touches a
B-tree page per distinct term (about 50 a row) and commits; that cost 2.4-5x
the append itself. A ranked search instead reads the few rows after the mark
into a ``Tail`` and scores them with the index's rows, and the tail is folded
into the index in one transaction once it holds ``FOLD_ROWS`` rows or
``FOLD_BYTES`` bytes of lines.

The tail holds what the index would hold of its rows, and nothing else: each
row's window, length, line size and place and its term frequencies, the
boundaries, and the tool's own calls first seen here (``echo``); a query
term's document frequency and postings in the index's order
(``ranking.impact`` in thousandths, newest first among equals) are worked
out from those when a query asks. A ranked search adds its statistics to
the index's and merges its postings with the index's in that order, so it
finds and scores exactly what an index holding these rows would. Every row of
the tail comes after the index's mark, so after the privacy floor the index
starts at, and the tail is dropped with everything else when the floor, the
epoch or the layout changes. It is derived from the log and held only here:
a process that ends loses nothing, the next one reads the same rows again.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from ledger.core import ranking

FOLD_ROWS = 256  # documents held before the tail is folded into the index
FOLD_BYTES = 1 << 20  # bytes of lines read before it is folded


@dataclass(frozen=True)
class TailDoc:
    """One document of the tail: what a docs entry of the index holds."""

    seq: int
    window: int
    length: int
    size: int  # its line's bytes
    segment: int  # where its line was read
    offset: int
    tfs: Counter[str]


@dataclass
class Tail:
    """The rows after the index's mark (module doc). ``calls`` starts as the
    index's echo entries; ``new_calls`` are the ones the index has yet to
    store. ``seg_ends``: each segment read, the offset and hash of the last
    row line read there, the segment's stamp then and the mark's ``lines``
    (the sum of the line hashes read) up to that line. A term's document
    frequency and postings are worked out when a query first asks for the
    term (``postings_of``) and kept until more rows come: reading a row costs
    its terms and no more."""

    calls: set[str]
    docs: dict[int, TailDoc] = field(default_factory=dict)
    order: list[int] = field(default_factory=list)  # the seqs of ``docs``, ascending
    wins: list[int] = field(default_factory=list)  # boundaries (window names), ascending
    total: int = 0
    new_calls: list[str] = field(default_factory=list)
    seg_ends: dict[int, tuple[int, str, str, int]] = field(default_factory=dict)
    bytes: int = 0
    # term -> (documents looked at, its postings among them in the index's order)
    _postings: dict[str, tuple[int, list[tuple[int, int, int]]]] = field(default_factory=dict)

    def boundary(self, seq: int) -> None:
        self.wins.append(seq)

    def add(self, doc: TailDoc) -> None:
        self.docs[doc.seq] = doc
        self.order.append(doc.seq)
        self.total += doc.length

    def full(self) -> bool:
        return len(self.docs) >= FOLD_ROWS or self.bytes >= FOLD_BYTES

    def postings_of(self, term: str) -> list[tuple[int, int, int]]:
        """The term's postings (-impact, -seq, tf) in the index's order: as
        many as its document frequency in the tail."""
        seen, got = self._postings.get(term, (0, []))
        if seen < len(self.order):
            for seq in self.order[seen:]:
                d = self.docs[seq]
                n = d.tfs.get(term)
                if n:
                    got.append((-round(ranking.impact(n, d.length) * 1000), -seq, n))
            got.sort()
            self._postings[term] = (len(self.order), got)
        return got

    def next_window(self, window: int) -> int | None:
        """The first boundary after ``window`` in the tail, if any."""
        i = bisect.bisect_right(self.wins, window)
        return self.wins[i] if i < len(self.wins) else None

    def links(self, seq: int, after: int, high: int) -> tuple[int, int]:
        """The tail's documents just before and after ``seq`` within
        (after, high] (0: none in the tail)."""
        i = bisect.bisect_left(self.order, seq)
        prev = self.order[i - 1] if i > 0 else 0
        j = i + 1 if i < len(self.order) and self.order[i] == seq else i
        nxt = self.order[j] if j < len(self.order) else 0
        return (prev if prev > after else 0, nxt if 0 < nxt <= high else 0)

    def entry(self, seq: int, terms: Iterable[str], tfs: dict[str, int]) -> ranking.Doc:
        """What ranking needs of document ``seq``: ``tfs`` (its frequencies
        the postings gave) completed from its own counts for ``terms``."""
        d = self.docs[seq]
        for t in terms:
            if t not in tfs and d.tfs.get(t):
                tfs[t] = d.tfs[t]
        return ranking.Doc(seq, d.window, d.length, tfs)
