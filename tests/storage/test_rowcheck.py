"""The row engines' check (``ledger.storage.rowcheck``) on hostile stored
bytes: a tool part whose type is spelled through a JSON escape is paired
like any other (the file engine's check does the same,
``tests/storage/files/test_pairs.py``)."""

from __future__ import annotations

import pytest

from ledger.core.format import rows as fmt
from ledger.storage.primitives import StoredRow
from ledger.storage.rowcheck import verify_rows

ESCAPES = [b'"tool_', b'"tool\\u005f', b'"tool\\u005F', b'"\\u0074ool_',
           b'"\\u0074\\u006f\\u006f\\u006c\\u005f']


def _stored(seq: int, parts: bytes) -> StoredRow:
    body = (b'{"seq":%d,"id":"r%d","kind":"message","role":"assistant","parts":%s,'
            b'"batch":{"id":"b%d","n":1,"i":0}}' % (seq, seq, parts, seq))
    return StoredRow(seq, f"b{seq}", None, fmt.frame(body)[:-1])


@pytest.mark.parametrize("escape", ESCAPES)
def test_an_escaped_call_is_listed_open_and_an_escaped_result_answers(escape: bytes) -> None:
    call = b'[{"type":"tool_call","id":"x"},{"type":"tool_call","id":"y"}]'
    result = b'[{"type":"tool_result","id":"y"}]'
    rows = [_stored(1, call.replace(b'"tool_', escape)),
            _stored(2, result.replace(b'"tool_', escape))]
    out = verify_rows(rows)
    assert out.problems == []
    assert [(p.code, p.seq) for p in out.open_calls()] == [("open_tool_call", 1)]
    assert "'x'" in out.open_calls()[0].message
