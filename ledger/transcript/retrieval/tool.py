"""The ``session_history`` tool: the page protocol that binds cursors to what
the engine's reader reports, and the three actions (its schema and argument
checks: ``ledger.transcript.retrieval.args``).

Scope: the calling workspace, rows after the privacy floor (every window after
it, the active one included), and only while retrieval is enabled. Oldest
first. A query's eligible rows are fixed by its first page: rows after the
floor up to the end of the log at that moment. The engine's reader enforces
the per-call read bounds (``ledger.core.bounds``); every page validates the
state under the shared lock before and after it reads.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, Protocol

import msgspec

from ledger.core import cursors, ranking, semantic
from ledger.core.bounds import SCAN_ROWS, Budget, Event
from ledger.core.cursors import SEEKING, CursorData, ListState, Position
from ledger.core.errors import (
    BadRequest,
    CursorExpired,
    LedgerError,
    NotFound,
    RetrievalDisabled,
    Unavailable,
)
from ledger.core.format import rows as fmt
from ledger.core.redact import redact
from ledger.core.searchable import echo_calls, hidden, is_echo, row_text
from ledger.core.windows import window_marker
from ledger.storage.engine import (
    Candidate,
    Located,
    PageReader,
    PageScan,
    S,
    StoreOptions,
    WorkspaceEngine,
)
from ledger.transcript.retrieval.args import DESCRIPTION, PARAMETERS, Call, parse_call
from ledger.transcript.retrieval.results import (
    CURSOR_CODES,
    NOTICE,
    Result,
    error_code,
    error_result,
)
from ledger.transcript.retrieval.text import (
    SNIPPET,
    ascii_prefilter,
    fit_text,
    jlen,
    snippet,
)


class Bound(Protocol):
    """What the tool needs of the history it is bound to."""

    workspace: str
    store: StoreOptions
    engine: WorkspaceEngine


# One page of a call: (the reader's state, the result to fill, the cursor's
# data) -> the next page's cursor data, or None at the end.
Page = Callable[[S, Result, CursorData], CursorData | None]
# A row as a page of rows shows it, given its window (None: not shown).
ItemOf = Callable[[dict[str, Any], int], dict[str, Any] | None]
# The window a scan is in, moved by the resets it passes (one item).
WindowBox = list[int]

PREVIEW = 500  # code points of a row's text in a window's listing

RANKED_READS = 100  # rows read back from the log per ranked call, at most
_RANKED = -2  # Position.part of a ranked cursor: offset is the rank reached

_enc = msgspec.json.Encoder()


class Serves(Protocol):
    """One call's pages, served (``_Pages``, whatever its engine's state type)."""

    def serve(self, c: Call) -> dict[str, Any]: ...

    @property
    def reader(self) -> object:
        """The engine's page reader."""
        ...


class SessionHistory:
    """The retrieval tool bound to one workspace (DESIGN.md 8 and 12); the
    pages are ``_Pages``, over its engine's page reader (``WorkspaceEngine.
    pages``)."""

    name = "session_history"

    def __init__(self, history: Bound) -> None:
        self.history = history

        def bind(reader: PageReader[S]) -> Serves:
            return _Pages(history, reader)

        self._pages = history.engine.pages(bind)

    @property
    def reader(self) -> object:
        """The engine's page reader this tool reads with (its type is the
        engine's: for tests and benchmarks that look inside)."""
        return self._pages.reader

    def definition(self, api: str = "openai") -> dict[str, Any]:
        """The tool's schema for function calling, from one source."""
        params = copy.deepcopy(PARAMETERS)
        if api == "openai":
            return {
                "type": "function",
                "function": {"name": self.name, "description": DESCRIPTION, "parameters": params},
            }
        if api == "anthropic":
            return {"name": self.name, "description": DESCRIPTION, "input_schema": params}
        raise LedgerError(f"unknown API {api!r}: use 'openai' or 'anthropic'")

    def call(self, args: Any) -> str:
        """Run one call; never raises for bad arguments: problems come back as
        error results. Returns the JSON text the model gets."""
        try:
            result = self._guarded(args, raise_cursor_errors=False)
        except (LedgerError, OSError, ValueError, TypeError, RecursionError) as exc:
            # call() never raises: anything unforeseen is reported, not thrown.
            result = error_result("history_unavailable",
                                  redact(f"{type(exc).__name__}: {exc}", self.history.store.root))
        return _enc.encode(result).decode("utf-8")

    def list(
        self, window: int | None = None, cursor: str | None = None, limit: int | None = None
    ) -> dict[str, Any]:
        return self._method({"action": "list", "window": window, "cursor": cursor, "limit": limit})

    def search(
        self,
        query: str | Sequence[str],
        window: int | None = None,
        cursor: str | None = None,
        limit: int | None = None,
        mode: str | None = None,
        current: bool | None = None,
    ) -> dict[str, Any]:
        return self._method(
            {"action": "search", "query": query, "window": window, "cursor": cursor,
             "limit": limit, "mode": mode, "current": current}
        )

    def read(
        self,
        seq: int,
        offset: int | None = None,
        cursor: str | None = None,
        limit: int | None = None,
    ) -> dict[str, Any]:
        return self._method(
            {"action": "read", "seq": seq, "offset": offset, "cursor": cursor, "limit": limit}
        )

    def _method(self, args: dict[str, Any]) -> dict[str, Any]:
        return self._guarded({k: v for k, v in args.items() if v is not None},
                             raise_cursor_errors=True)

    def _guarded(self, args: Any, *, raise_cursor_errors: bool) -> dict[str, Any]:
        """The result of one call, with the errors of DESIGN.md 8 as error
        results; cursor errors raise instead when ``raise_cursor_errors``."""
        try:
            return self._dispatch(args)
        except LedgerError as exc:
            code = error_code(exc)
            if code is None or (raise_cursor_errors and code in CURSOR_CODES):
                raise
            return error_result(code, redact(str(exc), self.history.store.root))

    def _dispatch(self, args: Any) -> dict[str, Any]:
        if not self.history.store.retrieval:
            raise RetrievalDisabled(
                "session_history is disabled for this store (retention continues)"
            )
        return self._pages.serve(parse_call(args))


def _parsed(phrasings: tuple[str, ...]) -> list[ranking.Query]:
    """Each phrasing parsed (distinct ones once); BadRequest for one with no
    words."""
    out: list[ranking.Query] = []
    for i, text in enumerate(phrasings):
        q = ranking.parse_query(text)
        if q.empty:
            where = "'query'" if len(phrasings) == 1 else f"'query' item {i}"
            raise BadRequest(f"{where} has no words to rank by")
        if q not in out:
            out.append(q)
    return out


class _Pages(Generic[S]):
    """The page protocol over one engine's reader: ``S`` is the state type of
    that reader, which this only passes on."""

    def __init__(self, history: Bound, reader: PageReader[S]) -> None:
        self.history = history
        self.reader = reader

    def serve(self, c: Call) -> dict[str, Any]:
        return self._run(c.action, c.key, c.cursor, self._page(c), ranked=c.ranked)

    def _page(self, c: Call) -> Page[S]:
        """The function that fills one page of ``c``'s result."""
        query, window, limit = c.query, c.window, c.limit
        if c.action == "search":
            if c.ranked:
                current, phrasings = c.current, c.phrasings
                return lambda s, r, d: self._ranked(s, r, d, phrasings, window, limit, current)
            return lambda s, r, d: self._search(s, r, d, query, window, limit)
        if c.action == "list":
            if window is None:
                return lambda s, r, d: self._list_windows(s, r, d, limit)
            return lambda s, r, d: self._list_rows(s, r, d, window, limit)
        seq, offset = c.seq, c.offset
        return lambda s, r, d: self._read(s, r, d, seq, offset, limit)

    def _run(
        self, action: str, key: dict[str, Any], token: str | None, page: Page[S],
        ranked: bool = False,
    ) -> dict[str, Any]:
        h = self.history
        digest = cursors.args_digest(action, key)
        data: CursorData | None = None
        if token is not None:
            data = cursors.verify(token, h.workspace, action, digest)
        reader = self.reader
        if not reader.exists():
            if data is not None:
                raise CursorExpired("the history is gone; start a new query")
            if action == "read":
                raise NotFound("no such row")
            return {"notice": NOTICE, "items": [], "skipped": [], "cursor": None}
        if ranked:
            reader.prepare_ranked()  # an engine that writes its index outside the call's snapshot
        with reader.locked():
            st = reader.state()
            binding, floor_key = reader.binding(st), reader.floor_key(st)
            if data is not None and (data.binding != binding or data.floor != floor_key):
                if ranked:  # a ranking is not carried over a rewrite, a merge or a new floor
                    raise CursorExpired("the history changed since the first page; search again")
                data = reader.carry_over(data, st)
            if data is None:
                data = reader.fresh(st, action, digest)
            result = Result()
            next_data = page(st, result, data)
            after = reader.state()
            if reader.binding(after) != binding or reader.floor_key(after) != floor_key:
                raise Unavailable("the history changed during the read; retry")
        out: dict[str, Any] = {
            "notice": NOTICE,
            "items": result.items,
            "skipped": result.skipped,
            "cursor": cursors.issue(next_data) if next_data is not None else None,
        }
        return out

    def _scan(self, st: S, data: CursorData, start: Position | None = None) -> PageScan:
        return self.reader.scan(st, start or data.pos, data.end)

    def _events(
        self, scan: PageScan, data: CursorData, result: Result, window_box: WindowBox
    ) -> Iterator[tuple[Event, dict[str, Any]]]:
        """Eligible readable rows with their window; resets move the window.
        Unreadable lines and lines without an integer seq are listed under
        ``skipped``; the scan pauses before one that would not fit."""
        for ev in scan.events():
            if ev.oversized:
                result.add_skipped(ev.seq, ev.end - ev.offset - 1)
                continue
            row = ev.row
            seq = row.get("seq") if row is not None else None
            if row is None or not isinstance(seq, int) or isinstance(seq, bool):
                if row is None and fmt.line_may_be_reset(ev.line):
                    raise Unavailable(
                        "an unreadable line that may be a reset lies in range; run `tledger check`"
                    )
                entry = {"seq": fmt.seq_prefix(ev.line[:32]), "bytes": len(ev.line)}
                if not result.fits(entry):
                    scan.pause_at(Position(ev.part, ev.offset))
                    return
                result.add_skipped(entry["seq"], len(ev.line))
                continue
            if seq > data.high:
                scan.paused = None
                return
            if row.get("kind") == "reset" or fmt.readable_row_is_reset(ev.line, row):
                window_box[0] = seq
            yield ev, row

    def _next(
        self, data: CursorData, scan: PageScan, window: int, listing: ListState | None = None
    ) -> CursorData | None:
        if scan.paused is None:
            return None
        return msgspec.structs.replace(data, pos=scan.paused, window=window, listing=listing)

    def _search(
        self,
        st: S,
        result: Result,
        data: CursorData,
        query: str,
        window: int | None,
        limit: int,
    ) -> CursorData | None:
        folded = query.casefold()
        calls: set[str] = set()

        def item_of(row: dict[str, Any], in_window: int) -> dict[str, Any] | None:
            calls.update(echo_calls(row))
            if hidden(row) or is_echo(row, calls):
                return None
            found = snippet(row_text(row), folded)
            if found is None:
                return None
            text, cut = found
            return {"seq": row["seq"], "window": in_window, "role": row.get("role"),
                    "text": text, "truncated": cut}

        return self._rows(st, result, data, window, limit, item_of, ascii_prefilter(query))

    def _ranked(
        self,
        st: S,
        result: Result,
        data: CursorData,
        phrasings: tuple[str, ...],
        window: int | None,
        limit: int,
        current: bool = False,
    ) -> CursorData | None:
        """One page of a ranked search: the index's candidates (at most
        SCAN_ROWS postings) after the floor and up to the query's high-water
        mark, best first from the rank the cursor reached; without ``window``
        or ``current``, only up to the newest boundary (the rows after it are
        the model's provider view: in its context already; the cursor keeps
        that boundary, so a rollover between pages moves nothing); each row is read
        again from the log (RANKED_READS at most, all of them within one
        budget of SCAN_BYTES and SCAN_ROWS: the page ends before a row that
        would not fit) and must still be there, after the floor, shown
        content and not the tool's own echo. Several phrasings are ranked
        each and fused (``ranking.fuse``) into one ranking read back the same
        way; a row must hold the quoted phrases of a phrasing that found it."""
        qs = _parsed(phrasings)
        floor = self.reader.floor(st)
        if floor is not None and not floor.readable:
            raise Unavailable("the privacy floor is unreadable; run `tledger check`")
        after = floor.seq if floor is not None else 0
        if window is not None:
            self.reader.window_start(st, window)  # NotFound for no such window
        start = data.pos.offset if data.pos.part == _RANKED else 0
        high = data.high
        if window is None and not current:
            if data.pos.part != _RANKED:  # the first page: the view starts after this
                data = msgspec.structs.replace(data, window=self.reader.window_seq(st))
            high = min(high, data.window)
        ranked: list[Candidate] = []
        found_by: dict[int, list[ranking.Query]] = {}
        if high > after and len(qs) == 1:
            ranked = self.reader.ranked(st, qs[0], after, high, window)
        elif high > after:
            lists = [self.reader.ranked(st, q, after, high, window) for q in qs]
            seen: dict[int, Candidate] = {}
            for q, cands in zip(qs, lists, strict=True):
                for cand in cands:
                    seen.setdefault(cand[0], cand)
                    found_by.setdefault(cand[0], []).append(q)
            ranked = [(seq, seen[seq][1], score, seen[seq][3]) for seq, score in
                      ranking.fuse([[(c[0], c[2]) for c in cands] for cands in lists])]
        if self.history.store.embedder is not None and high > after:
            # the semantic channel (ledger.core.semantic): fused with the lexical one;
            # several phrasings are embedded as one text
            emb = self.history.store.embedder
            ranked = semantic.fuse(ranked, self.reader.similar(st, " ".join(phrasings), after,
                                                               high, window),
                                   semantic.weight(emb))
        if len(qs) > 1 or self.history.store.embedder is not None:
            self.reader.read_order([c[0] for c in ranked])
        at = start
        reads = 0
        budget = Budget()
        while at < len(ranked) and reads < RANKED_READS and budget.rows < SCAN_ROWS:
            seq, _win, score, hint = ranked[at]
            reads += 1
            first = budget.bytes_read == 0
            try:
                got = self.reader.locate_at(st, seq, hint, result, budget)
            except NotFound:
                got = Located()
            if got.resume is not None:
                if not first:
                    break  # the call's budget is spent: the next page reads it
                at += 1  # a row no one call can read back: never served from the index
                continue
            row = got.row
            if row is None:
                at += 1  # gone, oversized, unreadable or out of reach: never served from the index
                continue
            if (not self.reader.after_floor(st, got.part, got.offset) or hidden(row)
                    or is_echo(row, frozenset()) or row.get("seq") != seq):
                at += 1
                continue
            text = row_text(row)
            by = next((q for q in found_by.get(seq, qs) if ranking.has_phrases(text, q)), None)
            if by is None:
                at += 1
                continue
            centre = ranking.best_offset(text, by)
            begin = max(0, min(centre - SNIPPET // 3, len(text) - SNIPPET))
            piece = text[begin : begin + SNIPPET]
            item = {
                "seq": seq,
                "window": self.reader.window_of(st, got.part, got.offset),
                "role": row.get("role"),
                "text": piece,
                "truncated": begin > 0 or begin + len(piece) < len(text),
                "score": round(score, 3),
            }
            if not result.add_item(item):
                break
            at += 1
            if len(result.items) >= limit:
                break
        if at >= len(ranked):
            return None
        return msgspec.structs.replace(data, pos=Position(_RANKED, at))

    def _list_rows(
        self, st: S, result: Result, data: CursorData, window: int, limit: int
    ) -> CursorData | None:
        def item_of(row: dict[str, Any], in_window: int) -> dict[str, Any] | None:
            if hidden(row):
                return None
            text = row_text(row)
            preview = fit_text(text, 4096, PREVIEW)
            return {"seq": row["seq"], "window": in_window, "role": row.get("role"),
                    "text": preview, "truncated": len(preview) < len(text)}

        return self._rows(st, result, data, window, limit, item_of)

    def _rows(
        self,
        st: S,
        result: Result,
        data: CursorData,
        window: int | None,
        limit: int,
        item_of: ItemOf,
        prefilter: Callable[[bytes], bool] | None = None,
    ) -> CursorData | None:
        """One page of rows, oldest first (of ``window`` only, when given; a
        new query of a window starts where it does), each shown as
        ``item_of`` says, at most ``limit`` of them."""
        box = [data.window]
        start = None
        if window is not None and data.pos == self.reader.fresh_pos(st):
            start = self.reader.window_start(st, window)
            box = [window]
        scan = self._scan(st, data, start)
        scan.prefilter = prefilter
        for ev, row in self._events(scan, data, result, box):
            if window is not None and box[0] != window:
                if box[0] > window:
                    scan.paused = None
                    break
                continue
            item = item_of(row, box[0])
            if item is None:
                continue
            if not result.add_item(item):
                scan.pause_at(Position(ev.part, ev.offset))
                break
            if len(result.items) >= limit:
                scan.pause_at(Position(ev.part, ev.end))
                break
        return self._next(data, scan, box[0])

    def _list_windows(
        self, st: S, result: Result, data: CursorData, limit: int
    ) -> CursorData | None:
        cur = _unpack_listing(data)
        if cur is None:
            floor = self.reader.floor(st)
            if floor is not None:
                name = window_marker(floor)
                cur = ListState(name, "manual", name, name, 0)
            else:
                cur = ListState(0, "start", -1, -1, 0)
        scan = self._scan(st, data)
        box = [data.window]
        full = False
        for ev, row in self._events(scan, data, result, box):
            seq = int(row["seq"])
            if row.get("kind") == "reset":
                item = _window_item(cur)
                if cur.reason == "start" and not cur.rows:
                    pass  # a history that starts with a boundary has no window 0
                elif not result.add_item(item):
                    scan.pause_at(Position(ev.part, ev.offset))
                    full = True
                    box[0] = cur.window
                    break
                info = row.get("reset")
                reason = info.get("reason") if isinstance(info, dict) else "manual"
                cur = ListState(seq, str(reason), seq, seq, 0)
                if len(result.items) >= limit:
                    scan.pause_at(Position(ev.part, ev.end))
                    full = True
                    break
                continue
            first = cur.first_seq if cur.first_seq >= 0 else seq
            cur = ListState(cur.window, cur.reason, first, seq, cur.rows + 1)
        if scan.paused is None and not full:
            if cur.first_seq >= 0 or cur.rows:
                result.add_item(_window_item(cur))
            return None
        return self._next(data, scan, box[0], cur)

    def _read(
        self, st: S, result: Result, data: CursorData, seq: int, offset: int, chars: int
    ) -> CursorData | None:
        if seq > data.high or seq < 1:
            raise NotFound(f"no retrievable row {seq}")
        if data.pos.char > 0:
            offset = data.pos.char
        if data.pos.char == SEEKING:
            got = self.reader.seek(st, data.pos, seq, result)
        else:
            got = self.reader.locate(st, seq, result)
        if got.resume is not None:  # still seeking (a long line on the way)
            return msgspec.structs.replace(data, pos=got.resume)
        row = got.row
        if row is None:  # the row is an oversized line: listed under skipped
            return None
        number, line_offset = got.part, got.offset
        if not self.reader.after_floor(st, number, line_offset):
            raise NotFound(f"no retrievable row {seq}")
        if hidden(row):
            raise NotFound(f"row {seq} is not retrievable content")
        window = self.reader.window_of(st, number, line_offset)
        text = row_text(row)
        if offset > len(text):
            raise BadRequest(f"'offset' {offset} is past the end of row {seq} ({len(text)})")
        probe = {"seq": seq, "window": window, "role": row.get("role"), "text": "",
                 "truncated": True}
        room = result.room() - jlen(probe)
        piece = fit_text(text[offset:], room, chars)
        done = offset + len(piece) >= len(text)
        result.add_item({**probe, "text": piece, "truncated": not done})
        if done:
            return None
        return msgspec.structs.replace(
            data, pos=Position(number, line_offset, False, offset + len(piece))
        )


def _window_item(cur: ListState) -> dict[str, Any]:
    first = cur.first_seq if cur.first_seq >= 0 else cur.window
    last = cur.last_seq if cur.last_seq >= 0 else first
    return {
        "window": max(cur.window, 0),
        "reason": cur.reason,
        "first_seq": first,
        "last_seq": last,
        "rows": cur.rows,
    }


def _unpack_listing(data: CursorData) -> ListState | None:
    return data.listing

