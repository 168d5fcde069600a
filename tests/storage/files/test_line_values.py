"""A stored line is one JSON value: the chunk decodes (the window read's
``rowread`` and check's scan) must not let a value run on from one line into
the next. ``msgspec``'s ``decode_lines`` reads a newline as whitespace, so
lines that each fail ``decode_line`` (a line holding a row and the start of
another, a line that only closes it) decoded as a chunk gave one row per
line: the provider view served rows that ``rows()`` refuses and check called
a history with such lines ok -- and a value opened over several lines nested
deeper than MAX_DEPTH, though no line holds more than MAX_DEPTH brackets.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ledger import Store
from ledger.core.errors import HistoryDamaged
from ledger.core.format import rows as fmt
from ledger.storage.files import rowread
from tests.helpers import PYTHON, msg, subprocess_env

MAX_DEPTH = 256


def _row(seq: int) -> bytes:
    """A row's JSON (no framing), as an append writes one."""
    return json.dumps({"seq": seq, "kind": "message", "role": "user",
                       "parts": [{"type": "text", "text": f"planted {seq}"}],
                       "batch": {"id": f"b_planted{seq}", "n": 1, "i": 0}},
                      separators=(",", ":")).encode()


def spanning(first: int, n: int, per: int = 0) -> list[bytes]:
    """``n`` framed lines (each with its newline, checksums right) that each
    fail ``decode_line``, holding ``n`` values when read across newlines:
    the first line the start of a row, ``n - 2`` lines that open ``per``
    more arrays inside it, the last that closes it and holds ``n - 1`` more
    rows. Every line shows a kind other than reset (damage that hides no
    floor) and holds at most MAX_DEPTH opening brackets."""
    assert per <= MAX_DEPTH - 8
    lines = [fmt.frame(_row(first)[:-1] + b',"meta":{"z":' + b"[" * per + b'{"kind":"message"}')]
    lines += [fmt.frame(b"," + b"[" * per + b'{"kind":"message"}') for _ in range(n - 2)]
    rest = b"".join(b" " + _row(first + 1 + i) for i in range(n - 1))
    lines.append(fmt.frame(b"]" * (per * (n - 1)) + b"}}" + rest))
    for line in lines:
        assert fmt.decode_line(line[:-1]) is None
        assert line.translate(None, bytes(b for b in range(256) if b not in b"[{")).__len__() \
            <= MAX_DEPTH
    return lines


@pytest.mark.parametrize(("n", "per"), [(2, 0), (3, 200), (6, 240)],
                         ids=["shallow", "500-deep", "1200-deep"])
def test_the_window_read_gives_no_row_for_lines_that_decode_only_together(
    tmp_path: Path, n: int, per: int,
) -> None:
    lines = spanning(2, n, per)
    path = tmp_path / "seg"
    path.write_bytes(fmt.encode_line({"seq": 1, "kind": "message"}) + b"".join(lines))
    got = [(r.offset, r.data) for r in rowread.segment_rows(str(path), 1)]
    assert got == [(0, {"seq": 1, "kind": "message"})]  # what decode_line gives line by line


def _planted(root: Path, n: int, per: int) -> Any:
    """A history of one appended row, then ``spanning`` lines written into its
    segment (an untracked edit: every byte on disk may be hostile)."""
    h = Store(str(root), durability="off").history("w")
    h.append(msg("appended"))
    with open(root / "w" / "seg-00000001.jsonl", "ab") as f:
        f.write(b"".join(spanning(2, n, per)))
    return Store(str(root), durability="off").history("w")


@pytest.mark.parametrize(("n", "per"), [(2, 0), (6, 240)], ids=["shallow", "1200-deep"])
def test_check_and_the_view_see_the_lines_as_the_log_reads_them(
    tmp_path: Path, n: int, per: int,
) -> None:
    h = _planted(tmp_path, n, per)
    with pytest.raises(HistoryDamaged, match="line fails verification"):
        list(h.rows())  # line by line: damage
    # The view serves the appended row alone (the damage shows a message
    # kind, so it hides no floor), never a value read across lines.
    assert [r.data["parts"][0]["text"] for r in h.provider_view()] == ["appended"]
    done = subprocess.run([PYTHON, "-m", "ledger.cli", "--root", str(tmp_path), "check", "w"],
                          env=subprocess_env(), capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"w: damaged: {n} damage" in done.stdout
    size = os.path.getsize(tmp_path / "w" / "seg-00000001.jsonl")
    assert f"(1 segments, 1 rows, {size} bytes;" in done.stdout
