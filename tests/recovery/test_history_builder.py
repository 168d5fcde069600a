"""The recovery tests' history builder (``tests.helpers.recovery.build``)
writes whole batches, small enough for the damage loops."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.recovery import build


def test_build_produces_whole_batches(tmp_path: Path) -> None:
    b = build(tmp_path / "s", small=True)
    assert [len(x) for x in b.batches] == [2, 1, 3, 1]
    assert sum(len(x) for x in b.batches) == 7
    assert len(b"".join(b"".join(x) for x in b.batches)) <= 2048
