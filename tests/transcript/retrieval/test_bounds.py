"""The per-call bounds of ``session_history`` on the file engine (DESIGN.md 8).

- serialized result: ``<= 16 KiB`` with many unreadable lines as ``skipped``
  entries;
- bytes read from segments: at most 2 MiB per call (measured on ``os.pread``);
- a 5 MiB line is skipped across pages, mid-line;
- ``search`` finds text however the stored JSON escapes it (lines another
  writer left).

The bounds every engine keeps (16 KiB, 500 rows examined, lines over 1 MiB,
``read`` through a cursor, case folding, snippets) are in the contract:
tests/contract/bounds.py and retrieval.py.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from ledger import History, Store
from ledger.core.format import files as ffmt
from ledger.core.format import rows as fmt
from ledger.storage.files import segments as segs
from tests.helpers import msg

RESULT_BYTES = 16 * 1024
MIB = 1 << 20


def call(tool: Any, args: dict[str, Any]) -> dict[str, Any]:
    out = tool.call(args)
    assert len(out.encode("utf-8")) <= RESULT_BYTES, (args, len(out.encode("utf-8")))
    return json.loads(out)


def pages(tool: Any, args: dict[str, Any], most: int = 2000) -> Iterator[dict[str, Any]]:
    cursor = None
    for _ in range(most):
        res = call(tool, args if cursor is None else {**args, "cursor": cursor})
        assert "error" not in res, res
        yield res
        cursor = res["cursor"]
        if cursor is None:
            return
    raise AssertionError("cursor never ended")


def follow(tool: Any, args: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    items: list[Any] = []
    skipped: list[Any] = []
    for res in pages(tool, args):
        items += res["items"]
        skipped += res["skipped"]
    return items, skipped


@contextmanager
def segment_reads() -> Iterator[list[int]]:
    """Count bytes read from segment files through ``os.pread``."""
    real = os.pread
    box = [0]

    def pread(fd: int, n: int, offset: int) -> bytes:
        data = real(fd, n, offset)
        try:
            name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            name = ""
        if ffmt.segment_number(name) is not None:
            box[0] += len(data)
        return data

    os.pread = pread  # type: ignore[assignment]
    try:
        yield box
    finally:
        os.pread = real  # type: ignore[assignment]


# --- 16 KiB ----------------------------------------------------------------------


def test_skipped_entries_count_towards_16_kib(tmp_path: Path) -> None:
    """Matches that nearly fill a page, then many unreadable lines (each a
    ``skipped`` entry), then more matches: the page still fits 16 KiB."""
    store = Store(tmp_path, durability="off", segment_bytes=1 << 30)
    h = store.history("ws")
    big = "\x01" * 600 + "needle" + "\x02" * 600  # ~7.3 KB of JSON per snippet
    first = h.append_many([msg(big) for _ in range(7)]).seqs
    # Unreadable lines that mention the query: search must decode them (its
    # byte prefilter cannot rule them out), so each becomes a skipped entry.
    damaged = b"".join(
        b'{"seq":%d,"id":"r_dmg","kind":"message","role":"user","parts":[],"x":"needle",'
        b'"_c":"0000000000000000"}\n' % (100_000 + i)
        for i in range(300)
    )
    with open(segs.segment_path(h.engine.path, segs.list_segments(h.engine.path)[-1]), "ab") as f:
        f.write(damaged)
    last = h.append_many([msg("needle") for _ in range(3)]).seqs
    tool = h.session_history()
    items, skipped = follow(tool, {"action": "search", "query": "needle", "limit": 25})
    assert [i["seq"] for i in items] == first + last
    assert len(skipped) == 300


# --- 2 MiB read per call ----------------------------------------------------------------


@pytest.mark.parametrize("sealed", [False, True], ids=["active", "sealed"])
def test_at_most_2_mib_read_per_call(tmp_path: Path, sealed: bool) -> None:
    """A 5 MiB batch (one segment) after a rollover; every call of a fresh
    process-side History reads at most 2 MiB of segment bytes."""
    store = Store(tmp_path, durability="off", segment_bytes=1 << 16)
    h = store.history("ws")
    h.append(msg("tok first"))
    window = h.rollover([msg("tok trigger")]).seqs[0]
    h.append_many([msg(f"tok {i} " + "q" * 20_000) for i in range(260)])
    if sealed:
        h.append(msg("tok last"))
    calls = [
        {"action": "search", "query": "tok"},
        {"action": "search", "query": "nothing like it"},
        {"action": "search", "query": "tok", "window": window},
        {"action": "list"},
        {"action": "list", "window": window},
        {"action": "read", "seq": 150},
        {"action": "read", "seq": 4},
    ]
    over = []
    for args in calls:
        tool = Store(tmp_path).history("ws").session_history()  # nothing cached
        cursor = None
        for _ in range(20):
            with segment_reads() as n:
                res = call(tool, args if cursor is None else {**args, "cursor": cursor})
            assert "error" not in res, (args, res)
            if n[0] > 2 * MIB:
                over.append((args, n[0]))
            cursor = res["cursor"]
            if cursor is None:
                break
    assert over == []


# --- a 5 MiB line -----------------------------------------------------------------------------


def test_5_mib_line_is_skipped_across_pages(tmp_path: Path) -> None:
    store = Store(tmp_path, durability="off", segment_bytes=1 << 16, max_row_bytes=16 << 20)
    h = store.history("ws")
    first = h.append(msg("tok first")).seqs[0]
    big = h.append(msg("tok " + "x" * (5 * MIB))).seqs[0]
    after = h.append_many([msg(f"tok after {i}") for i in range(3)]).seqs
    size = len(h.get(big).line)  # type: ignore[union-attr]
    tool = h.session_history()
    for args in ({"action": "search", "query": "tok"}, {"action": "list", "window": 0}):
        got = list(pages(tool, args))
        assert len(got) >= 3  # 2 MiB per call: the line is crossed mid-line
        assert [i["seq"] for r in got for i in r["items"]] == [first, *after]
        assert [e for r in got for e in r["skipped"]] == [{"seq": big, "bytes": size}]
    # read may page across the line too; it ends with the line skipped, no error
    items, skipped = follow(tool, {"action": "read", "seq": big})
    assert items == [] and skipped == [{"seq": big, "bytes": size}]


# --- search: escapes -------------------------------------------------------------------------


def _append_escaped(h: History, text_json: bytes) -> int:
    """Append a row whose text is stored with \\u escapes (as another writer
    may have), then re-baseline so it is tracked."""
    seq = h.snapshot().next_seq
    body = (
        b'{"seq":%d,"id":"r_esc%d","kind":"message","role":"user","parts":[{"type":"text",'
        b'"text":"%s"}],"partial":false,"meta":{},"ts":1,"batch":{"id":"b_esc%d","n":1,"i":0}}'
        % (seq, seq, text_json, seq)
    )
    with open(segs.segment_path(h.engine.path, segs.list_segments(h.engine.path)[-1]), "ab") as f:
        f.write(fmt.frame(body))
    h.rebaseline()
    return seq


def test_search_finds_text_however_it_is_escaped(tmp_path: Path) -> None:
    store = Store(tmp_path, durability="off", segment_bytes=512)
    h = store.history("ws")
    plain = h.append(msg('He said "café"\nthen 漢字😀 ß\tΣ end')).seqs[0]
    esc = _append_escaped(
        h,
        b'He said \\"caf\\u00e9\\"\\nthen \\u6f22\\u5b57\\ud83d\\ude00 \\u00df\\t\\u03a3 end',
    )
    mixed = _append_escaped(h, b'He said \\u0022caf\\u00C9\\u0022\\u000athen x')
    assert h.get(esc).to_dict()["parts"][0]["text"] == h.get(plain).to_dict()["parts"][0]["text"]  # type: ignore[union-attr]
    h.append(msg("unrelated"))
    tool = h.session_history()

    def find(q: str) -> list[int]:
        items, _ = follow(tool, {"action": "search", "query": q})
        return [i["seq"] for i in items]

    assert find('"café"\nthen') == [plain, esc, mixed]
    assert find('SAID "CAFÉ"') == [plain, esc, mixed]
    assert find("漢字😀") == [plain, esc]
    assert find("\\u00e9") == []  # the escape is not the text
    assert find("caf\\") == []
    assert find("\tσ END") == [plain, esc]
    assert find("ss\tς") == [plain, esc]


