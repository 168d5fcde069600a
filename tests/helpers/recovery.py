"""Helpers for the recovery tests (tests/recovery/test_history_builder.py
checks ``build``).

``build`` writes a small real history through the public API and returns the
committed batches as the exact bytes of their lines, which the damage oracles
compare against.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger.core.format import files as ffmt
from ledger.core.format import rows as fmt
from ledger.storage.files import segments as segs
from ledger.storage.files.index import scan_segment
from ledger.storage.files.retention import read_manifest
from ledger.transcript.history import History
from ledger.transcript.store import Store
from tests.helpers import msg


@dataclass
class Built:
    store: Store
    history: History
    batches: list[tuple[bytes, ...]]  # committed batches: the bytes of their lines (with \n)

    @property
    def path(self) -> Path:
        return Path(self.history.engine.path)


def build(root: Path, ws: str = "ws", *, segment_bytes: int = 1 << 20, small: bool = False,
          durability: str = "off") -> Built:
    """A history with messages, a manual clear, a rollover and a compaction."""
    store = Store(root, segment_bytes=segment_bytes, durability=durability)
    h = store.history(ws)
    if small:
        h.append_many([msg("a ü"), msg("b", "assistant")])
        h.clear_soft()
        h.rollover([msg("f")], lead_in="w2")
        h.append(msg("g", "assistant"))
    else:
        for i in range(6):
            h.append_many([msg(f"q{i} ünïcode"), msg(f"a{i}", "assistant", meta={"n": i})])
            if i == 2:
                h.clear_soft()
            if i == 3:
                h.rollover([msg("trigger")], lead_in="new window")
            if i == 4:
                h.compact([msg("summary", "assistant")])
        h.append(msg("tail"))
    return Built(store, h, committed_batches(Path(h.engine.path)))


def committed_batches(wsdir: Path) -> list[tuple[bytes, ...]]:
    out: list[tuple[bytes, ...]] = []
    cur: list[bytes] = []
    cur_id = None
    for n in segs.list_segments(str(wsdir)):
        for line in segs.iter_lines(segs.segment_path(str(wsdir), n)):
            row = fmt.decode_line(line.data)
            assert row is not None, "build() must produce a clean history"
            raw = line.data + b"\n"
            if row["batch"]["i"] == 0:
                if cur:
                    out.append(tuple(cur))
                cur, cur_id = [raw], row["batch"]["id"]
            else:
                assert row["batch"]["id"] == cur_id
                cur.append(raw)
    if cur:
        out.append(tuple(cur))
    return out


def seg_files(wsdir: Path) -> dict[str, bytes]:
    return {ffmt.segment_name(n): Path(segs.segment_path(str(wsdir), n)).read_bytes()
            for n in segs.list_segments(str(wsdir))}


def all_files(wsdir: Path) -> dict[str, bytes]:
    out = {}
    for dirpath, _, names in os.walk(wsdir):
        for name in names:
            full = Path(dirpath) / name
            out[str(full.relative_to(wsdir))] = full.read_bytes()
    return out


def live_lines(wsdir: Path) -> list[tuple[bytes, dict[str, Any]]]:
    out = []
    for n in segs.list_segments(str(wsdir)):
        for line in segs.iter_lines(segs.segment_path(str(wsdir), n)):
            row = fmt.decode_line(line.data)
            assert row is not None and line.complete, f"unreadable line left in {n}"
            out.append((line.data + b"\n", row))
    return out


def live_batches(wsdir: Path) -> tuple[list[tuple[bytes, ...]], list[dict[str, Any]]]:
    """Live batches without the resets repair put in (and those resets)."""
    batches: list[tuple[bytes, ...]] = []
    recovered: list[dict[str, Any]] = []
    cur: list[bytes] = []
    for raw, row in live_lines(wsdir):
        if isinstance(row.get("meta"), dict) and "recovered" in row["meta"]:
            recovered.append(row)
            continue
        cur.append(raw)
        if row["batch"]["i"] == row["batch"]["n"] - 1:
            batches.append(tuple(cur))
            cur = []
    assert not cur, "a live batch is incomplete"
    return batches, recovered


def whole_occurrences(data: bytes, batches: list[tuple[bytes, ...]]) -> list[tuple[int, int]]:
    """(offset, index) of the first occurrence of each original batch whose
    lines stand intact and consecutive as whole lines in ``data``."""
    found = []
    for k, b in enumerate(batches):
        blob = b"".join(b)
        start = 0
        while True:
            pos = data.find(blob, start)
            if pos < 0:
                break
            if pos == 0 or data[pos - 1 : pos] == b"\n":
                found.append((pos, k))
                break
            start = pos + 1
    return sorted(found)


def newest_floor_lines(wsdir: Path, files: dict[str, bytes] | None = None) -> list[bytes]:
    """The raw lines at or before the newest privacy floor, as the store's own
    index (ledger.storage.files.index.scan_segment) sees the files."""
    floor = None
    numbers = segs.list_segments(str(wsdir))
    for n in numbers:
        info = scan_segment(str(wsdir), n, ffmt.ZERO_STAMP)
        for b in info.bounds:
            if b.is_floor:
                floor = (n, b.offset)
    if floor is None:
        return []
    out = []
    for n in numbers:
        data = Path(segs.segment_path(str(wsdir), n)).read_bytes()
        for line in segs.split_lines(data):
            if (n, line.offset) <= floor:
                out.append(line.data)
    return out


def quarantined(wsdir: Path) -> list[tuple[str, int, bytes]]:
    out = []
    for e in read_manifest(str(wsdir)):
        data = (wsdir / ffmt.QUARANTINE_DIR / f"{e.entry}.bin").read_bytes()
        assert len(data) == e.length
        out.append((e.source, e.offset, data))
    return out


def fast_scratch(fallback: Path) -> Path:
    """A scratch directory on tmpfs when the machine has one (the damage loops
    make thousands of small files; a disk-backed /tmp makes each repair cost
    milliseconds of metadata I/O), else ``fallback``. The caller removes it."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return Path(tempfile.mkdtemp(prefix="tledger-test-", dir=shm))
    fallback.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="scratch-", dir=fallback))


def copy_ws(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, symlinks=True)

