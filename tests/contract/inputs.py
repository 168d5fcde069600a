"""Contract: what no engine accepts, refused the same way everywhere (issue 30,
cases 9 and 10): a batch id PostgreSQL cannot store (NUL, a lone surrogate),
a lone surrogate in any string of a row, a row nested 100,000 deep. Each is
one ``InvalidRow`` with the same message on every engine, and nothing is
stored. What every engine can store (a NUL inside any string of a row: rows
are stored as JSON bytes, where it is ``\\u0000``) round-trips unchanged."""

from __future__ import annotations

import re
from typing import Any

import pytest

from ledger import InvalidRow
from tests.contract.support import ContractBase, MakeStore
from tests.helpers import msg


def _deep(levels: int) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = [value]
    return value


def _tool_result(output: Any) -> dict[str, Any]:
    return {"role": "tool", "parts": [{"type": "tool_result", "id": "c1", "output": output}]}


# (where, the row): a lone surrogate in each kind of string field
_SURROGATE_ROWS = {
    "text": msg("a\udcff b"),
    "meta key": {**msg("x"), "meta": {"k\ud800": 1}},
    "meta value": {**msg("x"), "meta": {"k": ["\udfff"]}},
    "row id": {**msg("x"), "id": "r\ud800"},
    "unknown field": {**msg("x"), "extra": "\ud83d"},
    "tool input": {"role": "assistant", "parts": [
        {"type": "tool_call", "id": "c1", "name": "t", "input": {"q": "\ud800"}}]},
}


class InputContract(ContractBase):
    @pytest.mark.parametrize("bad", ["b\x00x", "\x00", "b\ud800", "\udfff" * 3])
    def test_a_batch_id_no_engine_can_store_is_refused(
        self, make_store: MakeStore, ws: str, bad: str,
    ) -> None:
        h = make_store().history(ws)
        with pytest.raises(InvalidRow) as info:
            h.append(msg("first"), batch_id=bad)
        assert re.fullmatch(r"batch_id .* holds (NUL \(U\+0000\)|a lone surrogate \(U\+D[89A-F]"
                            r"[0-9A-F]{2}\)), .*", str(info.value)), str(info.value)
        assert not h.exists()
        h.append(msg("kept"), batch_id="b-1")
        with pytest.raises(InvalidRow):
            h.append_many([msg("a"), msg("b")], batch_id=bad)
        assert [r.seq for r in h.rows()] == [1] and h.append(msg("n")).seqs == [2]

    @pytest.mark.parametrize("where", sorted(_SURROGATE_ROWS))
    def test_a_lone_surrogate_in_any_string_is_refused(
        self, make_store: MakeStore, ws: str, where: str,
    ) -> None:
        h = make_store().history(ws)
        with pytest.raises(InvalidRow) as info:
            h.append_many([msg("fine"), _SURROGATE_ROWS[where]])
        assert info.value.index == 1
        assert str(info.value).startswith("row 1: not encodable as JSON: ")
        assert "surrogates not allowed" in str(info.value)
        assert not h.exists()

    def test_nul_in_every_string_of_a_row_round_trips(self, make_store: MakeStore,
                                                       ws: str) -> None:
        h = make_store().history(ws)
        row = {"role": "assistant", "id": "r\x00id", "parts": [
            {"type": "text", "text": "a\x00b"},
            {"type": "tool_call", "id": "c\x00", "name": "n\x00", "input": {"k\x00": "v\x00"}}],
            "meta": {"m\x00": ["\x00"]}, "extra\x00": "\x00"}
        h.append(row, batch_id="batch-1")
        got = next(h.rows()).to_dict()
        assert {k: got[k] for k in row} == row
        assert next(h.rows()).batch["id"] == "batch-1"

    @pytest.mark.parametrize("where", ["tool output", "meta"])
    def test_a_row_nested_100000_deep_is_refused(
        self, make_store: MakeStore, ws: str, where: str,
    ) -> None:
        deep = _deep(100_000)
        row = _tool_result(deep) if where == "tool output" else {**msg("x"), "meta": {"d": deep}}
        h = make_store().history(ws)
        with pytest.raises(InvalidRow) as info:  # not a RecursionError
            h.append_many([msg("fine"), row])
        assert str(info.value) == ("row 1: nested deeper than 256 levels of arrays and objects "
                                   "(the limit for a row)")
        assert not h.exists()
