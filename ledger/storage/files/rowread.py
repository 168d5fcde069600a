"""The rows of a segment from an offset, read in chunks: what the provider
view's window read and row lookups decode.

Each line is what :func:`ledger.core.format.rows.decode_line` makes of it (a row
dict, or nothing for a line that fails verification, nests deeper than
``MAX_DEPTH``, is no JSON object or has no integer seq). Whole chunks take a
fast path -- every checksum verified in one pass, no line holding more
opening brackets than the nesting limit, every body decoded by one
``decode_lines`` call -- and a chunk where any of that fails is read line by
line through ``decode_line`` itself, so both give the same rows.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from itertools import accumulate
from typing import Any

import msgspec

from ledger.core.format import rows as fmt
from ledger.core.rows import Row
from ledger.storage.files import segments as segs

_decode_lines = msgspec.json.Decoder().decode_lines
_NOT_OPENING = bytes(b for b in range(256) if b not in b"[{\n")  # translate deletes these


def _chunk_dicts(lines: list[bytes]) -> list[Any] | None:
    """What decode_line gives for each of ``lines``, or None when the chunk
    must go line by line."""
    bodies = fmt.verified_bodies(lines)
    if bodies is None:
        return None
    joined = b"\n".join(bodies)
    # No body nests deeper than the limit when none holds more opening brackets.
    if max(map(len, joined.translate(None, _NOT_OPENING).split(b"\n"))) > fmt.MAX_DEPTH:
        return None
    try:
        rows = fmt.with_headroom(_decode_lines, joined)
    except (msgspec.DecodeError, RecursionError):
        return None
    return rows if len(rows) == len(lines) else None


def segment_rows(path: str, number: int, start: int = 0, *,
                 skip_first: bool = False) -> Iterator[Row]:
    """The readable rows of segment ``number`` (at ``path``) from byte
    ``start``; ``skip_first`` leaves out the first line (a window's boundary
    row). A torn last line is no row."""
    fd = segs.open_regular(path)
    try:
        for base, buf, _end, complete in segs.iter_runs_fd(fd, start):
            if not complete:
                break
            lines = buf.split(b"\n")
            lines.pop()  # after the last newline: b"" or the next run's start
            off = base
            if skip_first:
                skip_first = False
                off += len(lines[0]) + 1
                lines = lines[1:]
            dicts = _chunk_dicts(lines) if lines else []
            if dicts is None:
                dicts = [fmt.decode_line(line) for line in lines]
            offsets = accumulate([len(line) + 1 for line in lines], initial=off)
            yield from [Row(line, number, at, data)
                        for line, data, at in zip(lines, dicts, offsets, strict=False)
                        if type(data) is dict and isinstance(data.get("seq"), int)]
            del buf
    finally:
        os.close(fd)
