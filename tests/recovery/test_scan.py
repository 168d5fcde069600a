"""The check scanner's fast path against its line-by-line path and against the
format's own functions: same findings, same boundaries, same verdicts."""

from __future__ import annotations

import gc
import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.core.checks import NOTICE
from ledger.core.format import rows as fmt
from ledger.storage.files import scan as chk
from ledger.storage.files import segments as segs
from ledger.transcript.store import Store
from recovery.check import check
from tests.helpers.recovery import build, seg_files


def _row(seq: int, kind: str = "message", **extra: Any) -> dict[str, Any]:
    r: dict[str, Any] = {"seq": seq, "id": f"r{seq}", "kind": kind, "role": "user",
                         "parts": [{"type": "text", "text": "x"}], "partial": False, "meta": {},
                         "ts": 1, "batch": {"id": f"b{seq}", "n": 1, "i": 0}}
    r.update(extra)
    return r


_words = st.sampled_from(["kind", "reset", "\\u006bind", "re\\u0073et", "message", "\\u001b",
                          '\\"kind\\"', "x", " ", "é"])


@given(st.lists(_words, max_size=12), st.booleans())
def test_may_hide_reset_never_misses_what_the_format_finds(words: list[str], dup: bool) -> None:
    text = "".join(words)
    body = json.dumps({"seq": 1, "kind": "message", "parts": [{"type": "text", "text": text}]},
                      ensure_ascii=False)
    if dup:
        body = body[:-1] + ', "kind": "reset", "kind": "message"}'
    line = fmt.frame(body.encode())[:-1]
    row = fmt.decode_line(line)
    assert row is not None
    if fmt.readable_row_is_reset(line, row):
        assert row["kind"] == "reset" or chk.may_hide_reset(line)


@given(st.lists(st.tuples(st.integers(1, 50), st.integers(-1, 400), st.integers(0, 255)),
                min_size=1, max_size=6))
def test_the_fast_path_verifies_lines_as_body_of_does(
    edits: list[tuple[int, int, int]],
) -> None:
    # The scan's fast path verifies a chunk with fmt.all_verified; it must
    # agree with fmt.body_of, one line at a time, on framed and damaged lines.
    lines = []
    for seq, at, byte in edits:
        line = bytearray(fmt.encode_line(_row(seq))[:-1])
        if 0 <= at < len(line):
            line[at] = byte
        elif at >= len(line):
            del line[at % len(line):]
        lines.append(bytes(line))
    assert fmt.all_verified(lines) == all(fmt.body_of(line) is not None for line in lines)
    # The check cuts a chunk with fmt.lines_of (each line keeps its newline;
    # the start of the next line after ``end`` is left out) and verifies it
    # with fmt.all_verified_lines: the same lines, the same verdict.
    buf = b"".join(line + b"\n" for line in lines)
    cut = buf.split(b"\n")[:-1]
    got = fmt.lines_of(buf + b'{"seq":9', len(buf))
    assert got == fmt.lines_of(buf, len(buf)) == [line + b"\n" for line in cut]
    assert fmt.all_verified_lines(got) == all(fmt.body_of(line) is not None for line in cut)


def _scan(ws: Path, *, slow: bool, monkeypatch: pytest.MonkeyPatch) -> chk.ScanResult:
    if slow:
        def never(self: Any, base: int, buf: bytes, end: int) -> None:
            raise chk._Slow

        monkeypatch.setattr(chk._Scanner, "_fast", never)
    try:
        res = chk.scan_paths([(n, segs.segment_path(str(ws), n))
                              for n in segs.list_segments(str(ws))])
        res.resolve_hidden()
        return res
    finally:
        monkeypatch.undo()


def _summary(res: chk.ScanResult) -> Any:
    return ([(d.segment, d.offset, d.length, d.code, d.may_be_reset, d.seq, d.rows,
              d.prev_seq, d.next_seq) for d in res.damage],
            res.rows, res.kept_rows, res.max_seq, res.reused, res.last_boundary,
            res.last_floor, res.kept_after_first_damage, res.reset_after_first_damage)


@pytest.mark.parametrize("seed", range(25))
def test_fast_and_slow_paths_agree(tmp_path: Path, seed: int,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    b = build(tmp_path / "s", segment_bytes=900)
    rnd = random.Random(seed)
    files = seg_files(b.path)
    for _ in range(rnd.randint(0, 3)):
        name = rnd.choice(sorted(files))
        data = bytearray(files[name])
        choice = rnd.random()
        at = rnd.randrange(len(data))
        if choice < 0.3:
            data[at] ^= 1 << rnd.randrange(8)
        elif choice < 0.5:
            del data[at:]
        elif choice < 0.7:
            lines = bytes(data).split(b"\n")[:-1]
            i = rnd.randrange(len(lines))
            lines.insert(rnd.randrange(len(lines) + 1), lines[i])
            data = bytearray(b"".join(x + b"\n" for x in lines))
        else:
            data[at:at] = fmt.encode_line(_row(rnd.randrange(1, 40), "message",
                                               note="kind reset"))
        files[name] = bytes(data)
    for name, data in files.items():
        (b.path / name).write_bytes(data)
    fast = _scan(b.path, slow=False, monkeypatch=monkeypatch)
    slow = _scan(b.path, slow=True, monkeypatch=monkeypatch)
    assert _summary(fast) == _summary(slow)


def test_a_reset_hidden_behind_a_duplicate_key_is_a_floor(tmp_path: Path) -> None:
    store = Store(tmp_path, durability="off")
    h = store.history("ws")
    h.append({"kind": "message", "role": "user", "parts": [{"type": "text", "text": "a"}]})
    seg = Path(segs.segment_path(h.engine.path, segs.list_segments(h.engine.path)[-1]))
    hidden = json.dumps(_row(2)).replace('"kind": "message"',
                                         '"kind": "reset", "kind": "message"')
    seg.write_bytes(seg.read_bytes() + fmt.frame(hidden.encode()))
    for _ in range(3):
        h.append({"kind": "message", "role": "user", "parts": [{"type": "text", "text": "b"}]})
    floor = h.snapshot().floor
    assert floor is not None and floor.seq == 2
    report = check(h)
    assert report.findings == [] or all(f.severity == NOTICE for f in report.findings)
    assert report.scan is not None
    report.scan.resolve_hidden()
    assert report.scan.last_floor is not None and report.scan.last_floor[2] == 2


@given(st.binary(max_size=80).map(lambda b: b.replace(b"\x00", b"\n")),
       st.integers(1, 9), st.integers(0, 5))
def test_the_chunked_readers_agree_with_split_lines(tmp_path_factory: pytest.TempPathFactory,
                                                     data: bytes, chunk: int,
                                                     start: int) -> None:
    # iter_lines_fd and iter_chunks_fd (the scan's reader) share one chunked
    # reader; at any chunk size they give the lines split_lines gives.
    start = min(start, len(data))
    path = tmp_path_factory.mktemp("lines") / "f"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        lines = list(segs.iter_lines_fd(fd, start, chunk))
        pieces = list(segs.iter_chunks_fd(fd, start, chunk))
    finally:
        os.close(fd)
    assert lines == segs.split_lines(data[start:], start)
    assert b"".join(p[1] for p in pieces) == data[start:]
    assert all(p[2] == p[1].endswith(b"\n") for p in pieces)


def test_a_scan_leaves_no_cycle_behind(tmp_path: Path) -> None:
    """A check's scanner (its call-id and batch maps) is freed when its
    result is, by reference counting: no cycle through the result keeps it
    for a later collection of the oldest generation to walk (and to charge
    to whatever runs then). ``resolve_hidden`` still works on the result."""
    built = build(tmp_path)
    ws = str(built.path)
    paths = [(n, segs.segment_path(ws, n)) for n in segs.list_segments(ws)]
    gc.collect()
    gc.disable()
    try:
        res = chk.scan_paths(paths, pairs=None)
        res.resolve_hidden()
        assert res.rows > 0 and res.hidden_resolved
        del res
        assert gc.collect() == 0  # nothing was left for the collector
    finally:
        gc.enable()
