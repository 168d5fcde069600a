"""``syncfs.sync_filesystem``: the one flush a fork makes (``fork.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.storage.files import syncfs


def test_it_flushes_a_directory_and_names_a_bad_one(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x")
    syncfs.sync_filesystem(str(tmp_path))  # no error on a directory
    with pytest.raises(OSError):
        syncfs.sync_filesystem(str(tmp_path / "missing"))
    with pytest.raises(OSError):
        syncfs.sync_filesystem(str(tmp_path / "f"))  # not a directory


def test_without_syncfs_in_the_c_library_it_syncs_everything(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(syncfs, "_SYNCFS", None)
    monkeypatch.setattr(syncfs.os, "sync", lambda: calls.append("sync"))
    syncfs.sync_filesystem(str(tmp_path))
    assert calls == ["sync"]


def test_a_failing_flush_is_an_os_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    monkeypatch.setattr(syncfs, "_SYNCFS", lambda fd: -1)
    with pytest.raises(OSError, match="syncfs of"):
        syncfs.sync_filesystem(str(tmp_path))
