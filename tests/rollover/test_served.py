"""How a send's batch is served after the window (``Conversation``'s
``_served``): the same rows as the provider filter over the whole window and
the batch, also when only the batch is filtered (no tool result in it)."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ledger.core.toolpairs import pair
from ledger.core.windows import provider_rows
from ledger.rollover.conversation import _served, _without_open_calls

IDS = st.sampled_from(["a", "b", "c", 7])
PART = st.one_of(
    st.builds(lambda i: {"type": "tool_call", "id": i, "name": "f", "input": {}}, IDS),
    st.builds(lambda i, e: {"type": "tool_result", "id": i, "output": f"out {i}", "error": e},
              IDS, st.booleans()),
    st.builds(lambda t: {"type": "text", "text": t}, st.text(max_size=4)),
)
ROW = st.builds(
    lambda kind, role, parts: {"kind": kind, "role": role, "parts": parts},
    st.sampled_from(["message", "message", "message", "warning", "lead_in", "reset"]),
    st.sampled_from(["tool", "assistant", "assistant", "user"]),
    st.lists(PART, max_size=3),
)


@given(st.lists(ROW, max_size=10), st.lists(ROW, min_size=1, max_size=4))
def test_a_batch_is_served_as_the_filter_over_the_whole_window_serves_it(
        rows: list[dict[str, Any]], batch: list[dict[str, Any]]) -> None:
    view = [dict(r) for r in provider_rows(rows)]  # a view as Conversation holds one
    want = provider_rows([*copy.deepcopy(view), *copy.deepcopy(batch)])
    got = _served(view, batch)
    assert got == want
    assert [list(r) for r in got] == [list(r) for r in want]  # keys in order


def _tool_parts(row: dict[str, Any]) -> list[dict[str, Any]]:
    parts = row.get("parts")
    return [p for p in parts if isinstance(p, dict)
            and p.get("type") in ("tool_call", "tool_result")] if isinstance(parts, list) else []


@given(st.lists(ROW, max_size=12))
def test_the_view_and_the_pairing_agree_on_every_call_and_result(
        rows: list[dict[str, Any]]) -> None:
    """Lead-ins and warnings hold no call or result in the view (their tool
    parts are text), every result the view serves answers a call before it
    by the pairing rule ``Conversation`` counts open calls with, and a
    request without the open calls pairs every call with its result."""
    view = provider_rows(copy.deepcopy(rows))
    assert all(not _tool_parts(r) for r in view if r.get("kind", "message") != "message")
    p = pair(view)
    assert p.unmatched() == []
    request = _without_open_calls([dict(r) for r in view])
    called: list[str] = []
    answered: list[str] = []
    for r in request:
        for part in _tool_parts(r):
            if part["type"] == "tool_call":
                called.append(str(part["id"]))
            else:
                assert str(part["id"]) in called, "a result without its call before it"
                answered.append(str(part["id"]))
    assert sorted(called) == sorted(answered)
