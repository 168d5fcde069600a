"""Tool results whose call is in an earlier window: the ``tool_pair_split``
notice of the file engine's check (nothing is lost, the provider view serves
such a result as user text).

The check's scan feeds every verified row to :class:`SplitPairs` in log
order, in the same pass that verifies it: on the fast path the rows come
already decoded as :class:`PairCheckRow` (the verification fields plus each
part's ``type`` and ``id``; every other field of a part is skipped, not
built), so the notice costs no second read or parse of the history. A chunk
whose parts do not decode that way (a hostile part that is not an object)
goes line by line, where a line that names a tool part or a reset is decoded
whole (:meth:`SplitPairs.line`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from ledger.core import format as fmt

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
        elif not self.earlier:
            # No earlier window: no result can be split, only calls are recorded.
            self.calls.update([(str(cid), seq) for _, seq, t, cid in hits if t == "tool_call"])
            return
        for i, seq, t, cid in hits:
            if t == "tool_call":
                self.calls[str(cid)] = seq
            elif t == "tool_result":
                key = str(cid)
                if key not in self.calls and key in self.earlier:
                    off = base + sum(len(line) + 1 for line in lines[:i])
                    self._split(segment, off, seq, key)
            else:
                self._reset(seq)

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
                self.calls[cid] = seq
            elif t == "tool_result" and cid not in self.calls and cid in self.earlier:
                self._split(segment, offset, seq, cid)

    def _reset(self, seq: int) -> None:
        self.earlier.update(self.calls)
        self.calls = {}
        self.boundary = seq

    def _split(self, segment: int, offset: int, seq: int, cid: str) -> None:
        if len(self.found) >= MAX_LISTED:
            self.more += 1
            return
        self.found.append(Split(segment, offset, seq, cid, self.boundary, self.earlier[cid]))
