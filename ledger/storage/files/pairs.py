"""Tool results whose call is in an earlier window, and calls of the active
window without a result: the ``tool_pair_split`` and ``open_tool_call``
notices of the file engine's check (nothing is lost, the provider view
serves such a result as user text).

The check's scan feeds every verified row to :class:`SplitPairs` in log
order, in the same pass that verifies it: on the fast path the rows come
already decoded with their ``parts`` as :class:`PairParts` (each part's
``type`` and ``id``; every other field of a part is skipped, not built), so
the notice costs no second read or parse of the history. A chunk whose parts
do not decode that way (a hostile part that is not an object) goes line by
line, where a line that names a tool part (raw, or possibly through a JSON
escape) or a reset is decoded whole (:meth:`SplitPairs.line`).

Nothing the notice keeps per row or per call is tracked by the garbage
collector: :class:`PairParts` is a ``gc=False`` struct, not a list (a list
per row, alive for a whole chunk, set off a young collection per chunk and
promoted survivors to the older generations), and an open call is an int,
not a list, until a second call with the same id is open
(bench/RESULTS.md, issue 31, checkfast).

The pairing rule is :mod:`ledger.core.toolpairs`'s (a result answers the
newest call with its id that has no result yet; a reset starts a new
window; only ``message`` rows hold calls and results, so a lead-in's or a
warning's tool parts pair with nothing, as the provider view serves them as
text), applied as a stream so check reads the log once: the row engines'
check (``ledger.storage.rowcheck``) calls ``toolpairs.pair`` on each window
instead (``tests/rollover/test_no_wedge.py`` checks the open-call notice on
files, memory and PostgreSQL alike).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

import msgspec

from ledger.core.format import rows as fmt

MAX_LISTED = 1000  # the scan's MAX_FINDINGS_PER_CODE


class PairPart(msgspec.Struct, gc=False):
    """What the notice reads of a part; every other field is skipped (not
    tracked by the garbage collector: decoded JSON holds no cycle)."""

    type: Any = None
    id: Any = None


class PairParts(msgspec.Struct, array_like=True, gc=False):
    """A row's ``parts`` array as the notice reads it: its first four parts
    (None where the array is shorter, or where a part is ``null``), and the
    fifth, undecoded, when there are more (``more``; then the notice reads
    the row's parts again whole, :meth:`SplitPairs.rows`). A part that is
    no object fails the decode (the chunk goes line by line)."""

    p0: PairPart | None = None
    p1: PairPart | None = None
    p2: PairPart | None = None
    p3: PairPart | None = None
    more: msgspec.Raw = msgspec.Raw()  # empty: at most four parts


class _WholeRow(msgspec.Struct):
    seq: int
    kind: str = "message"
    parts: Any = None


_decode_whole = msgspec.json.Decoder(_WholeRow).decode


@dataclass
class Split:
    """One result whose call is in an earlier window."""

    segment: int
    offset: int
    seq: int
    call_id: str
    boundary: int  # seq of the boundary that opened the result's window
    call_seq: int


@dataclass
class SplitPairs:
    """Tracks tool calls per window as rows stream by, in log order."""

    found: list[Split] = field(default_factory=list)
    more: int = 0  # found beyond MAX_LISTED
    calls: dict[str, int] = field(default_factory=dict)  # call id -> seq, current window
    earlier: dict[str, int] = field(default_factory=dict)  # call id -> seq, earlier windows
    # call id -> seq of its call in the current window without a result yet,
    # or the seqs (oldest first) when more than one call with that id is open
    # (what is left at the end: check's open_tool_call notices, open_calls)
    waiting: dict[str, int | list[int]] = field(default_factory=dict)
    boundary: int = 0

    def open_calls(self) -> dict[str, list[int]]:
        """Call id -> seqs of the calls of the current window that have no
        result (oldest first)."""
        return {cid: [v] if isinstance(v, int) else list(v)
                for cid, v in self.waiting.items() if isinstance(v, int) or v}

    def rows(self, segment: int, base: int, lines: list[bytes], rows: list[Any]) -> None:
        """A verified chunk: ``rows`` decoded from ``lines`` (each with its
        newline) read from offset ``base``, each with ``seq``, ``kind`` and
        ``parts`` (:class:`PairParts` or None)."""
        calls, waiting, earlier = self.calls, self.waiting, self.earlier
        # Bytes before each line, summed once a split needs an offset.
        before: list[int] | None = None
        for i, r in enumerate(rows):
            h = r.parts
            if (h is None or h.p1 is not None or h.p2 is not None or h.p3 is not None
                    or h.more or r.kind != "message"):
                # Rare: no parts, two or more, or a row of another kind (whose
                # parts do not count; a reset starts a window).
                parts = self._row(lines[i], r)
                if not parts:
                    calls, waiting, earlier = self.calls, self.waiting, self.earlier  # a reset
                    continue
            else:
                p = h.p0
                if p is None:
                    continue
                t = p.type
                if t == "tool_call":  # _call, inlined
                    key = str(p.id)
                    calls[key] = r.seq
                    w = waiting.get(key)
                    if w is None:
                        waiting[key] = r.seq
                    else:
                        self._also_open(key, w, r.seq)
                elif t == "tool_result":  # _answered, inlined for one open call
                    key = str(p.id)
                    w = waiting.pop(key, None)
                    if w is None:
                        if key not in calls and key in earlier:
                            if before is None:
                                before = list(accumulate(map(len, lines), initial=0))
                            self._split(segment, base + before[i], r.seq, key)
                    elif not isinstance(w, int):
                        self._answer_newest(key, w)
                continue
            for t, cid in parts:
                if t == "tool_call":
                    self._call(str(cid), r.seq)
                elif t == "tool_result" and self._answered(key := str(cid)) is False:
                    if before is None:
                        before = list(accumulate(map(len, lines), initial=0))
                    self._split(segment, base + before[i], r.seq, key)

    def _row(self, line: bytes, r: Any) -> list[tuple[Any, Any]]:
        """The (type, id) of each part of a row of a verified chunk that has
        no parts, more than one, or is not a message (then [], and a reset is
        applied)."""
        if r.kind != "message":
            if r.kind == "reset":
                self._reset(r.seq)
            return []
        h = r.parts
        if h is None:
            return []
        if not h.more:
            return [(p.type, p.id) for p in (h.p0, h.p1, h.p2, h.p3) if p is not None]
        # The parts past the fourth were not decoded: the row is read again.
        whole = fmt.with_headroom(_decode_whole, line)
        return _typed(whole.parts)

    def line(self, segment: int, offset: int, body: bytes, seq: int, kind: str) -> None:
        """One verified row of a chunk that went line by line (``body``: its
        checksummed JSON). Only a line that may name a tool part is decoded:
        one that spells ``"tool_`` raw, or holds a JSON escape that may spell
        it (``"tool\\u005fcall"`` decodes to ``tool_call``, as on the fast
        path)."""
        if kind != "message":
            if kind == "reset":
                self._reset(seq)
            return
        if b'"tool_' not in body and not fmt.may_spell_by_escape(body):
            return
        try:
            row = fmt.with_headroom(_decode_whole, body)
        except (msgspec.DecodeError, RecursionError):
            return
        for t, cid in _typed(row.parts):
            if t == "tool_call":
                self._call(str(cid), seq)
            elif t == "tool_result" and self._answered(key := str(cid)) is False:
                self._split(segment, offset, seq, key)

    def _call(self, cid: str, seq: int) -> None:
        self.calls[cid] = seq
        w = self.waiting.get(cid)
        if w is None:
            self.waiting[cid] = seq
        else:
            self._also_open(cid, w, seq)

    def _also_open(self, cid: str, w: int | list[int], seq: int) -> None:
        """A call with an id that already has an open call in this window."""
        if isinstance(w, int):
            self.waiting[cid] = [w, seq]
        else:
            w.append(seq)

    def _answer_newest(self, cid: str, w: list[int]) -> None:
        """A result for ``cid`` with ``w`` (popped from ``waiting``) open:
        it answers the newest; the others stay open."""
        w.pop()
        if w:
            self.waiting[cid] = w

    def _answered(self, cid: str) -> bool | None:
        """A result for ``cid``: True when it answers an open call of this
        window (the newest with that id), False when its call is in an
        earlier window only (a split), None otherwise."""
        w = self.waiting.pop(cid, None)
        if w is not None:
            if not isinstance(w, int):
                self._answer_newest(cid, w)
            return True
        if cid not in self.calls and cid in self.earlier:
            return False
        return None

    def _reset(self, seq: int) -> None:
        if self.earlier:
            self.earlier.update(self.calls)
        else:  # the first window's calls (most of a long history's): not copied
            self.earlier = self.calls
        self.calls = {}
        self.waiting = {}
        self.boundary = seq

    def _split(self, segment: int, offset: int, seq: int, cid: str) -> None:
        if len(self.found) >= MAX_LISTED:
            self.more += 1
            return
        self.found.append(Split(segment, offset, seq, cid, self.boundary, self.earlier[cid]))


def _typed(parts: Any) -> list[tuple[Any, Any]]:
    """(type, id) of each part of a row's decoded ``parts`` that is an
    object (anything else is no tool part)."""
    if not isinstance(parts, list):
        return []
    return [(p.get("type"), p.get("id")) for p in parts if isinstance(p, dict)]
