"""The PostgreSQL engine beyond the shared contract: its schema version, honest
failures of a real connection, check and repair, backup, migrate both ways,
and the CLI with a postgresql:// root. Every test runs on a real server
(tests/helpers/pg_cluster.py) with a fresh database."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ledger import CommitFailed, CommitUncertain, Store
from ledger.cli import main as cli_main
from ledger.core.errors import FormatError
from ledger.storage.postgres import workspace as pg_workspace
from ledger.storage.postgres.connect import close_pools
from tests.helpers import cli_proc, msg, subprocess_env

psycopg = pytest.importorskip("psycopg", reason="the [postgres] extra is not installed")


def raw_lines(store: Store, ws: str) -> list[bytes]:
    return [r.line for r in store.history(ws).rows()]


def tl(root: str, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return cli_proc.run(["--root", root, *args], stdin=stdin, timeout=120,
                        env=subprocess_env())


# --- schema ---------------------------------------------------------------------------


def test_a_newer_schema_refuses_to_open(pg_root: str) -> None:
    Store(pg_root).history("ws").append(msg("kept"))
    close_pools(pg_root)
    with psycopg.connect(pg_root, autocommit=True) as conn:
        conn.execute("UPDATE tl_schema SET version = 99")
    with pytest.raises(FormatError, match="schema version 99"):
        Store(pg_root)
    close_pools(pg_root)
    with psycopg.connect(pg_root, autocommit=True) as conn:
        conn.execute("UPDATE tl_schema SET version = 1")
    assert [r.to_dict()["parts"][0]["text"] for r in Store(pg_root).history("ws").rows()] == \
        ["kept"]


def test_rows_keep_their_bytes_and_the_window_is_read_by_index(pg_root: str) -> None:
    h = Store(pg_root).history("ws")
    h.append({"role": "user", "parts": [], "zeta": 1, "alpha": {"b": 2, "a": 1}})
    line = next(iter(h.rows())).line
    assert b'"zeta":1,"alpha":{"b":2,"a":1}' in line  # unknown fields, in the caller's order
    for i in range(50):
        h.append(msg(f"old {i}"))
    h.rollover([msg("go on")])
    with psycopg.connect(pg_root) as conn:
        plan = "\n".join(r[0] for r in conn.execute(
            "EXPLAIN SELECT seq, raw FROM tl_rows WHERE workspace = 'ws' AND seq > 52 "
            "ORDER BY seq").fetchall())
    assert "Index" in plan
    assert [r.kind for r in h.provider_view()] == ["lead_in", "message"]


# --- honest failures --------------------------------------------------------------------


def _kill_own_backend(conn: Any) -> None:
    with psycopg.connect(conn.info.dsn, autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))


def test_a_connection_lost_before_commit_is_commit_failed(
    pg_root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = Store(pg_root).history("ws")
    h.append(msg("before"))
    real = pg_workspace.PgWorkspace._insert

    def insert_then_lose(self: Any, conn: Any, *args: Any) -> None:
        real(self, conn, *args)
        _kill_own_backend(conn)  # the server goes away before COMMIT

    monkeypatch.setattr(pg_workspace.PgWorkspace, "_insert", insert_then_lose)
    with pytest.raises(CommitFailed) as info:
        h.append_many([msg("lost a"), msg("lost b")], batch_id="turn-2")
    assert info.value.batch_id == "turn-2"
    monkeypatch.undo()
    assert [r.seq for r in h.rows()] == [1]  # nothing of the batch
    assert h.append(msg("after"), batch_id="turn-3").seqs == [2]  # a new connection


@pytest.mark.parametrize("committed", [False, True])
def test_a_connection_lost_during_commit_is_uncertain_and_a_retry_never_duplicates(
    pg_root: str, monkeypatch: pytest.MonkeyPatch, committed: bool
) -> None:
    store = Store(pg_root)
    h = store.history("ws")
    h.append(msg("before"))
    real_execute = psycopg.Connection.execute

    def execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        if query == "COMMIT":
            if committed:  # the server committed; the acknowledgement is lost
                real_execute(self, query, *args, **kwargs)
            _kill_own_backend(self)
            return real_execute(self, "SELECT 1")  # raises: the connection is gone
        return real_execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", execute)
    with pytest.raises(CommitUncertain) as info:
        h.append_many([msg("turn a"), msg("turn b")], batch_id="turn-7")
    assert info.value.batch_id == "turn-7"
    monkeypatch.undo()
    again = h.append_many([msg("turn a"), msg("turn b")], batch_id="turn-7")
    assert again.seqs == [2, 3]
    texts = [r.to_dict()["parts"][0]["text"] for r in h.rows()]
    assert texts == ["before", "turn a", "turn b"]  # exactly once, either way


# --- check, repair, backup ------------------------------------------------------------


def test_check_finds_a_damaged_row_and_repair_quarantines_its_batch(pg_root: str) -> None:
    h = Store(pg_root).history("ws")
    h.append_many([msg("one"), msg("two", "assistant")])
    h.append(msg("three"))
    assert tl(pg_root, "check", "ws").returncode == 0
    with psycopg.connect(pg_root, autocommit=True) as conn:
        conn.execute("UPDATE tl_rows SET raw = overlay(raw placing 'X' from 30 for 1) "
                     "WHERE workspace = 'ws' AND seq = 2")
    found = tl(pg_root, "check", "ws", "--json")
    assert found.returncode == 1
    report = json.loads(found.stdout)
    assert [f["code"] for f in report["findings"]] == ["bad-row"]
    assert report["findings"][0]["seq"] == 2
    epoch = h.epoch
    fixed = tl(pg_root, "repair", "ws", "--json")
    assert fixed.returncode == 0, fixed.stderr
    assert json.loads(fixed.stdout)["check"]["ok"] is True
    assert [r.to_dict()["parts"][0]["text"] for r in h.rows()] == ["three"]
    assert h.epoch != epoch
    with psycopg.connect(pg_root) as conn:
        assert conn.execute("SELECT count(*) FROM tl_quarantine").fetchone()[0] == 2
    assert tl(pg_root, "repair", "ws", "--dry-run").returncode == 0  # nothing left to do


def test_repair_of_a_row_in_the_middle_converges(pg_root: str) -> None:
    """The gap repair leaves (seqs moved to tl_quarantine) is not damage: check is
    ok afterwards and a second repair has nothing to do (issue 20, item 3)."""
    h = Store(pg_root).history("ws")
    for text in ("one", "two", "three", "four"):
        h.append(msg(text))
    with psycopg.connect(pg_root, autocommit=True) as conn:
        conn.execute("UPDATE tl_rows SET raw = overlay(raw placing 'X' from 30 for 1) "
                     "WHERE workspace = 'ws' AND seq = 2")
    assert tl(pg_root, "check", "ws").returncode == 1
    fixed = tl(pg_root, "repair", "ws", "--json")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert json.loads(fixed.stdout)["quarantined_batches"]
    assert [r.seq for r in h.rows()] == [1, 3, 4]  # seqs are identities: no renumbering
    after = tl(pg_root, "check", "ws", "--json")
    assert after.returncode == 0, after.stdout
    assert json.loads(after.stdout)["findings"] == []
    again = tl(pg_root, "repair", "ws", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["changed"] is False
    assert h.append(msg("five")).seqs == [5]


def test_a_gap_nothing_explains_is_a_notice_not_damage(pg_root: str) -> None:
    """Rows deleted behind the store's back leave a gap no repair can fill: check
    names it as a notice (exit 0) instead of failing forever."""
    h = Store(pg_root).history("ws")
    for text in ("one", "two", "three"):
        h.append(msg(text))
    with psycopg.connect(pg_root, autocommit=True) as conn:
        conn.execute("DELETE FROM tl_rows WHERE workspace = 'ws' AND seq = 2")
    out = tl(pg_root, "check", "ws", "--json")
    assert out.returncode == 0, out.stdout
    [finding] = json.loads(out.stdout)["findings"]
    assert (finding["code"], finding["severity"], finding["seq"]) == ("seq-gap", "notice", 3)
    assert "not in tl_quarantine" in finding["message"]
    assert tl(pg_root, "repair", "ws").returncode == 0


def test_backup_is_a_file_workspace_with_the_same_bytes(pg_root: str, tmp_path: Path) -> None:
    store = Store(pg_root)
    h = store.history("ws")
    h.append_many([msg("a"), msg("b", "assistant")])
    h.clear_soft()
    h.append(msg("c"))
    out = h.backup(str(tmp_path / "root" / "ws"))
    assert out.bytes > 0
    copy = Store(tmp_path / "root")
    assert raw_lines(copy, "ws") == raw_lines(store, "ws")
    assert copy.history("ws").snapshot().floor.seq == 3  # type: ignore[union-attr]


# --- migrate ---------------------------------------------------------------------------


def _filled_file_store(root: Path, real_transcripts: Path | None = None) -> Store:
    store = Store(root, durability="off", segment_bytes=2048)
    h = store.history("chat")
    for i in range(40):
        h.append_many([msg(f"question {i} é 中"), msg(f"answer {i}", "assistant")])
        if i == 15:
            h.clear_soft()
    h.rollover([msg("continue")])
    h.reject(h.snapshot().next_seq - 1)
    h.append({"role": "user", "parts": [], "unknown": {"z": 1, "a": [1, 2]}})
    if real_transcripts is not None:
        from recovery.imports import import_file

        session = next((real_transcripts / "claude-code").glob("*.jsonl"))
        import_file(store, "imported", session, "claude-code")
    return store


def test_migrate_files_to_postgres_and_back_is_byte_identical(
    pg_root: str, tmp_path: Path
) -> None:
    from tests.conftest import REAL_TRANSCRIPTS

    real = REAL_TRANSCRIPTS if REAL_TRANSCRIPTS.is_dir() else None  # an import when present
    files = _filled_file_store(tmp_path / "files", real)
    names = ["chat", "imported"] if real else ["chat"]
    assert cli_main(["migrate", str(tmp_path / "files"), pg_root]) == 0
    pg = Store(pg_root)
    assert pg.workspaces() == names
    for ws in names:
        assert raw_lines(pg, ws) == raw_lines(files, ws)
        assert tl(pg_root, "check", ws).returncode == 0
        assert [r.to_dict() for r in pg.history(ws).provider_view()] == \
            [r.to_dict() for r in files.history(ws).provider_view()]
        f_snap, p_snap = files.history(ws).snapshot(), pg.history(ws).snapshot()
        assert (p_snap.next_seq, p_snap.window_seq) == (f_snap.next_seq, f_snap.window_seq)
    back = tmp_path / "back"
    assert tl(pg_root, "migrate", pg_root, str(back)).returncode == 0
    for ws in names:
        assert raw_lines(Store(back), ws) == raw_lines(files, ws)
        assert tl(str(back), "check", ws).returncode == 0
    again = tl(pg_root, "migrate", str(tmp_path / "files"), pg_root)
    assert again.returncode == 1 and b"already exists" in again.stderr


@pytest.mark.parametrize("direction", ["to_postgres", "to_files"])
def test_a_failed_migration_leaves_no_partial_workspace(
    pg_root: str, tmp_path: Path, direction: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ledger.storage.files import reads

    files = _filled_file_store(tmp_path / "files")
    src, dst = (str(tmp_path / "files"), pg_root)
    if direction == "to_files":
        assert cli_main(["migrate", src, pg_root]) == 0
        src, dst = pg_root, str(tmp_path / "dst")
    real_rows = reads.WorkspaceBase.rows if direction == "to_postgres" \
        else pg_workspace.PgWorkspace.rows

    def rows_then_fail(self: Any, after_seq: Any = None) -> Any:
        for i, row in enumerate(real_rows(self, after_seq)):
            if i == 30:
                raise OSError(5, "Input/output error")  # the source fails mid-way
            yield row

    target = reads.WorkspaceBase if direction == "to_postgres" else pg_workspace.PgWorkspace
    monkeypatch.setattr(target, "rows", rows_then_fail)
    try:
        code: int | None = cli_main(["migrate", src, dst, "--workspace", "chat"])
    except OSError:
        code = None  # the source's own error, raised through
    assert code != 0  # exit 1 when the file engine reports it as CommitFailed
    monkeypatch.undo()
    assert "chat" not in Store(dst).workspaces()
    if direction == "to_files":
        assert [p.name for p in (tmp_path / "dst").iterdir()] == []  # no temp dir left
    assert cli_main(["migrate", src, dst, "--workspace", "chat"]) == 0
    assert raw_lines(Store(dst), "chat") == raw_lines(files, "chat")


# --- the CLI on a postgresql:// root ----------------------------------------------------


def test_the_cli_works_the_same_on_a_postgres_root(pg_root: str) -> None:
    rows = b'{"role":"user","parts":[{"type":"text","text":"find the needle"}]}\n'
    assert json.loads(tl(pg_root, "append", "ws", stdin=rows).stdout)["seqs"] == [1]
    assert tl(pg_root, "clear", "ws").returncode == 0
    assert tl(pg_root, "append", "ws", stdin=rows).returncode == 0
    assert tl(pg_root, "ls").stdout.split() == [b"ws"]
    stat = json.loads(tl(pg_root, "stat", "ws", "--json").stdout)
    assert (stat["engine"], stat["rows"], stat["window"]) == ("postgresql", 3, 2)
    found = json.loads(tl(pg_root, "history", "ws", "search", "needle").stdout)
    assert [item["seq"] for item in found["items"]] == [3]  # never row 1: the floor
    assert [json.loads(line)["seq"] for line in tl(pg_root, "rows", "ws").stdout.splitlines()] \
        == [1, 2, 3]
    demo = tl(pg_root, "demo")
    assert demo.returncode == 2 and b"directory" in demo.stderr
    assert tl(pg_root, "delete", "ws", "--yes").returncode == 0
    assert tl(pg_root, "ls").stdout == b""


def test_a_damaged_import_quarantines_into_the_database(pg_root: str, tmp_path: Path) -> None:
    """Import salvage on a postgresql:// root: the unreadable tail and the record the
    store refuses go to tl_quarantine (once, however often it is imported)."""
    def record(uuid: str, content: str, extra: str = "") -> str:
        return ('{"parentUuid":null,"isSidechain":false,"sessionId":"s","type":"user",'
                f'"uuid":"{uuid}","timestamp":"2026-01-01T00:00:00.000Z"{extra},'
                f'"message":{{"role":"user","content":"{content}"}}}}\n')

    src = tmp_path / "session.jsonl"
    src.write_text(record("u1", "kept") + record("u2", "huge", ',"n":18446744073709551616')
                   + record("u3", "also kept") + '{"type":"user","mess')
    for _ in range(2):
        done = tl(pg_root, "import-claude-code", str(src), "ws")
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert [q["line"] for q in report["quarantine"]] == [2, 4]
    h = Store(pg_root).history("ws")
    assert [r.to_dict()["parts"][0]["text"] for r in h.rows()] == ["kept", "also kept"]
    with psycopg.connect(pg_root) as conn:
        reasons = [r[0] for r in conn.execute(
            "SELECT reason FROM tl_quarantine WHERE workspace = 'ws' ORDER BY id")]
    assert len(reasons) == 2 and "64-bit" in reasons[0] and "torn-tail" in reasons[1]
