"""The provider view on the file engine (DESIGN.md 7): reading it costs
O(window) segments, not O(history), and an untracked reset candidate ends
it. What the view holds on every engine is in the contract
(tests/contract/windows.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from ledger import History, Store
from ledger.core.format import files as ffmt
from ledger.storage.files import segments as segs
from tests.helpers import msg


def view(h: History) -> list[dict[str, Any]]:
    return [r.to_dict() for r in h.provider_view()]


def texts(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for r in rows:
        for p in r["parts"]:
            if p.get("type") == "text":
                out.append(p["text"])
            elif p.get("type") == "tool_call":
                out.append(f"call:{p['id']}")
            elif p.get("type") == "tool_result":
                out.append(f"result:{p['id']}")
    return out



def test_view_reads_only_the_window(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # keep many small segments
    monkeypatch.setattr("ledger.storage.files.workspace.AUTO_MIN_SEALED", 1 << 30)
    h = Store(tmp_path, durability="off", segment_bytes=1024).history("ws")
    for i in range(40):
        h.append_many([msg(f"old {i} {j}") for j in range(4)])
    r = h.rollover([msg("trigger")])
    after = [h.append(msg(f"new {i}")).seqs[0] for i in range(12)]
    numbers = segs.list_segments(h.engine.path)
    assert len(numbers) > 20
    window_seg = h.get(r.seqs[0]).segment  # type: ignore[union-attr]
    assert window_seg > numbers[0] + 15

    opened: list[int] = []
    real_open = os.open

    def spy(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        n = ffmt.segment_number(os.path.basename(os.fspath(path)))
        if n is not None:
            opened.append(n)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", spy)
    rows = h.window_rows()
    got = view(h)
    monkeypatch.undo()
    assert opened and min(opened) >= window_seg, sorted(set(opened))
    assert [row.seq for row in rows] == [r.seqs[1], r.seqs[2], *after]
    assert texts(got)[1:] == ["trigger"] + [f"new {i}" for i in range(12)]


def test_view_after_an_untracked_reset_candidate(tmp_path: Path) -> None:
    h = Store(tmp_path, durability="off", segment_bytes=1 << 20).history("ws")
    h.append_many([msg(f"old {i}") for i in range(5)])
    path = segs.segment_path(h.engine.path, segs.list_segments(h.engine.path)[-1])
    with open(path, "ab") as f:
        f.write(b'{"seq":6,"\\u006bind":"reset"}\n')
    assert view(h) == []
    h.append_many([msg("new 1"), msg("new 2")])
    assert texts(view(h)) == ["new 1", "new 2"]


