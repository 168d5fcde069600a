"""A hypothesis state machine over appends, clears, rollovers, compactions and
``session_history`` queries (list / search / read with cursors), checked
against a plain in-memory model of the log.

Properties (DESIGN.md 2, 7, 8):

- no row at or before the newest privacy floor is ever returned, also through
  a cursor issued before a new floor appeared (that cursor is ``stale_cursor``);
- following cursors visits every eligible row exactly once, oldest first
  (search for a token present in every message row; list of windows; list of
  one window's rows), and each item names the window the row belongs to;
- a query's eligible rows are fixed by its first page: later appends are not
  exposed through its cursors, while rollovers and compactions keep it valid;
- ``read`` re-assembles a row's text exactly through its cursor.

Small segments (``segment_bytes=512``) put most batches in a segment of their
own, so every query crosses many segment files.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from ledger import Store

TOKEN = "tok"
RESULT_BYTES = 16 * 1024


@dataclass
class MRow:
    seq: int
    kind: str  # "message" | "reset" | "lead_in" | "hidden"
    text: str = ""
    role: str = "user"
    reason: str | None = None  # for resets


@dataclass
class OpenQuery:
    """A query whose first page was served and whose cursor is still open."""

    args: dict[str, Any]
    cursor: str
    floor_at_issue: int
    expected: list[Any]  # what the whole query must return, fixed at issue time
    got: list[Any] = field(default_factory=list)


class Model:
    def __init__(self) -> None:
        self.rows: list[MRow] = []

    @property
    def next_seq(self) -> int:
        return len(self.rows) + 1

    def floor(self) -> int:
        """Seq of the newest manual reset, or 0."""
        for r in reversed(self.rows):
            if r.kind == "reset" and r.reason == "manual":
                return r.seq
        return 0

    def window_of(self, seq: int) -> int:
        w = 0
        for r in self.rows[:seq]:
            if r.kind == "reset":
                w = r.seq
        return w

    def eligible(self, high: int | None = None) -> list[MRow]:
        """Rows after the floor up to ``high`` (every kind)."""
        high = len(self.rows) if high is None else high
        f = self.floor()
        return [r for r in self.rows if f < r.seq <= high]

    def visible(self, high: int | None = None) -> list[MRow]:
        return [r for r in self.eligible(high) if r.kind == "message"]

    def windows(self, high: int | None = None) -> list[dict[str, Any]]:
        """The expected items of ``list`` without ``window``."""
        rows = self.eligible(high)
        f = self.floor()
        out: list[dict[str, Any]] = []
        if f:
            cur: dict[str, Any] = {"window": f, "reason": "manual", "first_seq": f,
                                   "last_seq": f, "rows": 0}
        else:
            cur = {"window": 0, "reason": "start", "first_seq": -1, "last_seq": -1, "rows": 0}
        for r in rows:
            if r.kind == "reset":
                out.append(cur)
                cur = {"window": r.seq, "reason": r.reason, "first_seq": r.seq,
                       "last_seq": r.seq, "rows": 0}
                continue
            if cur["first_seq"] < 0:
                cur["first_seq"] = r.seq
            cur["last_seq"] = r.seq
            cur["rows"] += 1
        if cur["first_seq"] >= 0 or cur["rows"]:
            out.append(cur)
        for item in out:
            if item["first_seq"] < 0:
                item["first_seq"] = item["window"]
                item["last_seq"] = item["window"]
        return out


def _rows(draw_texts: list[str], hidden: list[bool]) -> list[dict[str, Any]]:
    rows = []
    for text, hide in zip(draw_texts, hidden, strict=True):
        if hide:
            # A rejected request's husk: an empty assistant record whose original
            # (holding the token) sits under meta.quarantine.
            rows.append({
                "kind": "message", "role": "assistant", "parts": [],
                "meta": {"quarantine": {"v": 1, "row": {
                    "kind": "message", "role": "user",
                    "parts": [{"type": "text", "text": f"{TOKEN} quarantined {text}"}]}}},
            })
        else:
            rows.append({"kind": "message", "role": "user",
                         "parts": [{"type": "text", "text": text}]})
    return rows


texts_st = st.lists(
    st.text(alphabet="abcXYZ éß漢😀\n\"\\", max_size=12).map(lambda s: f"{TOKEN} {s}"),
    min_size=1,
    max_size=4,
)


class RetrievalMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="tl-sm-")
        self.store = Store(self.tmp, durability="off", segment_bytes=512)
        self.h = self.store.history("ws")
        self.tool = self.h.session_history()
        self.model = Model()
        self.open: list[OpenQuery] = []

    def teardown(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    # --- helpers -------------------------------------------------------------

    def call(self, args: dict[str, Any]) -> dict[str, Any]:
        out = self.tool.call(args)
        assert len(out.encode("utf-8")) <= RESULT_BYTES
        res = json.loads(out)
        if "error" in res:
            assert set(res) == {"error"}
        else:
            assert set(res) == {"notice", "items", "skipped", "cursor"}
            assert res["skipped"] == []
            self.check_floor(res)
        return res

    def check_floor(self, res: dict[str, Any]) -> None:
        f = self.model.floor()
        for item in res["items"]:
            if "seq" in item:
                assert item["seq"] > f, f"row {item['seq']} at or before floor {f} returned"
            else:
                assert item["window"] >= f

    def follow(self, args: dict[str, Any], cursor: str | None = None) -> tuple[list[Any], str]:
        """All items of a query; ends with "" or the error code."""
        items: list[Any] = []
        pages = 0
        while True:
            a = dict(args)
            if cursor is not None:
                a["cursor"] = cursor
            res = self.call(a)
            if "error" in res:
                return items, res["error"]["code"]
            items.extend(res["items"])
            cursor = res["cursor"]
            pages += 1
            assert pages < 2000
            if cursor is None:
                return items, ""

    def expected_search(self, window: int | None, high: int | None = None) -> list[Any]:
        return [
            (r.seq, self.model.window_of(r.seq), r.text)
            for r in self.model.visible(high)
            if window is None or self.model.window_of(r.seq) == window
        ]

    def expected_rows(self, window: int, high: int | None = None) -> list[Any]:
        return [(r.seq, window, r.text) for r in self.model.visible(high)
                if self.model.window_of(r.seq) == window]

    @staticmethod
    def search_items(items: list[Any]) -> list[Any]:
        out = []
        for it in items:
            assert it["role"] == "user"
            out.append((it["seq"], it["window"], it["text"]))
        return out

    def retrievable_windows(self) -> list[int]:
        return [w["window"] for w in self.model.windows()]

    # --- writes ----------------------------------------------------------------

    @initialize(texts=texts_st)
    def first(self, texts: list[str]) -> None:
        self.append(texts, [False] * len(texts))

    @rule(texts=texts_st, data=st.data())
    def append(self, texts: list[str], hidden: list[bool] | Any = None, data: Any = None) -> None:
        if hidden is None:
            hidden = data.draw(st.lists(st.booleans(), min_size=len(texts), max_size=len(texts)))
        r = self.h.append_many(_rows(texts, hidden))
        start = self.model.next_seq
        assert r.seqs == list(range(start, start + len(texts)))
        for i, (text, hide) in enumerate(zip(texts, hidden, strict=True)):
            kind, role = ("hidden", "assistant") if hide else ("message", "user")
            self.model.rows.append(MRow(start + i, kind, text, role))

    @rule()
    def clear_soft(self) -> None:
        r = self.h.clear_soft()
        seq = self.model.next_seq
        assert r.seqs == [seq] and r.window == seq
        self.model.rows.append(MRow(seq, "reset", reason="manual"))

    @rule(texts=st.lists(texts_st.map(lambda t: t[0]), max_size=2))
    def rollover(self, texts: list[str]) -> None:
        r = self.h.rollover(_rows(texts, [False] * len(texts)))
        seq = self.model.next_seq
        assert r.seqs[0] == seq and r.window == seq
        self.model.rows.append(MRow(seq, "reset", reason="rollover"))
        self.model.rows.append(MRow(seq + 1, "lead_in", role="system"))
        for i, t in enumerate(texts):
            self.model.rows.append(MRow(seq + 2 + i, "message", t))

    @rule(texts=st.lists(texts_st.map(lambda t: t[0]), max_size=2))
    def compact(self, texts: list[str]) -> None:
        r = self.h.compact(_rows(texts, [False] * len(texts)))
        seq = self.model.next_seq
        assert r.seqs[0] == seq and r.window == seq
        self.model.rows.append(MRow(seq, "reset", reason="compaction"))
        for i, t in enumerate(texts):
            self.model.rows.append(MRow(seq + 1 + i, "message", t))

    # --- whole queries -----------------------------------------------------------

    @rule(limit=st.integers(1, 25))
    def search_all(self, limit: int) -> None:
        items, err = self.follow({"action": "search", "query": TOKEN.upper(), "limit": limit})
        assert err == ""
        assert self.search_items(items) == [(s, w, t) for s, w, t in self.expected_search(None)]

    @rule(limit=st.integers(1, 25), data=st.data())
    def search_window(self, limit: int, data: Any) -> None:
        wins = self.retrievable_windows()
        window = data.draw(st.sampled_from([*wins, self.model.floor() - 1, self.model.next_seq]))
        items, err = self.follow(
            {"action": "search", "query": TOKEN, "window": window, "limit": limit}
        )
        if window in wins:
            assert err == ""
            assert self.search_items(items) == self.expected_search(window)
        else:
            assert err == "not_found" and items == []

    @rule(limit=st.integers(1, 50))
    def list_windows(self, limit: int) -> None:
        items, err = self.follow({"action": "list", "limit": limit})
        assert err == ""
        assert items == self.model.windows()

    @rule(limit=st.integers(1, 25), data=st.data())
    def list_window_rows(self, limit: int, data: Any) -> None:
        wins = self.retrievable_windows()
        if not wins:
            return
        window = data.draw(st.sampled_from(wins))
        items, err = self.follow({"action": "list", "window": window, "limit": limit})
        assert err == ""
        got = [(it["seq"], it["window"], it["text"]) for it in items]
        assert got == self.expected_rows(window)
        assert all(it["truncated"] is False for it in items)

    @rule(data=st.data(), limit=st.integers(1, 7))
    def read_row(self, data: Any, limit: int) -> None:
        seq = data.draw(st.integers(0, self.model.next_seq))
        row = self.model.rows[seq - 1] if 1 <= seq <= len(self.model.rows) else None
        items, err = self.follow({"action": "read", "seq": seq, "limit": limit})
        if row is None or row.kind != "message" or seq <= self.model.floor():
            assert err == "not_found", (seq, row, err)
            return
        assert err == ""
        assert "".join(it["text"] for it in items) == row.text
        assert all(it["seq"] == seq and it["window"] == self.model.window_of(seq) for it in items)
        assert [it["truncated"] for it in items] == [True] * (len(items) - 1) + [False]

    # --- queries left open across writes --------------------------------------------

    @precondition(lambda self: len(self.open) < 4)
    @rule(data=st.data())
    def open_query(self, data: Any) -> None:
        kind = data.draw(st.sampled_from(["search", "list", "rows"]))
        if kind == "search":
            args: dict[str, Any] = {"action": "search", "query": TOKEN, "limit": 1}
            expected: list[Any] = self.expected_search(None)
        elif kind == "list":
            args = {"action": "list", "limit": 1}
            expected = self.model.windows()
        else:
            wins = self.retrievable_windows()
            if not wins:
                return
            w = data.draw(st.sampled_from(wins))
            args = {"action": "list", "window": w, "limit": 1}
            expected = self.expected_rows(w)
        res = self.call(args)
        assert "error" not in res
        got = self.norm(kind, res["items"])
        if res["cursor"] is None:
            assert got == expected
            return
        self.open.append(OpenQuery(args, res["cursor"], self.model.floor(), expected, got))

    @staticmethod
    def norm(kind: str, items: list[Any]) -> list[Any]:
        if kind == "list":
            return items
        return [(it["seq"], it["window"], it["text"]) for it in items]

    @precondition(lambda self: bool(self.open))
    @rule(data=st.data())
    def finish_query(self, data: Any) -> None:
        self.finish(self.open.pop(data.draw(st.integers(0, len(self.open) - 1))))

    def finish(self, q: OpenQuery) -> None:
        kind = "list" if q.args["action"] == "list" and "window" not in q.args else "rows"
        items, err = self.follow(q.args, q.cursor)
        if self.model.floor() != q.floor_at_issue:
            assert err == "stale_cursor"
            assert items == []
            return
        assert err == ""
        assert q.got + self.norm(kind, items) == q.expected

    @rule(data=st.data(), write=st.sampled_from(["append", "rollover", "compact", "clear"]))
    def query_across_write(self, data: Any, write: str) -> None:
        """Open a query, write once, finish it: the snapshot rule in one step."""
        before = len(self.open)
        self.open_query(data)
        if len(self.open) == before:
            return
        texts = data.draw(texts_st)
        if write == "append":
            self.append(texts, [False] * len(texts))
        elif write == "rollover":
            self.rollover(texts[:1])
        elif write == "compact":
            self.compact(texts[:1])
        else:
            self.clear_soft()
        self.finish(self.open.pop())

    @invariant()
    def receipt_matches_model(self) -> None:
        assert self.h.window == max(
            (r.seq for r in self.model.rows if r.kind == "reset"), default=0
        )


RetrievalMachine.TestCase.settings = settings(max_examples=25, stateful_step_count=30)
TestRetrievalMachine = RetrievalMachine.TestCase
