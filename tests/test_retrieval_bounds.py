"""The per-call bounds of ``session_history`` at each edge (DESIGN.md 8).

- serialized result: ``len(call(...).encode("utf-8")) <= 16 KiB``, for big
  non-ASCII rows, control characters that JSON-escape to 6 bytes, and skipped
  lines;
- rows examined: at most 500 per call (resets, lead-ins and rejected rows count);
- bytes read from segments: at most 2 MiB per call (measured on ``os.pread``);
- a line of exactly 1 MiB is decoded, one of 1 MiB + 1 byte is not: it is
  listed under ``skipped`` as ``{"seq", "bytes"}`` and paging resumes past
  it, mid-line for a 5 MiB line;
- ``read`` re-assembles a 1 MB row of emoji and CJK exactly through its cursor;
- ``search`` is literal and case-insensitive with Unicode case folding and
  finds text however the stored JSON escapes it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from core_helpers import msg

from ledger import History, Store
from ledger.core import format as fmt
from ledger.core.rows import prepare_batch
from ledger.storage.files import segments as segs

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
        if fmt.segment_number(name) is not None:
            box[0] += len(data)
        return data

    os.pread = pread  # type: ignore[assignment]
    try:
        yield box
    finally:
        os.pread = real  # type: ignore[assignment]


def row_of_line_length(h: History, target: int, prefix: str = "tok ") -> dict[str, Any]:
    """A row whose stored line (without newline) is exactly ``target`` bytes
    when appended next, alone, with batch id ``b_fixed``."""
    seq = h.snapshot().next_seq if h.exists() else 1
    row = {"kind": "message", "role": "user", "id": "r_fixed", "ts": 1,
           "parts": [{"type": "text", "text": prefix}]}
    _, lines = prepare_batch([row], seq, "b_fixed", 1 << 30)
    pad = target - (len(lines[0]) - 1)
    assert pad >= 0
    row["parts"][0]["text"] = prefix + "z" * pad
    return row


def append_exact(h: History, target: int, prefix: str = "tok ") -> int:
    row = row_of_line_length(h, target, prefix)
    seq = h.append_many([row], batch_id="b_fixed").seqs[0]
    got = h.get(seq)
    assert got is not None and len(got.line) == target
    return seq


# --- 16 KiB ----------------------------------------------------------------------


def test_results_fit_16_kib_for_big_non_ascii_and_control_rows(tmp_path: Path) -> None:
    store = Store(tmp_path, durability="off", segment_bytes=1 << 16)
    h = store.history("ws")
    heavy = [
        "\x01\x1f" * 3000 + " tok " + "\x02" * 3000,  # 6 bytes each in JSON
        "😀" * 2000 + " TOK " + "漢字" * 2000,  # 4 and 3 bytes each
        '"\\' * 4000 + " tok " + "\u2028\u2029" * 1000,
        "é" * 30_000 + "tok",
    ]
    rows = [msg(heavy[i % len(heavy)]) for i in range(60)]
    seqs = h.append_many(rows).seqs
    tool = h.session_history()
    for limit in (1, 10, 25):
        items, _ = follow(tool, {"action": "search", "query": "tok", "limit": limit})
        assert [i["seq"] for i in items] == seqs
        for it in items:
            assert "tok" in it["text"].casefold()
            assert len(it["text"]) <= 320
            assert it["truncated"] is True
        items, _ = follow(tool, {"action": "list", "window": 0, "limit": limit})
        assert [i["seq"] for i in items] == seqs
        for it, row in zip(items, rows, strict=True):
            assert row["parts"][0]["text"].startswith(it["text"])
    for s in seqs[:4]:
        text = h.get(s).to_dict()["parts"][0]["text"]  # type: ignore[union-attr]
        got = "".join(i["text"] for r in pages(
            tool, {"action": "read", "seq": s, "limit": 16000}) for i in r["items"])
        assert got == text


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
    with open(segs.segment_path(h.path, segs.list_segments(h.path)[-1]), "ab") as f:
        f.write(damaged)
    last = h.append_many([msg("needle") for _ in range(3)]).seqs
    tool = h.session_history()
    items, skipped = follow(tool, {"action": "search", "query": "needle", "limit": 25})
    assert [i["seq"] for i in items] == first + last
    assert len(skipped) == 300


# --- rows examined -------------------------------------------------------------------


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
        if len(batch) == 3:
            flush()
    flush()
    return want


def test_at_most_500_rows_examined_per_call(tmp_path: Path) -> None:
    store = Store(tmp_path, durability="off", segment_bytes=512)
    h = store.history("ws")
    want = _fill(h, first_match=501, total=600)
    tool = h.session_history()
    args = {"action": "search", "query": "tok", "limit": 25}
    first = call(tool, args)
    assert first["items"] == []  # row 501 is the 501st row: not examined
    assert first["cursor"] is not None
    items, _ = follow(tool, args)
    assert [i["seq"] for i in items] == want
    assert len(want) >= 98 and want[0] == 501
    # list of windows and of one window's rows page on the same budget
    windows, _ = follow(tool, {"action": "list"})
    assert [(w["window"], w["rows"]) for w in windows] == [(0, 299), (300, 300)]
    assert call(tool, {"action": "list"})["cursor"] is not None


def test_500_rows_fit_one_call(tmp_path: Path) -> None:
    store = Store(tmp_path, durability="off", segment_bytes=512)
    h = store.history("ws")
    _fill(h, first_match=500, total=500)
    tool = h.session_history()
    res = call(tool, {"action": "search", "query": "tok"})
    assert [i["seq"] for i in res["items"]] == [500]
    assert res["cursor"] is None


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


# --- lines around 1 MiB -------------------------------------------------------------------


def test_line_of_exactly_1_mib_is_decoded(tmp_path: Path) -> None:
    store = Store(tmp_path, durability="off", segment_bytes=1 << 16, max_row_bytes=16 << 20)
    h = store.history("ws")
    h.append_many([msg(f"tok {i}") for i in range(3)])
    s = append_exact(h, MIB)
    h.append(msg("tok after"))
    tool = h.session_history()
    items, skipped = follow(tool, {"action": "search", "query": "tok"})
    assert [i["seq"] for i in items] == [1, 2, 3, s, s + 1] and skipped == []
    items, skipped = follow(tool, {"action": "list", "window": 0})
    assert [i["seq"] for i in items] == [1, 2, 3, s, s + 1] and skipped == []
    res = call(tool, {"action": "read", "seq": s, "limit": 10})
    assert res["items"][0]["text"] == "tok zzzzzz" and res["skipped"] == []


@pytest.mark.parametrize("extra", [1, 2, 100 * 1024])
def test_line_over_1_mib_is_skipped_not_decoded(tmp_path: Path, extra: int) -> None:
    store = Store(tmp_path, durability="off", segment_bytes=1 << 16, max_row_bytes=16 << 20)
    h = store.history("ws")
    h.append_many([msg(f"tok {i}") for i in range(3)])
    s = append_exact(h, MIB + extra)
    h.append(msg("tok after"))
    tool = h.session_history()
    want = [{"seq": s, "bytes": MIB + extra}]
    items, skipped = follow(tool, {"action": "search", "query": "tok"})
    assert [i["seq"] for i in items] == [1, 2, 3, s + 1]
    assert skipped == want
    items, skipped = follow(tool, {"action": "list", "window": 0})
    assert [i["seq"] for i in items] == [1, 2, 3, s + 1]
    assert skipped == want
    items, skipped = follow(tool, {"action": "read", "seq": s})
    assert items == [] and skipped == want


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


# --- read ----------------------------------------------------------------------------------


@pytest.mark.parametrize("limit", [None, 16000, 777])
def test_read_reassembles_a_1_mb_row_of_emoji_and_cjk(tmp_path: Path, limit: int | None) -> None:
    store = Store(tmp_path, durability="off", segment_bytes=1 << 16)
    h = store.history("ws")
    h.append(msg("hello"))
    unit = "😀漢字e\u0301\x01\"\\\n𝔘"
    stored = len(fmt.encode_json(unit)) - 2  # bytes per unit in the stored JSON
    text = (unit * (1_000_000 // stored))[:-3]
    s = h.append(msg(text)).seqs[0]
    assert 1_000_000 - 100 < len(h.get(s).line) < MIB  # type: ignore[union-attr]
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
    # An explicit offset starts anywhere, in code points.
    res = call(tool, {"action": "read", "seq": s, "offset": 5, "limit": 3})
    assert res["items"][0]["text"] == text[5:8]


# --- search: escapes and case folding --------------------------------------------------------


def _append_escaped(h: History, text_json: bytes) -> int:
    """Append a row whose text is stored with \\u escapes (as another writer
    may have), then re-baseline so it is tracked."""
    seq = h.snapshot().next_seq
    body = (
        b'{"seq":%d,"id":"r_esc%d","kind":"message","role":"user","parts":[{"type":"text",'
        b'"text":"%s"}],"partial":false,"meta":{},"ts":1,"batch":{"id":"b_esc%d","n":1,"i":0}}'
        % (seq, seq, text_json, seq)
    )
    with open(segs.segment_path(h.path, segs.list_segments(h.path)[-1]), "ab") as f:
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


@pytest.mark.parametrize(
    ("text", "query"),
    [
        ("Straße", "STRASSE"),
        ("STRASSE", "straße"),
        ("ΣΊΣΥΦΟΣ", "σίσυφος"),
        ("σίσυφος", "ΣΊΣΥΦΟΣ"),
        ("ὈΔΥΣΣΕΎΣ", "ὀδυσσεύς"),
        ("ﬁle", "FILE"),
        ("Kelvin K", "kelvin k"),
        ("ǅemal", "ǆEMAL"),
    ],
)
def test_search_folds_case_the_unicode_way(tmp_path: Path, text: str, query: str) -> None:
    store = Store(tmp_path, durability="off")
    h = store.history("ws")
    h.append(msg("unrelated"))
    s = h.append(msg(f"before {text} after")).seqs[0]
    res = call(h.session_history(), {"action": "search", "query": query})
    assert [(i["seq"], i["text"]) for i in res["items"]] == [(s, f"before {text} after")]


def test_search_snippet_is_about_300_code_points_around_the_match(tmp_path: Path) -> None:
    store = Store(tmp_path, durability="off")
    h = store.history("ws")
    texts = ["ß" * 400 + "NEEDLE" + "x" * 400, "a" * 1000 + "needle", "needle" + "b" * 1000,
             "ﬁ" * 700 + "needle" + "c" * 700]
    seqs = h.append_many([msg(t) for t in texts]).seqs
    res = call(h.session_history(), {"action": "search", "query": "needle"})
    assert [i["seq"] for i in res["items"]] == seqs
    for it, text in zip(res["items"], texts, strict=True):
        assert "needle" in it["text"].casefold()
        assert 250 <= len(it["text"]) <= 320 and it["text"] in text
        assert it["truncated"] is True
