"""The provider view's window read (``ledger.storage.files.rowread``): a chunk
of lines takes a fast path (checksums of the whole chunk at once, one
``decode_lines`` that is also the depth test) and must give exactly the rows
``decode_line`` gives line by line, on framed, damaged, too-deep and
non-row lines, read from any depth of the caller's stack.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.core import nesting
from ledger.core.format import rows as fmt
from ledger.storage.files import rowread

MAX_DEPTH = 256


def _nested(depth: int) -> dict[str, Any]:
    """A row ``depth`` arrays and objects deep (the row itself is level 1,
    its meta level 2)."""
    value: Any = "leaf"
    for _ in range(depth - 2):
        value = [value]
    return {"seq": depth, "kind": "message", "meta": {"x": value}} if depth > 2 else {
        "seq": depth, "kind": "message", "meta": "flat"}


def _line(kind: str, n: int) -> bytes:
    """One stored line (no newline) of a kind of line a segment may hold."""
    if kind == "row":
        return fmt.encode_line({"seq": n, "kind": "message", "role": "user",
                                "parts": [{"type": "text", "text": f"row {n} [{{é"}]})[:-1]
    if kind == "deep":  # one level past the limit: damage
        return fmt.encode_line(_nested(MAX_DEPTH + 1))[:-1]
    if kind == "limit":  # exactly at the limit: a row
        return fmt.encode_line(_nested(MAX_DEPTH))[:-1]
    if kind == "near":  # where the fast path leaves the decision to too_deep
        return fmt.encode_line(_nested(MAX_DEPTH - 4))[:-1]
    if kind == "brackets":  # brackets in text are not nesting
        return fmt.encode_line({"seq": n, "parts": [{"type": "text", "text": "[{" * 400}]})[:-1]
    if kind == "no_seq":
        return fmt.encode_line({"kind": "message"})[:-1]
    if kind == "empty_object":
        return fmt.frame(b"{}")[:-1]
    if kind == "damaged":
        line = bytearray(_line("row", n))
        line[5] ^= 1
        return bytes(line)
    if kind == "unframed":
        return b'{"seq": 3}'
    raise AssertionError(kind)


_KINDS = ["row", "row", "row", "deep", "limit", "near", "brackets", "no_seq", "empty_object",
          "damaged", "unframed"]


def _expected(lines: list[bytes]) -> list[tuple[int, dict[str, Any]]]:
    out = []
    off = 0
    for line in lines:
        data = fmt.decode_line(line)
        if type(data) is dict and isinstance(data.get("seq"), int):
            out.append((off, data))
        off += len(line) + 1
    return out


def _read(path: Path, frames: int) -> list[tuple[int, dict[str, Any]]]:
    def down(k: int) -> list[tuple[int, dict[str, Any]]]:
        if k > 0:
            return down(k - 1)
        return [(r.offset, r.data) for r in rowread.segment_rows(str(path), 1)]

    return down(frames)


@pytest.mark.parametrize("capped", [True, False], ids=["decode-capped", "bracket-count"])
@given(kinds=st.lists(st.sampled_from(_KINDS), min_size=1, max_size=8),
       frames=st.sampled_from([0, 200, 600, 850]))
def test_the_fast_path_reads_what_decode_line_reads(
    tmp_path_factory: pytest.TempPathFactory, capped: bool, kinds: list[str], frames: int,
) -> None:
    lines = [_line(k, n) for n, k in enumerate(kinds, 1)]
    path = tmp_path_factory.mktemp("seg") / "seg"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    saved = nesting.DEPTH_CAPPED
    nesting.DEPTH_CAPPED = capped and saved
    try:
        got = _read(path, frames)
    finally:
        nesting.DEPTH_CAPPED = saved
    assert got == _expected(lines)


def test_a_chunk_of_rows_takes_the_fast_path(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # The case the view is fast for: every line a verified row, read in one
    # decode (not line by line, which would hide a broken fast path).
    lines = [_line("row", n) for n in range(1, 200)] + [_line("limit", 0)]
    path = tmp_path / "seg"
    path.write_bytes(b"".join(line + b"\n" for line in lines))

    def no_slow_path(line: bytes) -> None:
        raise AssertionError("read line by line")

    monkeypatch.setattr(fmt, "decode_line", no_slow_path)
    got = [(r.offset, r.data) for r in rowread.segment_rows(str(path), 1)]
    monkeypatch.undo()
    assert got == _expected(lines)


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="measured on CPython 3.10 and 3.11, "
                    "where msgspec's recursion counts against the thread's recursion limit")
def test_the_decode_is_the_depth_test_on_this_interpreter() -> None:
    assert nesting.DEPTH_CAPPED
    assert not fmt.too_deep(fmt.encode_json(_nested(MAX_DEPTH)))
    assert fmt.too_deep(fmt.encode_json(_nested(MAX_DEPTH + 1)))
    decode = fmt.msgspec.json.Decoder().decode_lines
    ok = fmt.encode_json(_nested(64))
    deep = fmt.encode_json(_nested(MAX_DEPTH + 1))
    assert nesting.shallow_lines(decode, ok + b"\n" + ok, b"") is not None
    assert nesting.shallow_lines(decode, ok + b"\n" + deep, b"") is None


@pytest.mark.skipif(not nesting.DEPTH_CAPPED, reason="the bracket count decides here")
def test_no_caller_depth_lets_a_deep_line_through() -> None:
    # Every depth of the caller's stack up to near the recursion limit: the
    # decode's budget only ever shrinks, so a line one level past the limit
    # never decodes on the fast path (the translate fallback never runs: the
    # raw argument is empty, which would pass any bracket count).
    decode = fmt.msgspec.json.Decoder().decode_lines
    deep = fmt.encode_json(_nested(MAX_DEPTH + 1))
    ok = fmt.encode_json(_nested(16))
    seen_ok = 0

    def at(k: int) -> tuple[Any, Any]:
        if k > 0:
            return at(k - 1)
        return (nesting.shallow_lines(decode, ok + b"\n" + deep, b""),
                nesting.shallow_lines(decode, ok, b""))

    for k in range(0, sys.getrecursionlimit() - 60, 3):
        try:
            refused, fine = at(k)
        except RecursionError:
            break  # the test's own frames reached the limit
        assert refused is None, k
        seen_ok += fine is not None
    assert seen_ok > 100


@pytest.mark.skipif(not nesting.DEPTH_CAPPED, reason="the bracket count decides here")
def test_a_limit_raised_during_the_decode_sends_the_chunk_to_the_bracket_count() -> None:
    # ``with_headroom`` raises the process-wide recursion limit for a moment;
    # a capped decode running meanwhile (in another thread, here inside the
    # decode itself) had more room than its budget, so its answer is not the
    # depth test: the chunk goes the counting way, which refuses the line.
    decode = fmt.msgspec.json.Decoder().decode_lines
    deep = fmt.encode_json(_nested(MAX_DEPTH + 1))
    refused = []

    def decode_with_room(data: bytes) -> list[object]:
        if not refused:
            refused.append(data)
            raise RecursionError  # what a decode deep in its caller's stack meets
        return list(decode(data))

    def decode_while_the_limit_is_raised(data: bytes) -> list[object]:
        return nesting.with_headroom(decode_with_room, data)

    assert nesting.shallow_lines(decode_while_the_limit_is_raised, deep, deep) is None
    assert refused  # the raised-limit path ran


def test_rows_from_an_offset_across_chunks_have_their_offsets(tmp_path: Path) -> None:
    # A window read: from a boundary row's offset, that row left out, over
    # more than one read chunk (1 MiB), a torn last line no row. Each row's
    # offset is where its line starts in the file, its line the bytes there.
    lines = [fmt.encode_line({"seq": n, "kind": "message", "role": "user",
                              "parts": [{"type": "text", "text": f"{n} " + "é" * (700 + n)}]})
             for n in range(1, 1300)]
    data = b"".join(lines) + b'{"seq": 1300, "kin'
    path = tmp_path / "seg"
    path.write_bytes(data)
    assert len(data) > 2 * 1024 * 1024
    first = 37
    start = sum(len(line) for line in lines[: first - 1])  # row `first`, the boundary
    got = list(rowread.segment_rows(str(path), 4, start, skip_first=True))
    assert [r.seq for r in got] == list(range(first + 1, 1300))
    for r in got:
        assert r.segment == 4
        assert data[r.offset : r.offset + len(r.line) + 1] == r.line + b"\n"
        assert r.data == fmt.decode_line(r.line)


def _segment(tmp_path: Path, rows: int, tail: bytes = b"") -> tuple[str, bytes]:
    data = b"".join(fmt.encode_line({"seq": n, "kind": "message", "role": "user",
                                     "parts": [{"type": "text", "text": f"{n} " + "x" * 900}]})
                    for n in range(1, rows + 1)) + tail
    path = tmp_path / "seg"
    path.write_bytes(data)
    return str(path), data


def test_a_window_read_ends_at_the_size_it_saw_without_reading_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # One short read reaches the end of the file: no second read of nothing
    # at its end (a syscall and a buffer of a read chunk, never touched).
    path, data = _segment(tmp_path, 300)
    reads: list[tuple[int, int, int]] = []
    real = os.pread

    def spy(fd: int, n: int, offset: int) -> bytes:
        got = real(fd, n, offset)
        reads.append((n, offset, len(got)))
        return got

    monkeypatch.setattr(os, "pread", spy)
    got = list(rowread.segment_rows(path, 1, 0))
    assert [r.seq for r in got] == list(range(1, 301))
    assert reads == [(rowread.segs.READ_CHUNK, 0, len(data))]


def test_a_short_read_before_the_end_reads_on(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # A file system may return fewer bytes than asked before the end: every
    # row after it is still read, and a torn tail is still no row.
    path, data = _segment(tmp_path, 300, b'{"seq": 301, "kin')
    real = os.pread

    def short(fd: int, n: int, offset: int) -> bytes:
        got = real(fd, n, offset)
        cut = got.find(b"\n", len(got) // 3) + 1  # ends in a newline, well before the end
        return got[:cut] if cut else got

    monkeypatch.setattr(os, "pread", short)
    got = list(rowread.segment_rows(path, 1, 0))
    assert [r.seq for r in got] == list(range(1, 301))
    for r in got:
        assert data[r.offset : r.offset + len(r.line) + 1] == r.line + b"\n"
