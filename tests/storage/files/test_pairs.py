"""The split-pair and open-call notices of the file engine's check
(``ledger.storage.files.pairs``), gathered by the scan's one pass, against a
model of the pairing rule over the decoded rows: the same splits at the same
offsets and the same open calls, on the fast path, line by line, and across
chunk boundaries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.core.format import rows as fmt
from ledger.storage.files import scan
from ledger.storage.files.pairs import SplitPairs

_IDS = st.sampled_from(["a", "b", "c", 7, None])
_PART = st.one_of(
    st.fixed_dictionaries({"type": st.sampled_from(["tool_call", "tool_result"]), "id": _IDS}),
    st.fixed_dictionaries({"type": st.sampled_from(["tool_call", "tool_result"])}),  # no id
    st.just({"type": "text", "text": "tool_call"}),
    st.just({"id": "a"}),  # no type
    st.just({"type": "tool_result", "id": "b", "type ": "x"}),
)
# A hostile part (no object) sends its chunk line by line; null does not.
_ODD_PART = st.sampled_from([None, "tool_call", 3, ["tool_result", "a"]])
_PARTS = st.one_of(
    st.lists(_PART, max_size=6),  # past four, the row is read again whole
    st.lists(st.one_of(_PART, _ODD_PART), max_size=6),
    st.sampled_from([None, {"type": "tool_call", "id": "a"}, "tool_call"]),
)
# How a hostile writer may spell a part's "tool_..." type: JSON escapes that
# decode to the same string (None: as the store writes it).
ESCAPES = [
    None,
    b'"tool\\u005f',  # the underscore
    b'"tool\\u005F',  # upper-case hex
    b'"\\u0074ool_',  # the first letter
    b'"\\u0074\\u006f\\u006f\\u006c\\u005f',  # every letter
]
_ROW = st.one_of(
    st.tuples(st.sampled_from(["message", "message", "message", "warning"]), _PARTS,
              st.sampled_from(ESCAPES)),
    st.tuples(st.just("reset"), st.sampled_from([[], [{"type": "tool_call", "id": "a"}]]),
              st.sampled_from(ESCAPES)),
)


def _line(seq: int, kind: str, parts: Any, escape: bytes | None = None) -> bytes:
    row: dict[str, Any] = {"seq": seq, "id": f"r{seq}", "kind": kind, "role": "assistant"}
    if parts is not None:
        row["parts"] = parts
    if kind == "reset":
        row["reset"] = {"reason": "manual"}
    row["batch"] = {"id": f"b{seq}", "n": 1, "i": 0}
    line = fmt.encode_line(row)
    if escape is None:
        return line
    body = fmt.body_of(line[:-1])
    assert body is not None
    return fmt.frame(body.replace(b'"tool_', escape))


def _model(rows: list[tuple[int, int, str, Any]]) -> tuple[list[tuple[Any, ...]],
                                                          list[tuple[int, str]]]:
    """The pairing rule over decoded rows (offset, seq, kind, parts): a result
    answers the newest open call with its id in its window; one whose id was
    called in an earlier window only is a split; a reset starts a window and
    its own parts do not count, nor do a warning's (only message rows hold
    calls and results); a part that is no object is no tool part."""
    calls: dict[str, int] = {}
    earlier: dict[str, int] = {}
    waiting: dict[str, list[int]] = {}
    boundary = 0
    splits: list[tuple[Any, ...]] = []
    for offset, seq, kind, parts in rows:
        if kind == "reset":
            earlier.update(calls)
            calls, waiting, boundary = {}, {}, seq
            continue
        if kind != "message":
            continue  # only message rows hold calls and results
        for p in parts if isinstance(parts, list) else ():
            if not isinstance(p, dict):
                continue
            t, cid = p.get("type"), str(p.get("id"))
            if t == "tool_call":
                calls[cid] = seq
                waiting.setdefault(cid, []).append(seq)
            elif t == "tool_result":
                if waiting.get(cid):
                    waiting[cid].pop()
                elif cid not in calls and cid in earlier:
                    splits.append((offset, seq, cid, boundary, earlier[cid]))
    return splits, sorted((s, c) for c, seqs in waiting.items() for s in seqs)


def _scan(path: Path) -> SplitPairs:
    pairs = SplitPairs()
    res = scan.scan_paths([(1, str(path))], pairs=pairs)
    assert res.damage == [] and res.kept_rows == res.rows
    return pairs


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(_ROW, max_size=40), chunk=st.sampled_from([64, 700, 4096, 1 << 20]))
def test_notices_match_the_pairing_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        rows: list[tuple[str, Any, bytes | None]],
                                        chunk: int) -> None:
    """The fast path and the line-by-line path (a chunk with a hostile part)
    alike, with part types spelled through JSON escapes: the notices are
    the pairing rule's over the decoded rows."""
    monkeypatch.setattr(scan, "CHUNK", chunk)
    data = b""
    decoded = []
    for seq, (kind, parts, escape) in enumerate(rows, start=1):
        decoded.append((len(data), seq, kind, parts))
        data += _line(seq, kind, parts, escape)
    path = tmp_path / "seg-00000001.jsonl"
    path.write_bytes(data)
    pairs = _scan(path)
    splits, open_calls = _model(decoded)
    assert [(s.offset, s.seq, s.call_id, s.boundary, s.call_seq) for s in pairs.found] == splits
    assert sorted((s, c) for c, seqs in pairs.open_calls().items() for s in seqs) == open_calls
    assert all(s.segment == 1 for s in pairs.found)


def test_many_parts_and_repeated_ids_on_the_fast_path(tmp_path: Path) -> None:
    # A row past four parts is read again whole; ids called twice stay open
    # twice until answered; a result in a later window pairs with no call of
    # its own window and is a split.
    many = [{"type": "tool_call", "id": "x"}, {"type": "text", "text": "t"},
            {"type": "tool_call", "id": "x"}, {"type": "tool_call", "id": "y"},
            {"type": "tool_result", "id": "y"}]
    lines = [_line(1, "message", many), _line(2, "message", [{"type": "tool_result", "id": "x"}]),
             _line(3, "reset", []), _line(4, "message", [{"type": "tool_result", "id": "x"}]),
             _line(5, "message", [{"type": "tool_call", "id": "z"},
                                  {"type": "tool_call", "id": "z"}])]
    path = tmp_path / "seg-00000001.jsonl"
    path.write_bytes(b"".join(lines))
    pairs = _scan(path)
    offset = sum(map(len, lines[:3]))
    assert [(s.offset, s.seq, s.call_id, s.boundary, s.call_seq) for s in pairs.found] == [
        (offset, 4, "x", 3, 1)]
    assert pairs.open_calls() == {"z": [5, 5]}


@pytest.mark.parametrize("escape", ESCAPES[1:])
@pytest.mark.parametrize("hostile", [False, True], ids=["fast-path", "line-by-line"])
def test_escaped_tool_types_are_read_on_both_paths(tmp_path: Path, escape: bytes,
                                                   hostile: bool) -> None:
    """A call and a split result whose types are written with a JSON escape
    are found whether the chunk decodes on the fast path or goes line by
    line (a part that is no object elsewhere in the chunk)."""
    lines = [_line(1, "message", [{"type": "tool_call", "id": "x"}]),
             _line(2, "reset", []),
             _line(3, "message", [{"type": "tool_result", "id": "x"}], escape),
             _line(4, "message", [{"type": "tool_call", "id": "y"}], escape),
             _line(5, "message", ["no object"] if hostile else [{"type": "text", "text": "t"}])]
    assert all(b'"tool_' not in line for line in lines[2:4])
    path = tmp_path / "seg-00000001.jsonl"
    path.write_bytes(b"".join(lines))
    pairs = _scan(path)
    offset = sum(map(len, lines[:2]))
    assert [(s.offset, s.seq, s.call_id, s.boundary, s.call_seq) for s in pairs.found] == [
        (offset, 3, "x", 2, 1)]
    assert pairs.open_calls() == {"y": [4]}


@pytest.mark.parametrize("hostile", [False, True], ids=["fast-path", "line-by-line"])
def test_check_and_the_view_read_an_escaped_call_alike(tmp_path: Path, hostile: bool) -> None:
    """A stored call whose type is written ``"tool\\u005fcall"`` (an untracked
    edit, valid checksum): the view serves it as a call, and check lists it
    as open whichever path its chunk takes (line by line when a part of it
    is no object)."""
    from ledger import Store
    from ledger.storage.files import segments as segs

    h = Store(tmp_path, durability="off").history("esc")
    h.append({"role": "user", "parts": [{"type": "text", "text": "go"}]})
    odd = b',"no object"' if hostile else b""
    body = (b'{"seq":2,"id":"r2","kind":"message","role":"assistant","parts":[{"type":'
            b'"tool\\u005fcall","id":"x","name":"bash","input":{}}' + odd +
            b'],"batch":{"id":"bx","n":1,"i":0}}')
    number = segs.list_segments(h.engine.path)[-1]
    with open(segs.segment_path(h.engine.path, number), "ab") as f:
        f.write(fmt.frame(body))
    h = Store(tmp_path, durability="off").history("esc")
    assert h.provider_view()[-1].parts[0]["type"] == "tool_call"
    report = h.engine.verify()
    assert [f.message for f in report.findings if f.code == "open_tool_call"] == [
        "tool call 'x' (seq 2) in the active window (boundary 0) has no result"]
