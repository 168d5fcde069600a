"""Privacy floors (DESIGN.md 2, 7, 8): nothing at or before the newest manual
reset -- or the newest line that may be one -- is ever retrievable.

Reset candidates are written into segments by hand (an untracked edit: the
receipt no longer matches, so the next query derives the floor from the
bytes): torn lines, ``\\u`` escapes, whitespace and control characters, the
legacy key, duplicate keys under a valid checksum, lines over 1 MiB. A
readable row whose text merely mentions a reset marker is not a floor.
The manual reset as a floor for every action, and rollovers and compactions
being crossable, are in the contract (tests/contract/windows.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ledger import History, Store
from ledger.core.format import rows as fmt
from ledger.storage.files import segments as segs
from tests.helpers import msg

RESULT_BYTES = 16 * 1024


def call(tool: Any, args: dict[str, Any]) -> dict[str, Any]:
    out = tool.call(args)
    assert len(out.encode("utf-8")) <= RESULT_BYTES
    return json.loads(out)


def follow(tool: Any, args: dict[str, Any], cursor: str | None = None) -> tuple[list[Any], str]:
    items: list[Any] = []
    for _ in range(1000):
        res = call(tool, args if cursor is None else {**args, "cursor": cursor})
        if "error" in res:
            return items, res["error"]["code"]
        items += res["items"]
        cursor = res["cursor"]
        if cursor is None:
            return items, ""
    raise AssertionError("cursor never ended")


def seqs(tool: Any, query: str = "tok", **extra: Any) -> list[int]:
    items, err = follow(tool, {"action": "search", "query": query, **extra})
    assert err == "", err
    return [i["seq"] for i in items]


def raw_append(h: History, data: bytes, *, new_segment: bool = False) -> None:
    """An untracked edit: bytes appended to the active segment (or a new one)."""
    numbers = segs.list_segments(h.engine.path)
    number = numbers[-1] + 1 if new_segment or not numbers else numbers[-1]
    with open(segs.segment_path(h.engine.path, number), "ab") as f:
        f.write(data)


def framed(obj_json: bytes) -> bytes:
    """A line with a valid checksum around hand-written JSON (duplicate keys,
    escapes: things the encoder never writes)."""
    return fmt.frame(obj_json)


def _reset_body(seq: int, kinds: bytes) -> bytes:
    return (
        b'{"seq":%d,"id":"r_hand",%s,"role":"system","parts":[],"partial":false,"meta":{},'
        b'"ts":1,"batch":{"id":"b_hand","n":1,"i":0}}' % (seq, kinds)
    )


def _flip_checksum(line: bytes) -> bytes:
    """The same line with its last checksum digit changed (same length)."""
    digit = line[-4:-3]
    assert line.endswith(b'"}\n') and digit in b"0123456789abcdef"
    return line[:-4] + (b"1" if digit == b"0" else b"0") + b'"}\n'


CANDIDATES: dict[str, Callable[[int], bytes]] = {
    "torn-tail": lambda s: b'{"seq":%d,"id":"r_t","kind":"reset","role":"sys' % s,
    "bad-checksum": lambda s: _flip_checksum(
        framed(_reset_body(s, b'"kind":"reset","reset":{"reason":"manual"}'))
    ),
    "escaped-key": lambda s: b'{"seq":%d,"\\u006bind":"reset","role":"system"}\n' % s,
    "escaped-key-upper-hex": lambda s: b'{"seq":%d,"\\u006Bi\\u006Ed":"reset"}\n' % s,
    "escaped-value": lambda s: b'{"seq":%d,"kind":"\\u0072es\\u0065t"}\n' % s,
    "whitespace-control": lambda s: b'{"seq":%d, \t"k\x01ind"\r :\x0b "re\x1fset" \t}\n' % s,
    "legacy-key": lambda s: b'{"seq":%d,"contextBoundaryKind":"reset","x":1}\n' % s,
    "no-braces-prefix": lambda s: b'"kind":"reset"\n',
    "dup-key-reset-last": lambda s: framed(_reset_body(s, b'"kind":"message","kind":"reset"')),
    "dup-key-reset-first": lambda s: framed(_reset_body(s, b'"kind":"reset","kind":"message"')),
    "escaped-key-valid-checksum": lambda s: framed(_reset_body(s, b'"\\u006bind":"reset"')),
    "over-1mib": lambda s: (
        b'{"seq":%d,"kind":"reset","pad":"' % s + b"x" * ((1 << 20) + 100) + b'"}\n'
    ),
    "over-1mib-valid-checksum": lambda s: framed(
        _reset_body(s, b'"kind":"reset","pad":"' + b"y" * ((1 << 20) + 100) + b'"')
    ),
}
UNREADABLE = [
    "torn-tail", "bad-checksum", "escaped-key", "escaped-key-upper-hex", "escaped-value",
    "whitespace-control", "legacy-key", "no-braces-prefix", "over-1mib",
]


def _before(h: History) -> list[int]:
    """Rows that must become unreachable: two windows' worth, a rollover and a
    compaction between them, over several segments."""
    out = h.append_many([msg(f"tok before {i}") for i in range(4)]).seqs
    out += h.rollover([msg("tok before trigger")]).seqs[2:]
    out += h.compact([msg("tok before summary")]).seqs[1:]
    out += h.append_many([msg(f"tok before {i} ü") for i in range(12)]).seqs
    return out


@pytest.mark.parametrize("name", sorted(CANDIDATES))
def test_reset_candidate_is_a_floor(tmp_path: Path, name: str) -> None:
    store = Store(tmp_path, durability="off", segment_bytes=2048)
    h = store.history("ws")
    before = _before(h)
    tool = h.session_history()
    assert seqs(tool) == before

    raw_append(h, CANDIDATES[name](before[-1] + 1))
    assert not h.snapshot().verified  # the receipt no longer matches
    # A new query derives the floor from the bytes: nothing before it.
    assert seqs(tool) == []
    items, err = follow(tool, {"action": "list", "limit": 50})
    assert err == "" and sum(w["rows"] for w in items) == 0
    for s in before:
        assert call(tool, {"action": "read", "seq": s})["error"]["code"] == "not_found"

    after = h.append_many([msg(f"tok after {i}") for i in range(3)]).seqs
    after += h.rollover([msg("tok after trigger")]).seqs[2:]
    after += h.append_many([msg(f"tok after {i} ß") for i in range(15)]).seqs
    assert seqs(tool) == after
    assert seqs(tool, limit=1) == after
    items, err = follow(tool, {"action": "list", "limit": 1})
    assert err == ""
    assert sum(w["rows"] for w in items) == len(after) + 1  # + the lead-in
    for s in (*before, *after[:3]):
        res = call(tool, {"action": "read", "seq": s})
        if s in before and s not in after:
            assert res["error"]["code"] == "not_found", s
        else:
            assert res["items"][0]["text"].startswith("tok after"), s


@pytest.mark.parametrize("torn", [True, False], ids=["torn", "complete"])
def test_candidate_alone_in_the_newest_segment_is_the_floor(tmp_path: Path, torn: bool) -> None:
    """The newest segment holds nothing but a reset candidate (a hand-made
    segment file), and an older segment holds a manual reset. The floor is
    the candidate, the newest one: the rows between the two are gone."""
    store = Store(tmp_path, durability="off", segment_bytes=1 << 20)
    h = store.history("ws")
    h.append_many([msg("tok very old")])
    h.clear_soft()
    between = h.append_many([msg(f"tok between {i}") for i in range(20)]).seqs
    tool = h.session_history()
    assert seqs(tool) == between
    line = b'{"seq":%d,"kind":"reset","role":"system"' % (between[-1] + 1)
    raw_append(h, line if torn else line + b"}\n", new_segment=True)
    items, err = follow(tool, {"action": "search", "query": "tok"})
    assert [i["seq"] for i in items] == []  # not one row of the older window
    assert err == ""
    assert call(tool, {"action": "read", "seq": between[0]})["error"]["code"] == "not_found"
    # The next tracked append publishes the derived floor in the receipt:
    # it must be the candidate's, or the leak becomes permanent.
    after = h.append(msg("tok after")).seqs
    items, err = follow(tool, {"action": "search", "query": "tok"})
    assert [i["seq"] for i in items] == after
    assert err == ""
    assert h.snapshot().floor.segment == 2  # type: ignore[union-attr]


@pytest.mark.parametrize("name", UNREADABLE)
def test_window_opened_by_an_unreadable_candidate_has_one_name(tmp_path: Path, name: str) -> None:
    """The window after an unreadable candidate is named once: ``list`` gives
    the name, ``list`` with that window and ``search`` with it work, and
    ``search`` / ``read`` items carry the same name."""
    store = Store(tmp_path, durability="off", segment_bytes=2048)
    h = store.history("ws")
    before = _before(h)
    raw_append(h, CANDIDATES[name](before[-1] + 1))
    after = h.append_many([msg(f"tok after {i}") for i in range(3)]).seqs
    tool = h.session_history()
    windows, err = follow(tool, {"action": "list"})
    assert err == "" and len(windows) == 1
    name_ = windows[0]["window"]
    assert windows[0]["rows"] == len(after)
    found, _ = follow(tool, {"action": "search", "query": "tok"})
    assert [(i["seq"], i["window"]) for i in found] == [(s, name_) for s in after]
    for s in after:
        assert call(tool, {"action": "read", "seq": s})["items"][0]["window"] == name_, s
    rows, err = follow(tool, {"action": "list", "window": name_})
    assert err == "" and [i["seq"] for i in rows] == after
    found, err = follow(tool, {"action": "search", "query": "tok", "window": name_})
    assert err == "" and [i["seq"] for i in found] == after


def test_a_row_that_mentions_a_reset_is_not_a_floor_derived_from_the_bytes(
    tmp_path: Path,
) -> None:
    """The rows of the contract's case (tests/contract/windows.py), then an
    untracked edit: the floor derived from the bytes ignores them too."""
    store = Store(tmp_path, durability="off", segment_bytes=512)
    h = store.history("ws")
    first = h.append_many([msg("tok first")]).seqs
    mentions = [
        '{"kind":"reset"}',
        '"kind" : "reset"',
        '{"contextBoundaryKind":"reset"}',
        '\\u006bind":"reset',
    ]
    ids = h.append_many([msg(f"tok {m}") for m in mentions]).seqs
    # Caller-written nested objects with the marker: not a top-level kind.
    nested = h.append_many([
        {"kind": "message", "role": "user", "meta": {"kind": "reset"},
         "parts": [{"type": "text", "text": "tok nested", "kind": "reset"}]},
        {"kind": "message", "role": "tool", "parts": [
            {"type": "tool_result", "id": "t1", "output": {"kind": "reset"}, "error": False}]},
    ]).seqs
    last = h.append_many([msg("tok last")]).seqs
    tool = h.session_history()
    raw_append(h, b"")
    os.utime(segs.segment_path(h.engine.path, segs.list_segments(h.engine.path)[-1]), ns=(1, 1))
    assert not h.snapshot().verified
    assert seqs(tool) == first + ids + nested[:1] + last
    assert seqs(tool, '"kind":"reset"') == [ids[0], nested[1]]
    listed, _ = follow(tool, {"action": "list"})
    assert [w["window"] for w in listed] == [0] and h.window == 0
