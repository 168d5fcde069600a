"""Contract: the per-call bounds of ``session_history`` -- 16 KiB results,
500 rows examined, lines over 1 MiB skipped, a long row read back exactly
through its cursor (DESIGN.md 8)."""

from __future__ import annotations

from typing import Any

import pytest

from ledger import History
from ledger.core.bounds import RESULT_BYTES
from ledger.core.format import rows as fmt
from ledger.core.rows import prepare_batch
from tests.contract.support import ContractBase, MakeStore, call, follow, pages, skipped
from tests.helpers import msg

MIB = 1 << 20


def _fill(h: History, first_match: int, total: int) -> list[int]:
    """Lines 1..total where only lines >= first_match hold "tok"; a rollover
    (2 lines) and rejected rows sit among the first 500, which count too.
    Returns the seqs a search for "tok" must find."""
    line = 0
    want: list[int] = []
    batch: list[dict[str, Any]] = []

    def flush() -> None:
        if batch:
            h.append_many(list(batch))
            batch.clear()

    while line < total:
        if line == 299:
            flush()
            h.rollover([])
            line += 2
            continue
        text = "tok" if line + 1 >= first_match else "plain"
        if line % 97 == 5 and line + 1 < first_match + 50:
            batch.append({"kind": "message", "role": "assistant", "parts": [],
                          "meta": {"quarantine": {"v": 1, "row": msg("tok hidden")}}})
        else:
            batch.append(msg(f"{text} {line + 1}"))
            if text == "tok":
                want.append(line + 1)
        line += 1
        if len(batch) == 25:
            flush()
    flush()
    return want


def append_exact(h: History, target: int) -> int:
    """Append a row whose stored line (without newline) is ``target`` bytes."""
    seq = h.next_seq
    row = {"kind": "message", "role": "user", "id": "r_fixed", "ts": 1,
           "parts": [{"type": "text", "text": "tok "}]}
    _, encoded = prepare_batch([row], seq, "b_fixed", 1 << 30)
    row["parts"][0]["text"] = "tok " + "z" * (target - (len(encoded[0]) - 1))
    got_seq = h.append_many([row], batch_id="b_fixed").seqs[0]
    got = h.get(got_seq)
    assert got is not None and len(got.line) == target
    return got_seq


class BoundsContract(ContractBase):
    def test_pages_stay_within_the_result_bound_and_cover_everything(
        self, make_store: MakeStore, ws: str
    ) -> None:
        h = make_store().history(ws)
        big = "y" * 3000
        h.append_many([msg(f"needle {i} {big}") for i in range(60)])
        tool = h.session_history()
        got = list(pages(tool, {"action": "search", "query": "needle", "limit": 25}))
        assert [i["seq"] for r in got for i in r["items"]] == list(range(1, 61))
        assert len(got) > 1  # call() checked each page against 16 KiB

    def test_results_fit_16_kib_for_big_non_ascii_and_control_rows(
        self, make_store: MakeStore, ws: str
    ) -> None:
        h = make_store().history(ws)
        heavy = [
            "\x01\x1f" * 3000 + " tok " + "\x02" * 3000,  # 6 bytes each in JSON
            "😀" * 2000 + " TOK " + "漢字" * 2000,  # 4 and 3 bytes each
            '"\\' * 4000 + " tok " + "\u2028\u2029" * 1000,
            "é" * 30_000 + "tok",
        ]
        rows = [msg(heavy[i % len(heavy)]) for i in range(24)]
        s = h.append_many(rows).seqs
        tool = h.session_history()
        for limit in (1, 25):
            items = follow(tool, {"action": "search", "query": "tok", "limit": limit})
            assert [i["seq"] for i in items] == s
            for it in items:
                assert "tok" in it["text"].casefold() and len(it["text"]) <= 320
                assert it["truncated"] is True
            items = follow(tool, {"action": "list", "window": 0, "limit": limit})
            assert [i["seq"] for i in items] == s
            for it, row in zip(items, rows, strict=True):
                assert row["parts"][0]["text"].startswith(it["text"])
        for x in s[:4]:
            got = "".join(i["text"] for i in follow(tool, {"action": "read", "seq": x,
                                                            "limit": 16000}))
            assert got == rows[x - 1]["parts"][0]["text"]

    def test_at_most_500_rows_examined_per_call(self, make_store: MakeStore, ws: str) -> None:
        h = make_store(segment_bytes=4096).history(ws)
        want = _fill(h, first_match=501, total=600)
        tool = h.session_history()
        args = {"action": "search", "query": "tok", "limit": 25}
        first = call(tool, args)
        assert first["items"] == [] and first["cursor"] is not None  # row 501: not examined
        items = follow(tool, args)
        assert [i["seq"] for i in items] == want
        assert len(want) >= 98 and want[0] == 501
        # list of windows and of one window's rows page on the same budget
        windows = follow(tool, {"action": "list"})
        assert [(w["window"], w["rows"]) for w in windows] == [(0, 299), (300, 300)]
        assert call(tool, {"action": "list"})["cursor"] is not None

    def test_500_rows_fit_one_call(self, make_store: MakeStore, ws: str) -> None:
        h = make_store(segment_bytes=4096).history(ws)
        _fill(h, first_match=500, total=500)
        res = call(h.session_history(), {"action": "search", "query": "tok"})
        assert [i["seq"] for i in res["items"]] == [500]
        assert res["cursor"] is None

    def test_a_line_of_exactly_1_mib_is_decoded(self, make_store: MakeStore, ws: str) -> None:
        h = make_store(max_row_bytes=16 << 20).history(ws)
        h.append_many([msg(f"tok {i}") for i in range(3)])
        s = append_exact(h, MIB)
        h.append(msg("tok after"))
        tool = h.session_history()
        for args in ({"action": "search", "query": "tok"}, {"action": "list", "window": 0}):
            items, skips = skipped(tool, args)
            assert [i["seq"] for i in items] == [1, 2, 3, s, s + 1] and skips == []
        res = call(tool, {"action": "read", "seq": s, "limit": 10})
        assert res["items"][0]["text"] == "tok zzzzzz" and res["skipped"] == []

    @pytest.mark.parametrize("extra", [1, 100 * 1024])
    def test_a_line_over_1_mib_is_skipped_not_decoded(
        self, make_store: MakeStore, ws: str, extra: int
    ) -> None:
        h = make_store(max_row_bytes=16 << 20).history(ws)
        h.append_many([msg(f"tok {i}") for i in range(3)])
        s = append_exact(h, MIB + extra)
        h.append(msg("tok after"))
        tool = h.session_history()
        want = [{"seq": s, "bytes": MIB + extra}]
        for args in ({"action": "search", "query": "tok"}, {"action": "list", "window": 0}):
            items, skips = skipped(tool, args)
            assert [i["seq"] for i in items] == [1, 2, 3, s + 1] and skips == want, args
        assert skipped(tool, {"action": "read", "seq": s}) == ([], want)

    @pytest.mark.parametrize("limit", [None, 777])
    def test_read_reassembles_a_long_row_of_emoji_and_cjk(
        self, make_store: MakeStore, ws: str, limit: int | None
    ) -> None:
        h = make_store().history(ws)
        h.append(msg("hello"))
        unit = "😀漢字e\u0301\x01\"\\\n𝔘"
        stored = len(fmt.encode_json(unit)) - 2  # bytes per unit in the stored JSON
        text = (unit * (200_000 // stored))[:-3]
        s = h.append(msg(text)).seqs[0]
        tool = h.session_history()
        args: dict[str, Any] = {"action": "read", "seq": s}
        if limit is not None:
            args["limit"] = limit
        got = list(pages(tool, args))
        pieces = [r["items"][0]["text"] for r in got]
        assert "".join(pieces) == text
        assert all(len(p) <= (limit or 8000) for p in pieces)
        assert [r["items"][0]["truncated"] for r in got] == [True] * (len(got) - 1) + [False]
        assert all(r["items"][0]["seq"] == s and r["items"][0]["window"] == 0 for r in got)
        res = call(tool, {"action": "read", "seq": s, "offset": 5, "limit": 3})
        assert res["items"][0]["text"] == text[5:8]  # an explicit offset, in code points
        assert len(pieces) > 1 and RESULT_BYTES == 16 * 1024
