"""How a send's batch is served after the window (``Conversation``'s
``_served``): the same rows as the provider filter over the whole window and
the batch, also when only the batch is filtered (no tool result in it)."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ledger.core.windows import provider_rows
from ledger.rollover.conversation import _served

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
