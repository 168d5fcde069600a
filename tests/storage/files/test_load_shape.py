"""The shape of a loaded file workspace (``load.py``, the file side of
``tledger migrate``): the segments appends and their automatic merges keep,
not one file per cap -- so a loaded long history forks, appends and checks
over tens of files, with every row byte for byte."""

from __future__ import annotations

from pathlib import Path

from ledger import Store
from ledger.core.format import files as ffmt
from ledger.storage.files.merge import FANOUT, classes
from recovery.check import check
from tests.helpers import msg

CAP = 600


def _sizes(path: Path) -> list[int]:
    return [p.stat().st_size for p in sorted(path.iterdir())
            if p.name.startswith(ffmt.SEGMENT_PREFIX)]


def _source(n: int) -> Store:
    mem = Store("memory://", durability="off")
    h = mem.history("src")
    for i in range(n):
        h.append_many([msg(f"q{i} " + "x" * 80), msg(f"a{i} " + "y" * 40, "assistant")])
    return mem


def test_a_loaded_history_has_the_shape_appends_keep(tmp_path: Path) -> None:
    src = _source(1500).history("src")  # about 450 KB of lines
    store = Store(tmp_path, durability="off", segment_bytes=CAP)
    got = store.history("dst").engine.load_rows(src.rows())
    assert [r.line for r in store.history("dst").rows()] == [r.line for r in src.rows()]
    sizes = _sizes(tmp_path / "dst")
    assert sum(sizes) == got.bytes
    cls = classes(CAP)
    # Oldest first, by class: the biggest, then fewer than FANOUT of each
    # smaller class (never a bigger class after a smaller one); the last
    # segment, the active one, is below the cap or one batch.
    klass = [max(i for i, c in enumerate(cls) if s >= c) for s in sizes[:-1]]
    assert klass == sorted(klass, reverse=True), sizes
    assert klass[0] == max(i for i, c in enumerate(cls) if got.bytes >= c), sizes
    assert all(klass.count(k) < FANOUT for k in range(len(cls) - 1)), sizes
    assert sizes[-1] < 2 * CAP, sizes
    assert len(sizes) < got.bytes // CAP // 4  # one file per cap would be ~750
    assert check(store.history("dst")).ok
    fork = store.history("dst").fork("f")
    assert [r.line for r in fork.rows()][:-1] == [r.line for r in src.rows()]
    assert store.history("dst").append(msg("after the load")).seqs == [3001]


def test_a_small_load_is_one_segment(tmp_path: Path) -> None:
    src = _source(3).history("src")  # under 4 KiB
    store = Store(tmp_path, durability="off", segment_bytes=4096)
    store.history("dst").engine.load_rows(src.rows())
    assert len(_sizes(tmp_path / "dst")) == 1
    assert [r.line for r in store.history("dst").rows()] == [r.line for r in src.rows()]


def test_the_classes_end_at_the_biggest_automatic_merge() -> None:
    assert classes(64 << 10) == [64 << 10, 1 << 20, 16 << 20]
    assert classes(600) == [600, 9600, 153600, 2457600]
