"""The rows of a segment from an offset, read in chunks: what the provider
view's window read and row lookups decode.

Each line is what :func:`ledger.core.format.rows.decode_line` makes of it (a row
dict, or nothing for a line that fails verification, nests deeper than
``MAX_DEPTH``, is no JSON object or has no integer seq). Whole chunks take a
fast path -- every checksum verified in one pass, every body decoded by
one ``decode_lines`` call that also proves no body nests deeper than the
limit (``ledger.core.nesting.shallow_lines``) -- and a chunk where any of that fails is read line by
line through ``decode_line`` itself, so both give the same rows.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from itertools import repeat
from operator import add, itemgetter
from typing import Any

import msgspec

from ledger.core.format import rows as fmt
from ledger.core.rows import Row
from ledger.storage.files import segments as segs

# Each line inside an array of its own (``fmt.one_per_line``): no value runs on
# into the next line.
_decode_lines = msgspec.json.Decoder(tuple[Any]).decode_lines
_FIRST = itemgetter(0)
_DICT = {dict}


def _chunk_dicts(lines: list[bytes]) -> list[Any] | None:
    """What decode_line gives for each of ``lines``, or None when the chunk
    must go line by line."""
    bodies = fmt.verified_bodies(lines)
    if bodies is None:
        return None
    joined = fmt.one_per_line(bodies)
    # Freed before the decode, whose rows then take memory still in the
    # caches (2-3% of the chunk's CPU time, bench/RESULTS.md, issue 31).
    del bodies
    try:
        # None: a body may nest deeper than the limit (or the caller's stack
        # is too deep to tell): decided body by body, as decode_line does.
        rows = fmt.shallow_lines(_decode_lines, joined, joined)
        if rows is None:
            # (each piece one body in its array: one level more than the body)
            if any(map(fmt.too_deep, joined.split(b"\n"), repeat(fmt.MAX_DEPTH + 1))):
                return None
            rows = fmt.with_headroom(_decode_lines, joined)
    except (msgspec.DecodeError, RecursionError):
        return None
    return list(map(_FIRST, rows)) if len(rows) == len(lines) else None


def _all_rows(dicts: list[Any]) -> bool:
    """Whether every decoded line is a dict with an integer seq (a row):
    tested in C over the whole chunk, so the common case builds its rows
    without a Python-level test per line."""
    return set(map(type, dicts)) == _DICT and all(
        map(isinstance, map(dict.get, dicts, repeat("seq")), repeat(int)))


def _lines(buf: bytes, begin: int, end: int) -> tuple[list[bytes], list[int]]:
    """The lines of ``buf[begin:end]`` (whole lines, each ending in a newline,
    which is not kept) and where each starts in ``buf``. Found by
    ``bytes.find`` (memchr) rather than ``bytes.split``, which tests every
    byte in a loop of its own: ~5 instructions a byte, an eighth of a
    provider view's instructions (bench/RESULTS.md, issue 31, sixth round)."""
    lines: list[bytes] = []
    starts: list[int] = []
    add_line, add_start = lines.append, starts.append
    find = buf.find
    i = begin
    while i < end:
        j = find(b"\n", i, end)
        if j < 0:  # the run ends in a newline (segs.iter_runs_fd): never met
            break
        add_line(buf[i:j])
        add_start(i)
        i = j + 1
    return lines, starts


def segment_rows(path: str, number: int, start: int = 0, *,
                 skip_first: bool = False) -> Iterator[Row]:
    """The readable rows of segment ``number`` (at ``path``) from byte
    ``start``; ``skip_first`` leaves out the first line (a window's boundary
    row). A torn last line is no row."""
    fd, st = segs.open_regular_stat(path)
    try:
        # The size fstat gave ends the read without a read of nothing at the
        # end of the file (the window is read under the history's lock).
        for base, buf, end, complete in segs.iter_runs_fd(fd, start, known=st.st_size):
            if not complete:
                break
            begin = 0
            if skip_first:
                skip_first = False
                begin = buf.find(b"\n", 0, end) + 1
            lines, starts = _lines(buf, begin, end)
            dicts = _chunk_dicts(lines) if lines else []
            if dicts is None:
                dicts = [fmt.decode_line(line) for line in lines]
            offsets = map(add, starts, repeat(base))
            if _all_rows(dicts):
                yield from list(map(Row, lines, repeat(number), offsets, dicts))
            else:
                yield from [Row(line, number, at, data)
                            for line, data, at in zip(lines, dicts, offsets, strict=False)
                            if type(data) is dict and isinstance(data.get("seq"), int)]
            del buf
    finally:
        os.close(fd)
