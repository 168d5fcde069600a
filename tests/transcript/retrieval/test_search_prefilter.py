"""The byte-level search prefilter never hides a match (it is only a shortcut)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger import Store
from ledger.core.searchable import row_text
from ledger.transcript import retrieval
from ledger.transcript.retrieval.text import ASCII_FOLDERS


def test_ascii_folders_are_exactly_the_folding_non_ascii_characters() -> None:
    expected = {
        chr(c).encode("utf-8")
        for c in range(0x80, sys.maxunicode + 1)
        if not 0xD800 <= c < 0xE000 and any(ord(x) < 128 for x in chr(c).casefold())
    }
    assert set(ASCII_FOLDERS) == expected


ALPHABET = st.sampled_from(list("abcSTRASE ß\u017f\u212aK\"\\/\n\t\x1bé✓😀ﬁfi"))


def _search_all(tool, query: str) -> list[int]:
    seqs, cursor = [], None
    while True:
        args = {"action": "search", "query": query, "limit": 25}
        if cursor:
            args["cursor"] = cursor
        res = json.loads(tool.call(args))
        seqs += [i["seq"] for i in res["items"]]
        cursor = res["cursor"]
        if cursor is None:
            return seqs


@given(
    texts=st.lists(st.text(ALPHABET, max_size=40), min_size=1, max_size=40),
    query=st.text(st.sampled_from(list("abcstrase kfi[]{")), min_size=1, max_size=5),
)
def test_prefilter_finds_exactly_what_a_full_decode_finds(
    tmp_path_factory: pytest.TempPathFactory, texts: list[str], query: str
) -> None:
    root: Path = tmp_path_factory.mktemp("pf")
    h = Store(root, durability="off", segment_bytes=512).history("ws")
    for i, t in enumerate(texts):
        if i % 7 == 3:
            h.rollover([{"role": "user", "parts": [{"type": "text", "text": t}]}])
        elif i % 5 == 1:
            # a settled tool step (a rollover never splits a call from its result)
            h.append_many([
                {"role": "assistant", "parts": [
                    {"type": "tool_call", "id": "c", "name": t or "n", "input": {"k": t}}]},
                {"role": "tool", "parts": [{"type": "tool_result", "id": "c", "output": t}]},
            ])
        elif i % 5 == 2:
            h.append({"role": "user", "parts": [
                {"type": "media", "mime": "image/png", "data": "AAAA"},
                {"type": "text", "text": t}]})
        else:
            h.append({"role": "user", "parts": [{"type": "text", "text": t}]})
    tool = h.session_history()
    expected = [
        r.seq for r in h.rows()
        if r.kind == "message"
        and query.casefold() in row_text(r.to_dict()).casefold()
    ]
    assert _search_all(tool, query) == expected
    original = retrieval.ascii_prefilter
    try:
        retrieval.ascii_prefilter = lambda q: None  # type: ignore[assignment]
        assert _search_all(tool, query) == expected
    finally:
        retrieval.ascii_prefilter = original
