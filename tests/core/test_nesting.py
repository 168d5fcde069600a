"""Bounded nesting (issue 20, item 4): rows nest at most ``MAX_DEPTH``
(256) arrays and objects deep. A deeper row is refused at append
(``InvalidRow`` naming it, nothing written); a stored line deeper than that
(written by hand, or by a writer that raised its recursion limit) is damage:
readers refuse it with a ``LedgerError`` rather than recurse, ``check``
reports it and ``repair`` quarantines it. A row at the limit reads from a
call stack already near Python's recursion limit.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from ledger import History, InvalidRow, LedgerError, Store
from ledger.core import nesting
from ledger.core.errors import HistoryDamaged
from ledger.core.format import rows as fmt
from ledger.storage.files import segments as segs
from recovery.check import check
from recovery.repair import repair
from tests.helpers import msg, subprocess_env

WS = "ws"
MAX_DEPTH = 256  # fmt.MAX_DEPTH, the documented limit (asserted below)


def _nested(depth: int) -> Any:
    """A value that, as the input of a tool call, makes a row ``depth`` deep:
    the row object, its parts and the part are the first 3 levels."""
    value: Any = "leaf"
    for _ in range(depth - 3):
        value = [value]
    return value


def _row(depth: int) -> dict[str, Any]:
    return msg("deep", role="assistant", parts=[
        {"type": "tool_call", "id": "c1", "name": "f", "input": _nested(depth)}])


def _history(root: Path) -> History:
    return Store(root, durability="off").history(WS)


def _at_depth(frames: int, fn: Callable[[], Any]) -> Any:
    """Run ``fn`` with ``frames`` more Python frames on the stack."""
    if frames <= 0:
        return fn()
    return _at_depth(frames - 1, fn)


def test_the_depth_of_a_row(tmp_path: Path) -> None:
    assert fmt.MAX_DEPTH == MAX_DEPTH
    body = fmt.encode_json(_row(MAX_DEPTH))
    assert not fmt.too_deep(body) and fmt.too_deep(fmt.encode_json(_row(MAX_DEPTH + 1)))
    # Brackets inside strings are text, not nesting.
    assert not fmt.too_deep(fmt.encode_json(msg("[" * 5000 + "{" * 5000)))


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 960, 5000])
def test_append_refuses_a_row_nested_too_deep(tmp_path: Path, depth: int) -> None:
    h = _history(tmp_path)
    h.append(msg("first"))
    before = sorted(os.listdir(h.engine.path))
    with pytest.raises(InvalidRow, match=rf"row 1: nested deeper than {MAX_DEPTH}") as info:
        h.append_many([msg("ok"), _row(depth)])
    assert info.value.index == 1
    assert sorted(os.listdir(h.engine.path)) == before
    assert [r.seq for r in h.rows()] == [1]


def test_a_row_at_the_limit_reads_from_a_deep_call_stack(tmp_path: Path) -> None:
    """A reader already near the recursion limit (all but 150 frames used)
    reads, views, searches, checks and repairs a row at the limit."""
    h = _history(tmp_path)
    h.append(msg("before"))
    seqs = h.append(_row(MAX_DEPTH)).seqs
    room = 150
    depth = len(_stack())
    frames = sys.getrecursionlimit() - depth - room
    rows = _at_depth(frames, lambda: [r.to_dict() for r in h.rows()])
    assert rows[-1]["seq"] == seqs[0]
    assert _at_depth(frames, lambda: h.provider_view())[-1].seq == seqs[0]
    out = _at_depth(frames, lambda: h.session_history().call(
        {"action": "read", "seq": seqs[0]}))
    assert json.loads(out)["items"][0]["seq"] == seqs[0]
    assert _at_depth(frames, lambda: check(h)).ok
    assert not _at_depth(frames, lambda: repair(h)).changed


def _stack() -> list[Any]:
    frame, out = sys._getframe(), []
    while frame is not None:
        out.append(frame)
        frame = frame.f_back
    return out


def _store_deep_line(h: History, depth: int) -> int:
    """Write a row ``depth`` deep the way a writer with a raised recursion
    limit would (valid checksum); returns its seq."""
    seq = h.snapshot().next_seq
    row = {"seq": seq, "id": "r_deep", "kind": "message", "role": "assistant",
           "parts": [{"type": "tool_call", "id": "c1", "name": "f", "input": _nested(depth)}],
           "partial": False, "meta": {}, "ts": 1, "batch": {"id": "b_deep", "n": 1, "i": 0}}
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, depth * 3))
    try:
        line = fmt.frame(fmt.encode_json(row))
    finally:
        sys.setrecursionlimit(old)
    path = segs.segment_path(h.engine.path, segs.list_segments(h.engine.path)[-1])
    with open(path, "ab") as f:
        f.write(line)
    return seq


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 3000])
def test_a_stored_line_nested_too_deep_is_damage(tmp_path: Path, depth: int) -> None:
    h = _history(tmp_path)
    h.append(msg("before"))
    deep = _store_deep_line(h, depth)
    with pytest.raises(HistoryDamaged, match=r"segment seg-\d+\.jsonl offset \d+"):
        _at_depth(200, lambda: list(h.rows()))
    assert _at_depth(200, lambda: h.get(1)).seq == 1
    view = _at_depth(200, lambda: h.provider_view())
    assert [r.seq for r in view] == [1]  # the unreadable line is not served
    out = json.loads(h.session_history().call({"action": "read", "seq": deep}))
    assert "items" not in out or out["items"] == []
    report = _at_depth(200, lambda: check(h))
    assert "too_deep" in {f.code for f in report.findings} and not report.ok
    fixed = _at_depth(200, lambda: repair(h))
    assert fixed.consistent and fixed.removals and "nested deeper" in fixed.removals[0].reasons[0]
    assert [r.seq for r in h.rows()] == [1]
    assert h.append(msg("after")).seqs[0] >= deep


def _tledger(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "ledger", *args], input=stdin,
                          capture_output=True, env=subprocess_env(), timeout=60, check=False)


def test_cli_on_a_stored_line_nested_too_deep(tmp_path: Path) -> None:
    h = _history(tmp_path)
    h.append(msg("before"))
    _store_deep_line(h, 3000)
    root = str(tmp_path)
    for args, code in ((("rows", WS), 1), (("context", WS), 0), (("check", WS), 1),
                       (("repair", WS), 0), (("check", WS), 0), (("rows", WS), 0)):
        done = _tledger("--root", root, *args)
        assert b"Traceback" not in done.stderr, (args, done.stderr)
        assert done.returncode == code, (args, done.returncode, done.stderr)
    assert isinstance(LedgerError("x"), Exception)


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 999])
def test_count_rows_refuses_what_append_refuses(tmp_path: Path, depth: int) -> None:
    # A row too deep to store is not counted either: a caller that counts a
    # row to see whether it fits would otherwise be told it fits, then refused.
    line = fmt.encode_json(_row(depth)) + b"\n"
    counted = _tledger("count", "--rows", stdin=line)
    assert counted.returncode == 1 and b"Traceback" not in counted.stderr
    assert b"stdin line 1: JSON nested too deeply" in counted.stderr
    assert f"deeper than {MAX_DEPTH} levels".encode() in counted.stderr
    appended = _tledger("--root", str(tmp_path), "append", WS, stdin=line)
    assert appended.returncode == 1 and b"nested too deeply" in appended.stderr
    assert _tledger("count", "--rows", stdin=fmt.encode_json(_row(MAX_DEPTH)) + b"\n"
                    ).returncode == 0


# --- the depth cap's descent (ledger.core.nesting._capped) ----------------------

_capped_only = pytest.mark.skipif(
    sys.version_info >= (3, 12) or not nesting.DEPTH_CAPPED,
    reason="msgspec's recursion counts against the thread's recursion limit on 3.10-3.11")


def _deepest_capped_line(frames: int) -> int:
    """The deepest ``[[...]]`` line a capped decode reads, called ``frames``
    Python frames deeper than here."""
    decode = fmt.msgspec.json.Decoder().decode_lines

    def ok(depth: int) -> bool:
        line = b"[" * depth + b"1" + b"]" * depth
        try:
            return _at_depth(frames, lambda: nesting._capped(decode, line)) is not None
        except RecursionError:
            return False

    lo, hi = 1, MAX_DEPTH + 8
    assert ok(lo) and not ok(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


@_capped_only
def test_the_descent_leaves_the_decode_its_budget_at_any_caller_depth(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The decode runs under a C-level descent (msgspec's encoder, one level
    # per list): whatever the caller's depth, it gets the budget a chain of
    # Python frames holding the same levels leaves -- never more than
    # _BUDGET (a line past MAX_DEPTH would be read), and the same at every
    # depth (C code of the test runner may hold a few levels of its own).
    depths = (0, 40, 300)
    got = [_deepest_capped_line(k) for k in depths]
    # the reference: this lambda's frame and k + 1 frames of _sink, the
    # k + 1 + _HOOK_LEVELS levels a descent of k lists holds
    monkeypatch.setattr(nesting, "_descend", lambda k, fn, arg: nesting._sink(k, fn, arg))
    assert got == [_deepest_capped_line(k) for k in depths] == [got[0]] * 3
    assert nesting._BUDGET - 16 < got[0] <= nesting._BUDGET


@_capped_only
def test_the_decode_s_exceptions_leave_the_descent_unchanged() -> None:
    decode = fmt.msgspec.json.Decoder().decode_lines
    with pytest.raises(fmt.msgspec.DecodeError) as direct:
        decode(b'{"a": }')
    with pytest.raises(fmt.msgspec.DecodeError) as bad:
        nesting._capped(decode, b'{"a": }')
    assert str(bad.value) == str(direct.value)
    too_deep = RecursionError("from the decode")

    def deep(_data: bytes) -> None:
        raise too_deep

    with pytest.raises(RecursionError) as seen:
        nesting._capped(deep, b"")
    assert seen.value is too_deep
    assert nesting._capped(decode, b'{"a": 1}\n[2]') == [{"a": 1}, [2]]


@_capped_only
def test_the_self_test_fails_without_the_descent(monkeypatch: pytest.MonkeyPatch) -> None:
    # Where the descent does not hold its levels (an interpreter that counts
    # C recursion apart), the import-time self-test says so, and callers
    # count brackets instead.
    assert nesting._self_test()
    monkeypatch.setattr(nesting, "_descend", lambda k, fn, arg: fn(arg))
    assert not nesting._self_test()


def test_the_depth_cap_leaves_no_cycle_behind() -> None:
    """Counting the stack's frames holds no frame after it returns: a frame
    kept by a cycle would keep every caller's locals (a check's scanner and
    its 1 MiB chunk) alive until a later full collection."""
    decode = msgspec.json.Decoder().decode_lines
    gc.collect()
    gc.disable()
    try:
        assert nesting._capped(decode, b'{"a":[1]}\n{"b":2}') == [{"a": [1]}, {"b": 2}]
        assert gc.collect() == 0
    finally:
        gc.enable()


@pytest.mark.parametrize("pad", [0, 16 << 10])  # a small chunk (counted), a large one
def test_shallow_lines_holds_the_cap_on_small_and_large_chunks(pad: int) -> None:
    # A small chunk (a turn's window) is decided by counting each line's
    # opening brackets, a large one by the capped decode: either way a line
    # past MAX_DEPTH is never decoded (None: the caller goes line by line),
    # a line below it is, and a line of many brackets but little depth
    # (a list of 300 objects) still decodes in one call.
    decode = msgspec.json.Decoder().decode_lines

    def chunk(depth: int) -> bytes:
        line = b"[" * (depth - 1) + b"{}" + b"]" * (depth - 1)
        filler = b'{"seq":1,"text":"' + b"x" * pad + b'"}'
        return filler + b"\n" + line

    assert nesting.shallow_lines(decode, chunk(MAX_DEPTH + 1), chunk(MAX_DEPTH + 1)) is None
    # (The capped decode leaves lines 249-256 deep to the caller's line by
    # line read; counting decodes them in the chunk.)
    for depth in (MAX_DEPTH - 16, MAX_DEPTH) if pad == 0 else (MAX_DEPTH - 16,):
        got = nesting.shallow_lines(decode, chunk(depth), chunk(depth))
        assert got is not None and got[0]["seq"] == 1
    wide = b"[" + b",".join([b'{"a":[1]}'] * 300) + b"]"
    data = chunk(2) + b"\n" + wide
    got = nesting.shallow_lines(decode, data, data)
    assert got is not None and len(got[2]) == 300
    # From a deep call stack too (the decode's own recursion, given headroom).
    assert _at_depth(sys.getrecursionlimit() - 120,
                     lambda: nesting.shallow_lines(decode, data, data)) == got
