"""Bad input: a clear LedgerError naming the row, and nothing written."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from ledger import InvalidRow, LedgerError, Store
from ledger.cli import main
from ledger.core.format import rows as fmt
from tests.helpers import msg, segment_files, tree

BAD_ROWS: dict[str, Any] = {
    "not-an-object": ["hello"],
    "row-is-list": [["user", "hi"]],
    "no-role": {"kind": "message", "parts": []},
    "unknown-role": {"role": "robot", "parts": []},
    "role-wrong-type": {"role": 7, "parts": []},
    "role-unhashable": {"role": ["user"], "parts": []},
    "kind-unhashable": {"kind": {"k": 1}, "role": "user", "parts": []},
    "unknown-kind": {"kind": "shout", "role": "user", "parts": []},
    "caller-reset": {"kind": "reset", "role": "system", "parts": [], "reset": {"reason": "manual"}},
    "caller-reset-rollover": {"kind": "reset", "role": "system", "parts": [],
                              "reset": {"reason": "rollover"}},
    "caller-lead-in": {"kind": "lead_in", "role": "system", "parts": []},
    "caller-seq": msg(seq=5),
    "caller-batch": msg(batch={"id": "x", "n": 1, "i": 0}),
    "caller-checksum": msg(_c="0123456789abcdef"),
    "parts-not-list": {"role": "user", "parts": {"type": "text", "text": "x"}},
    "part-not-object": {"role": "user", "parts": ["text"]},
    "part-without-type": {"role": "user", "parts": [{"text": "x"}]},
    "text-part-without-text": {"role": "user", "parts": [{"type": "text"}]},
    "text-part-int-text": {"role": "user", "parts": [{"type": "text", "text": 3}]},
    "tool-call-without-name": {"role": "assistant", "parts": [{"type": "tool_call", "id": "c"}]},
    "tool-result-without-id": {"role": "tool", "parts": [{"type": "tool_result", "output": ""}]},
    "media-without-mime": {"role": "user", "parts": [{"type": "media", "url": "http://x"}]},
    "meta-not-object": msg(meta=[1]),
    "partial-not-bool": msg(partial=1),
    "ts-string": msg(ts="2024"),
    "ts-bool": msg(ts=True),
    "ts-float": msg(ts=1.5),
    "id-empty": msg(id=""),
    "id-int": msg(id=5),
    "nan": msg(meta={"x": math.nan}),
    "infinity": msg(meta={"x": math.inf}),
    "int-above-64-bits": msg(meta={"x": 2**64}),
    "int-below-int64": msg(meta={"x": -(2**63) - 1}),
    "non-string-key": msg(meta={1: "x"}),
    "tuple-value": msg(meta={"x": (1, 2)}),
    "bytes-value": msg(meta={"x": b"raw"}),
    "set-value": msg(meta={"x": {1}}),
    "lone-surrogate": msg("\ud800"),
}


def _rows_for(case: str) -> list[Any]:
    bad = BAD_ROWS[case]
    if isinstance(bad, list):
        return [msg("fine"), *bad]
    return [msg("fine"), bad]


@pytest.mark.parametrize("case", sorted(BAD_ROWS))
def test_bad_row_on_first_write_creates_nothing(store_root: Path, case: str) -> None:
    h = Store(store_root, durability="off").history("ws")
    with pytest.raises(InvalidRow) as info:
        h.append_many(_rows_for(case))
    assert info.value.index == 1, f"{case}: error does not name row 1: {info.value}"
    assert "row 1" in str(info.value)
    assert not store_root.exists(), f"{case}: the store root was created for a rejected batch"


@pytest.mark.parametrize("case", sorted(BAD_ROWS))
def test_bad_row_on_existing_history_writes_nothing(store_root: Path, case: str) -> None:
    h = Store(store_root, durability="off").history("ws")
    h.append(msg("before"))
    before = tree(store_root)
    with pytest.raises(InvalidRow):
        h.append_many(_rows_for(case))
    assert tree(store_root) == before


@pytest.mark.parametrize(
    "rows", [[], {}, "row", b"row", None, 5, {"role": "user"}], ids=repr
)
def test_rows_must_be_a_nonempty_list(store_root: Path, rows: Any) -> None:
    h = Store(store_root).history("ws")
    with pytest.raises(InvalidRow):
        h.append_many(rows)
    assert not store_root.exists()


@pytest.mark.parametrize("batch_id", ["", 5, "x" * 201, b"bid"], ids=repr)
def test_bad_batch_id(store_root: Path, batch_id: Any) -> None:
    h = Store(store_root).history("ws")
    with pytest.raises(LedgerError):
        h.append_many([msg()], batch_id=batch_id)
    assert not store_root.exists()


def test_bad_input_does_not_mutate_the_callers_rows(store_root: Path) -> None:
    h = Store(store_root, durability="off").history("ws")
    row = msg("keep", meta={"a": [1, {"b": 2}]})
    snapshot = repr(row)
    h.append(row)
    assert repr(row) == snapshot


@pytest.mark.parametrize("kind", [b"[]", b'{"k":1}', b'["warning"]', b"7"])
def test_a_stored_row_whose_kind_is_no_string_is_not_served(
        store_root: Path, kind: bytes, capsys: pytest.CaptureFixture[str]) -> None:
    """Hostile bytes behind the store's back: a framed, checksum-valid line
    whose ``kind`` is no string (an unhashable one once raised a plain
    TypeError from the view). It is no kind the view serves: the view, the
    window's tokens and the CLI's context and stat carry on without it."""
    h = Store(store_root, durability="off").history("ws")
    h.append_many([msg("hello"), msg("hi", role="assistant")])
    body = (b'{"seq":3,"id":"odd","kind":' + kind + b',"role":"user","parts":[{"type":'
            b'"text","text":"forged"}],"partial":false,"meta":{},"ts":1,'
            b'"batch":{"id":"odd","n":1,"i":0}}')
    with open(segment_files(store_root / "ws")[-1], "ab") as f:
        f.write(fmt.frame(body))
    view = Store(store_root).history("ws").provider_view()
    assert [r.seq for r in view] == [1, 2]
    for args in (["context", "ws"], ["stat", "ws"]):
        capsys.readouterr()
        assert main(["--root", str(store_root), *args]) == 0, capsys.readouterr().err
        assert "forged" not in capsys.readouterr().out
