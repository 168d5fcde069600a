"""Tool results whose call is in an earlier window, and calls of the active
window without a result: the ``tool_pair_split`` and ``open_tool_call``
notices of the file engine's check (nothing is lost, the provider view
serves such a result as user text).

The check's scan feeds every verified row to :class:`SplitPairs` in log
order, in the same pass that verifies it: on the fast path the rows come
already decoded as :class:`PairCheckRow` (the verification fields plus each
part's ``type`` and ``id``; every other field of a part is skipped, not
built), so the notice costs no second read or parse of the history. A chunk
whose parts do not decode that way (a hostile part that is not an object)
goes line by line, where a line that names a tool part or a reset is decoded
whole (:meth:`SplitPairs.line`).

The pairing rule is :mod:`ledger.core.toolpairs`'s (a result answers the
newest call with its id that has no result yet; a reset starts a new
window), applied as a stream so check reads the log once: the row engines'
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
    # call id -> seqs of its calls in the current window without a result yet
    # (what is left at the end: check's open_tool_call notices)
    waiting: dict[str, list[int]] = field(default_factory=dict)
    boundary: int = 0

    def rows(self, segment: int, base: int, lines: list[bytes], rows: list[Any]) -> None:
        """A verified chunk: ``rows`` decoded as PairCheckRow from ``lines``
        (each without its newline) read from offset ``base``."""
        # Only tool parts and resets matter: list them in one comprehension
        # (most rows hold neither), then walk that short list in order.
        hits = [(i, r.seq, t, p.id) for i, r in enumerate(rows) if r.parts
                for p in r.parts if (t := p.type) == "tool_call" or t == "tool_result"]
        resets = {i for i, r in enumerate(rows) if r.kind == "reset"}
        if resets:  # a reset row's own parts do not count; the reset does
            hits = [h for h in hits if h[0] not in resets]
            hits.extend((i, rows[i].seq, "reset", None) for i in resets)
            hits.sort(key=lambda h: h[0])
        calls, waiting, earlier = self.calls, self.waiting, self.earlier
        # Bytes before each line but its newlines, summed once a split needs an offset.
        before: list[int] | None = None
        for i, seq, t, cid in hits:  # _call and _answered, inlined
            key = str(cid)
            if t == "tool_call":
                calls[key] = seq
                open_ = waiting.get(key)
                if open_ is None:
                    waiting[key] = [seq]
                else:
                    open_.append(seq)
            elif t == "tool_result":
                open_ = waiting.get(key)
                if open_:
                    open_.pop()
                elif key not in calls and key in earlier:
                    if before is None:
                        before = list(accumulate(map(len, lines), initial=0))
                    self._split(segment, base + before[i] + i, seq, key)
            else:
                self._reset(seq)
                calls, waiting = self.calls, self.waiting

    def line(self, segment: int, offset: int, body: bytes, seq: int, kind: str) -> None:
        """One verified row of a chunk that went line by line (``body``: its
        checksummed JSON). Only a line that names a tool part is decoded."""
        if kind == "reset":
            self._reset(seq)
            return
        if b'"tool_' not in body:
            return
        try:
            row = fmt.with_headroom(_decode_whole, body)
        except (msgspec.DecodeError, RecursionError):
            return
        for raw in row.parts if isinstance(row.parts, list) else ():
            if not isinstance(raw, dict):
                continue
            t, cid = raw.get("type"), str(raw.get("id"))
            if t == "tool_call":
                self._call(cid, seq)
            elif t == "tool_result" and self._answered(cid) is False:
                self._split(segment, offset, seq, cid)

    def _call(self, cid: str, seq: int) -> None:
        self.calls[cid] = seq
        self.waiting.setdefault(cid, []).append(seq)

    def _answered(self, cid: str) -> bool | None:
        """A result for ``cid``: True when it answers an open call of this
        window (the newest with that id), False when its call is in an
        earlier window only (a split), None otherwise."""
        open_ = self.waiting.get(cid)
        if open_:
            open_.pop()
            return True
        if cid not in self.calls and cid in self.earlier:
            return False
        return None

    def _reset(self, seq: int) -> None:
        self.earlier.update(self.calls)
        self.calls = {}
        self.waiting = {}
        self.boundary = seq

    def _split(self, segment: int, offset: int, seq: int, cid: str) -> None:
        if len(self.found) >= MAX_LISTED:
            self.more += 1
            return
        self.found.append(Split(segment, offset, seq, cid, self.boundary, self.earlier[cid]))
