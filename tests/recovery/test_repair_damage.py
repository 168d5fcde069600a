"""Seeded damage loops in the spirit of ZODB's testRecover.

Every case damages a real history's segment files (NUL blocks, truncation at
every byte, bit flips, duplicated and swapped lines), runs ``repair`` (the
salvage policy) and checks the oracle:

- the live batches (leaving out the manual resets repair put in) are exactly
  the committed batches whose lines still stand intact as whole lines in the
  damaged files, each once, in the order of their first occurrence: nothing
  invented, nothing torn, nothing duplicated;
- every removed byte is in the quarantine at its source offset, and the
  damaged bytes minus the quarantined ranges are the new bytes minus the
  inserted resets;
- every live line that stood at or before the newest privacy floor of the
  damaged files still stands at or before the newest floor (fail closed);
- the result checks clean, and a second repair changes no byte;
- an undamaged history comes out byte-identical.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger.core.format import files as ffmt
from ledger.transcript.store import Store
from recovery.check import check
from recovery.repair import repair
from tests.helpers.recovery import (
    build,
    fast_scratch,
    live_batches,
    newest_floor_lines,
    quarantined,
    seg_files,
    whole_occurrences,
)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[bytes, ...]]]:
    root = tmp_path_factory.mktemp("template")
    b = build(root, small=True)
    return b.path, b.batches


@pytest.fixture(scope="module")
def multi(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[bytes, ...]]]:
    root = tmp_path_factory.mktemp("multi")
    b = build(root, segment_bytes=600)
    assert len(seg_files(b.path)) >= 3
    return b.path, b.batches


def _all_files(wsdir: Path) -> dict[str, bytes]:
    out = {}
    for dirpath, _, names in os.walk(wsdir):
        for name in names:
            full = Path(dirpath) / name
            out[str(full.relative_to(wsdir))] = full.read_bytes()
    return out


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    path = fast_scratch(tmp_path)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _place(tmp: Path, files: dict[str, bytes]) -> Path:
    ws = Path(tempfile.mkdtemp(dir=tmp)) / "ws"
    ws.mkdir()
    (ws / ffmt.FORMAT_NAME).write_bytes(ffmt.FORMAT_TEXT)
    for name, data in files.items():
        (ws / name).write_bytes(data)
    return ws


def assert_oracle(ws: Path, damaged: dict[str, bytes], batches: list[tuple[bytes, ...]]) -> int:
    """Repair ``ws`` and check the oracle; returns how many resets repair put in."""
    floor_before = newest_floor_lines(ws)
    h = Store(ws.parent, durability="off").history(ws.name)
    rep = repair(h)
    assert rep.exit_code() == 0, rep.text()
    assert rep.after is not None and rep.after.ok, rep.after.text() if rep.after else ""

    live, recovered = live_batches(ws)
    expected = []
    for name in sorted(damaged):
        expected += [batches[k] for _, k in whole_occurrences(damaged[name], batches)]
    seen: set[tuple[bytes, ...]] = set()
    dedup = []
    for b in expected:
        if b not in seen:
            seen.add(b)
            dedup.append(b)
    assert live == dedup

    after = seg_files(ws)
    q = quarantined(ws)
    resets = {row["meta"]["recovered"] if isinstance(row["meta"]["recovered"], str)
              else row["meta"]["recovered"][0] for row in recovered}
    manifest_entries = {e for e in resets}
    assert len(manifest_entries) == len(recovered)
    for name, data in damaged.items():
        ranges = sorted((off, blob) for src, off, blob in q if src == name)
        kept = b""
        pos = 0
        for off, blob in ranges:
            assert data[off : off + len(blob)] == blob, "quarantined bytes differ from the source"
            assert off >= pos
            kept += data[pos:off]
            pos = off + len(blob)
        kept += data[pos:]
        new = after.get(name, b"")
        stripped = b"".join(
            line + b"\n" for line in new.split(b"\n")[:-1] if b'"recovered"' not in line
        )
        assert kept == stripped

    floor_after = set(newest_floor_lines(ws))
    live_now = {line for line in b"".join(after.values()).split(b"\n") if line}
    for line in floor_before:
        if line in live_now:
            assert line in floor_after, "a row moved past the privacy floor"

    snapshot = _all_files(ws)
    again = repair(h)
    assert not again.changed and again.exit_code() == 0
    assert _all_files(ws) == snapshot
    return len(recovered)


def test_undamaged_history_comes_out_byte_identical(tmp_path: Path) -> None:
    b = build(tmp_path / "s", segment_bytes=700)
    before = _all_files(b.path)
    dry = repair(b.history, dry_run=True)
    assert not dry.changed and dry.exit_code() == 0
    rep = repair(b.history)
    assert not rep.changed and rep.exit_code() == 0 and not rep.removals
    assert _all_files(b.path) == before
    assert check(b.history).findings == []


def test_truncation_at_every_byte(scratch: Path, template: tuple[Path, list]) -> None:
    src, batches = template
    files = seg_files(src)
    assert len(files) == 1
    (name, data), = files.items()
    assert len(data) <= 2048
    resets = 0
    for cut in range(len(data) + 1):
        damaged = {name: data[:cut]}
        ws = _place(scratch, damaged)
        resets += assert_oracle(ws, damaged, batches) > 0
    # Cuts inside the manual reset (past its "kind") and anywhere inside the
    # rollover batch leave a reset in their place: that path really ran.
    assert resets > len(data) // 3


@pytest.mark.parametrize("seed", range(40))
def test_nul_blocks(scratch: Path, multi: tuple[Path, list], seed: int) -> None:
    src, batches = multi
    rnd = random.Random(seed)
    files = seg_files(src)
    for _ in range(rnd.randint(1, 3)):
        name = rnd.choice(sorted(files))
        data = bytearray(files[name])
        if not data:
            continue
        at = rnd.randrange(len(data))
        size = rnd.randint(1, 64)
        if rnd.random() < 0.5:
            data[at : at + size] = b"\x00" * min(size, len(data) - at)
        else:
            data[at:at] = b"\x00" * size
        files[name] = bytes(data)
    ws = _place(scratch, files)
    assert_oracle(ws, files, batches)


@pytest.mark.parametrize("seed", range(60))
def test_bit_flips(scratch: Path, multi: tuple[Path, list], seed: int) -> None:
    src, batches = multi
    rnd = random.Random(1000 + seed)
    files = seg_files(src)
    for _ in range(rnd.randint(1, 4)):
        name = rnd.choice(sorted(files))
        data = bytearray(files[name])
        at = rnd.randrange(len(data))
        data[at] ^= 1 << rnd.randrange(8)
        files[name] = bytes(data)
    ws = _place(scratch, files)
    assert_oracle(ws, files, batches)


@pytest.mark.parametrize("seed", range(40))
def test_duplicated_and_swapped_lines(scratch: Path, multi: tuple[Path, list], seed: int) -> None:
    src, batches = multi
    rnd = random.Random(2000 + seed)
    files = seg_files(src)
    for _ in range(rnd.randint(1, 3)):
        name = rnd.choice(sorted(files))
        lines = files[name].split(b"\n")[:-1]
        i = rnd.randrange(len(lines))
        if rnd.random() < 0.5:
            j = rnd.randrange(len(lines) + 1)
            lines.insert(j, lines[i])
        elif len(lines) > 1:
            j = min(i + 1, len(lines) - 1) if rnd.random() < 0.7 else rnd.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        files[name] = b"".join(line + b"\n" for line in lines)
    ws = _place(scratch, files)
    assert_oracle(ws, files, batches)


def test_whole_segment_lost_and_torn_tail(scratch: Path, multi: tuple[Path, list]) -> None:
    src, batches = multi
    files = seg_files(src)
    names = sorted(files)
    del files[names[1]]
    files[names[-1]] = files[names[-1]][:-7]
    ws = _place(scratch, files)
    assert_oracle(ws, files, batches)
