"""The provider view's second floor (``bench.floors.read_decode_kept``) and
the per-call allocator state the files bench records beside the view
(``bench.series.alloc_state``). Run: ``python -m pytest bench/test_view_floors.py``."""

from __future__ import annotations

import gc
import mmap
from pathlib import Path

import msgspec

from bench import floors
from bench.series import alloc_state


def _segment(tmp_path: Path, rows: int) -> tuple[str, int]:
    """A file of ``rows`` JSON lines after a 3-line head the floors skip
    (they start at the head's end), the last line without a newline."""
    head = b'{"seq":-1}\n' * 3
    body = b"\n".join(msgspec.json.encode({"seq": i, "parts": [{"type": "text", "text": "x" * i}]})
                      for i in range(rows))
    path = tmp_path / "seg"
    path.write_bytes(head + body)
    return str(path), len(head)


def test_the_kept_floor_decodes_what_the_floor_decodes(tmp_path: Path) -> None:
    span = _segment(tmp_path, 2500)
    assert floors.read_decode_kept([span]) == floors.read_decode([span]) == 2500


def test_the_kept_floor_keeps_its_rows_and_the_floor_does_not(tmp_path: Path) -> None:
    # What the second ratio is for: rows kept until the end count against the
    # collector's threshold (every dict and list), as a view's rows do.
    rows = 4 * gc.get_threshold()[0]
    span = _segment(tmp_path, rows)
    state = alloc_state({"floor": lambda: floors.read_decode([span]),
                         "kept": lambda: floors.read_decode_kept([span])}, runs=3)
    assert state["floor"]["gc_passes"] == 0
    assert state["kept"]["gc_passes"] >= 4


def test_alloc_state_counts_fresh_pages_per_call() -> None:
    def fresh_mib() -> None:
        with mmap.mmap(-1, 1 << 20) as m:
            for at in range(0, 1 << 20, mmap.PAGESIZE):
                m[at] = 1

    state = alloc_state({"fresh": fresh_mib, "none": lambda: None}, runs=5)
    assert state["fresh"]["minor_faults"] >= (1 << 20) // mmap.PAGESIZE
    assert state["none"]["minor_faults"] < 1
    assert state["none"]["gc_passes"] == 0
