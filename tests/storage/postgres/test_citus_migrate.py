"""``tledger migrate`` files -> Citus -> files: every row byte-identical, the
segments the same bytes, and the workspaces spread over both workers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ledger import Store
from ledger.cli import main as cli_main
from tests.helpers import msg, segment_files
from tests.helpers.citus import node_of
from tests.storage.postgres.test_engine import _filled_file_store, raw_lines, tl

psycopg = pytest.importorskip("psycopg", reason="the [postgres] extra is not installed")


def log_bytes(root: Path, ws: str) -> bytes:
    """Every segment of a file workspace, in order, as one byte string."""
    return b"".join(p.read_bytes() for p in segment_files(root / ws))


def test_migrate_files_to_citus_and_back_is_byte_identical(
    citus_root: str, citus_cluster: Any, tmp_path: Path
) -> None:
    from tests.conftest import REAL_TRANSCRIPTS

    real = REAL_TRANSCRIPTS if REAL_TRANSCRIPTS.is_dir() else None  # an import when present
    files = _filled_file_store(tmp_path / "files", real)
    for i in range(6):
        files.history(f"w-{i}").append_many([msg(f"hello {i}"), msg(f"hi {i}", "assistant")])
    names = sorted(files.workspaces())
    assert cli_main(["migrate", str(tmp_path / "files"), citus_root]) == 0
    citus = Store(citus_root)
    assert citus.workspaces() == names
    for ws in names:
        assert raw_lines(citus, ws) == raw_lines(files, ws)
        f_snap, c_snap = files.history(ws).snapshot(), citus.history(ws).snapshot()
        assert (c_snap.next_seq, c_snap.window_seq) == (f_snap.next_seq, f_snap.window_seq)
    assert tl(citus_root, "check", "chat").returncode == 0
    with psycopg.connect(citus_root) as conn:
        where = node_of(conn)
        assert {where(ws) for ws in names} == {w.port for w in citus_cluster.workers}
    back = tmp_path / "back"
    assert cli_main(["migrate", citus_root, str(back)]) == 0
    for ws in names:
        assert raw_lines(Store(back), ws) == raw_lines(files, ws)
        assert log_bytes(back, ws) == log_bytes(tmp_path / "files", ws)
