"""The rows of a segment from an offset, read in chunks: what the provider
view's window read and row lookups decode.

Each line is what :func:`ledger.core.format.rows.decode_line` makes of it (a row
dict, or nothing for a line that fails verification, nests deeper than
``MAX_DEPTH``, is no JSON object or has no integer seq), without a top-level
``_c`` (a line's checksum key; a body's own is store-assigned, refused on
append and stripped from every output). Whole chunks take a fast path --
every checksum verified in one pass, every line decoded where it was read by
one ``decode_lines`` call that also proves no line nests deeper than the
limit (``ledger.core.nesting.shallow_lines``) -- and a chunk where any of that
fails is read line by line through ``decode_line`` itself, so both give the
same rows.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from itertools import repeat
from operator import add
from typing import Any

import msgspec

from ledger.core.format import rows as fmt
from ledger.core.rows import Row
from ledger.storage.files import segments as segs

_decode_lines = msgspec.json.Decoder().decode_lines
_DICT = {dict}


#: Bytes a line on average from which a chunk is decoded where it was read
#: (``_decoded_whole``) rather than from its bodies joined (``_decoded_bodies``):
#: the whole line's decode costs a fixed ~900 instructions a row more (its
#: ``_c`` decoded, then taken), the join a copy of every byte into cold memory
#: (bench/RESULTS.md, issue 31, tenth round: view5).
LONG_LINE = 1024


def _chunk_dicts(buf: bytes, begin: int, end: int, lines: list[bytes]) -> list[Any] | None:
    """What :func:`_line_dict` gives for each of ``lines`` (``buf[begin:end]``),
    or None when the chunk must go line by line."""
    if end - begin >= LONG_LINE * len(lines):
        return _decoded_whole(buf, begin, end, lines)
    return _decoded_bodies(lines)


def _decoded_whole(buf: bytes, begin: int, end: int, lines: list[bytes]) -> list[Any] | None:
    """The lines decoded where they were read, framing and all
    (``fmt.drop_checksums`` then takes each row's ``_c``): no body is cut
    out and joined, so the read buffer is the chunk's only transient of its
    size. The checksums are verified first, each body made and hashed in
    turn."""
    if not fmt.all_verified(lines):
        return None
    data = buf if begin == 0 and end == len(buf) else memoryview(buf)[begin:end]
    try:
        # None: a line may nest deeper than the limit (or the caller's stack
        # is too deep to tell): decided line by line, as decode_line does
        # (the framing adds no level).
        rows = fmt.shallow_lines(_decode_lines, data, buf)
        if rows is None:
            if any(map(fmt.too_deep, lines)):
                return None
            rows = fmt.with_headroom(_decode_lines, data)
    except (msgspec.DecodeError, RecursionError):
        return None
    if len(rows) != len(lines) or not fmt.drop_checksums(rows):
        return None
    return rows


def _decoded_bodies(lines: list[bytes]) -> list[Any] | None:
    """The lines' verified bodies joined and decoded; a body's own top-level
    ``_c`` taken, as ``_decoded_whole`` does."""
    bodies = fmt.verified_bodies(lines)
    if bodies is None:
        return None
    joined = b"\n".join(bodies)
    # Freed before the decode, whose rows then take memory still in the
    # caches (2-3% of the chunk's CPU time, bench/RESULTS.md, issue 31).
    del bodies
    try:
        # None: a body may nest deeper than the limit (or the caller's stack
        # is too deep to tell): decided body by body, as decode_line does.
        rows = fmt.shallow_lines(_decode_lines, joined, joined)
        if rows is None:
            if any(map(fmt.too_deep, joined.split(b"\n"))):
                return None
            rows = fmt.with_headroom(_decode_lines, joined)
    except (msgspec.DecodeError, RecursionError):
        return None
    if len(rows) != len(lines):
        return None
    try:  # a membership test a row in C (a pop a row costs twice as much)
        held = any(map(dict.__contains__, rows, repeat(fmt.CHECKSUM_KEY)))
    except TypeError:  # a line that is no object: the rows one by one
        held = True
    if held:
        for row in rows:
            if type(row) is dict:
                row.pop(fmt.CHECKSUM_KEY, None)
    return rows


def _line_dict(line: bytes) -> Any:
    """``fmt.decode_line`` of one line, without a top-level ``_c`` its body
    may hold (what the whole chunk's decode gives: ``fmt.drop_checksums``)."""
    row = fmt.decode_line(line)
    if row is not None:
        row.pop(fmt.CHECKSUM_KEY, None)
    return row


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
    fd = segs.open_regular(path)
    try:
        for base, buf, end, complete in segs.iter_runs_fd(fd, start):
            if not complete:
                break
            begin = 0
            if skip_first:
                skip_first = False
                begin = buf.find(b"\n", 0, end) + 1
            lines, starts = _lines(buf, begin, end)
            dicts = _chunk_dicts(buf, begin, end, lines) if lines else []
            if dicts is None:
                dicts = [_line_dict(line) for line in lines]
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
