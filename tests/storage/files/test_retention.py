"""Retention: deleting workspaces (with crashes at every step), backups, the
quarantine (manifest, dedupe, clean-up by age) and their CLI commands."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from ledger.cli import main
from ledger.cli.core import stat_report
from ledger.core.errors import CommitFailed, LedgerError
from ledger.core.format import files as ffmt
from ledger.storage.files import retention
from ledger.transcript.store import Store
from recovery.check import check
from tests.helpers import msg
from tests.helpers.recovery import build

DELETE_STEPS = ["tombstone", "locked", "renamed", "trash-removed", "done"]


def _rows(h: object) -> list[dict]:
    return [r.to_dict() for r in h.rows()]  # type: ignore[attr-defined]


def _leftovers(root: Path, ws: str) -> list[str]:
    return sorted(n for n in os.listdir(root) if n == ws or n.startswith(f".{ws}."))


def test_delete_removes_everything(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    b = build(tmp_path / "s")
    b.store.history("other").append(msg("stays"))
    assert retention.delete_workspace(b.store, "ws") is True
    assert _leftovers(tmp_path / "s", "ws") == []
    assert b.store.workspaces() == ["other"]
    assert retention.delete_workspace(b.store, "ws") is False
    root = str(tmp_path / "s")
    with pytest.raises(SystemExit):
        main(["--root", root, "delete"])
    assert main(["--root", root, "delete", "other"]) == 2  # without --yes
    assert main(["--root", root, "delete", "other", "--yes"]) == 0
    assert b.store.workspaces() == []
    assert "deleted" in capsys.readouterr().out


def test_tombstone_makes_concurrent_writers_fail(tmp_path: Path) -> None:
    b = build(tmp_path / "s")
    tomb = Path(retention.tombstone_path(b.store, "ws"))
    tomb.write_text("{}")
    with pytest.raises(CommitFailed, match="deleted"):
        b.history.append(msg("late"))
    assert b.store.workspaces() == []
    shutil.rmtree(b.path)
    with pytest.raises(CommitFailed):
        b.store.history("ws").append(msg("later"))
    assert not b.path.exists()  # not recreated
    assert retention.delete_workspace(b.store, "ws") is True
    assert _leftovers(tmp_path / "s", "ws") == []


@pytest.mark.parametrize("step", DELETE_STEPS)
def test_delete_crash_at_every_step_then_finishes(tmp_path: Path, step: str) -> None:
    b = build(tmp_path / "s")

    def boom(s: str) -> None:
        if s == step:
            raise OSError(f"injected at {s}")

    retention.FAULT_HOOK = boom
    try:
        # A LedgerError, never a raw OSError: DeletePending once the tombstone is there.
        with pytest.raises(LedgerError, match="injected at"):
            retention.delete_workspace(b.store, "ws")
    finally:
        retention.FAULT_HOOK = None
    assert "ws" not in b.store.workspaces()
    if step != "done":
        with pytest.raises(CommitFailed):
            b.store.history("ws").append(msg("must not land"))
    retention.delete_workspace(b.store, "ws")
    assert _leftovers(tmp_path / "s", "ws") == []
    r = b.store.history("ws").append(msg("a new life"))
    assert r.seqs == [1]


@pytest.mark.parametrize("step", DELETE_STEPS)
def test_delete_sigkill_at_every_step(tmp_path: Path, step: str) -> None:
    b = build(tmp_path / "s")
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child dies by SIGKILL
        def die(s: str) -> None:
            if s == step:
                os.kill(os.getpid(), signal.SIGKILL)

        retention.FAULT_HOOK = die
        try:
            retention.delete_workspace(Store(b.store.root), "ws")
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status)
    assert "ws" not in b.store.workspaces()
    retention.delete_workspace(b.store, "ws")
    assert _leftovers(tmp_path / "s", "ws") == []


def test_backup_is_consistent_and_restorable(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    b = build(tmp_path / "s", segment_bytes=700)
    retention.quarantine_bytes(b.history.engine.path, b"aside", source="x", offset=0, reason="test")
    dest = tmp_path / "backups" / "ws-copy"
    dest.parent.mkdir()
    out = b.history.backup(str(dest))
    assert out.files >= 3
    copy = Store(dest.parent).history(dest.name)
    assert check(copy).findings == []
    assert _rows(copy) == _rows(b.history)
    assert (dest / ffmt.QUARANTINE_DIR / retention.MANIFEST_NAME).exists()
    with pytest.raises(LedgerError, match="exists"):
        b.history.backup(str(dest))
    restored = tmp_path / "restored"
    restored.mkdir()
    shutil.copytree(dest, restored / "ws")
    h = Store(restored).history("ws")
    assert _rows(h) == _rows(b.history) and check(h).ok
    high = b.history.snapshot().next_seq
    assert h.append(msg("after restore")).seqs == [high]
    code = main(["--root", str(tmp_path / "s"), "backup", "ws", str(tmp_path / "b2"), "--json"])
    assert code == 0 and json.loads(capsys.readouterr().out)["dest"] == str(tmp_path / "b2")


def test_quarantine_manifest_dedupe_verify_and_clean(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    b = build(tmp_path / "s")
    path = b.history.engine.path
    q = retention.Quarantine(path)
    e1 = q.put(b"one", source="seg-00000001.jsonl", offset=10, reason="r1")
    assert retention.quarantine_bytes(path, b"one", source="seg-00000001.jsonl", offset=10,
                                      reason="again") == e1
    e2 = retention.quarantine_bytes(path, b"two!", source="chat.jsonl", offset=0, reason="r2")
    entries = retention.Quarantine(path).entries()
    assert [(e.entry, e.source, e.offset, e.length, e.reason) for e in entries] == [
        (e1, "seg-00000001.jsonl", 10, 3, "r1"), (e2, "chat.jsonl", 0, 4, "r2")]
    assert entries[0].digest == retention.digest_hex(b"one") and len(entries[0].digest) == 32
    assert q.read(e2) == b"two!" and q.verify() == []
    (Path(path) / ffmt.QUARANTINE_DIR / f"{e2}.bin").write_bytes(b"tampered")
    assert [p["entry"] for p in q.verify()] == [e2]
    assert stat_report(b.history)["quarantine_bytes"] > 0

    q = retention.Quarantine(path)
    assert q.clean(3600, now=time.time()) == {"removed": 0, "bytes": 0}
    later = time.time() + 7200
    assert q.clean(3600, now=later)["removed"] == 2
    assert retention.Quarantine(path).entries() == [] and retention.Quarantine(path).verify() == []
    retention.quarantine_bytes(path, b"three", source="s", offset=1, reason="r")
    code = main(["--root", str(tmp_path / "s"), "purge", "ws", "--quarantine-only",
                 "--quarantine-older-than", "0", "--json"])
    assert code == 0 and json.loads(capsys.readouterr().out)["quarantine"]["removed"] == 1


def test_cli_truncate_reject_purge(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    b = build(tmp_path / "s")
    root = str(tmp_path / "s")
    rows = _rows(b.history)
    user = next(x["seq"] for x in rows if x["role"] == "user" and x["kind"] == "message")
    assert main(["--root", root, "reject", "ws", str(user)]) == 0
    assert "rejected seqs" in capsys.readouterr().out
    end = rows[-2]["seq"]
    assert main(["--root", root, "truncate", "ws", "--after", str(end), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["removed_rows"] == 1
    assert main(["--root", root, "purge", "ws"]) == 0
    assert "purged" in capsys.readouterr().out
    assert main(["--root", root, "check", "ws"]) == 0
    assert main(["--root", root, "truncate", "ws", "--after", "999"]) == 1


def _wait_until_opened_twice(fd: int, done: list[Any], timeout: float = 30.0) -> None:
    """Poll (with a deadline) until a second descriptor of this process is
    open on the file ``fd`` is open on: the writer thread has opened it (and,
    holding no lock, cannot have finished: ``done`` stays empty)."""
    st = os.fstat(fd)
    deadline = time.monotonic() + timeout
    while True:
        opened = 0
        for name in os.listdir("/proc/self/fd"):
            try:
                other = os.stat(f"/proc/self/fd/{name}")
            except OSError:  # closed meanwhile
                continue
            opened += (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino)
        assert not done, "the writer went on under a LOCK that is no longer the workspace's"
        if opened >= 2:
            return
        assert time.monotonic() < deadline, "the writer never opened the LOCK"
        time.sleep(0.005)


def test_a_writer_that_waited_on_a_deleted_workspace_lock_waits_on_the_new_one(
    tmp_path: Path,
) -> None:
    """A writer blocked on the LOCK of a workspace that is deleted (renamed
    away under the lock) and then recreated must not go on while the writer
    of the recreated workspace holds its lock: it waits on the new LOCK."""
    import fcntl
    import threading

    store = Store(tmp_path, durability="off")
    store.history("ws").append(msg("old"))
    ws = tmp_path / "ws"
    old_lock = os.open(ws / ffmt.LOCK_NAME, os.O_RDWR)
    fcntl.flock(old_lock, fcntl.LOCK_EX)  # as Store.delete holds it while renaming
    waiting = Store(tmp_path, durability="off", lock_timeout=10).history("ws")
    done: list[Any] = []
    writer = threading.Thread(target=lambda: done.append(waiting.append(msg("waited"))))
    writer.start()
    _wait_until_opened_twice(old_lock, done)  # the writer has opened the old LOCK and polls it
    os.rename(ws, tmp_path / ".ws.trash-test")
    Store(tmp_path, durability="off").history("ws").append(msg("recreated"))
    new_lock = os.open(ws / ffmt.LOCK_NAME, os.O_RDWR)
    fcntl.flock(new_lock, fcntl.LOCK_EX)  # the recreated workspace's writer is busy
    fcntl.flock(old_lock, fcntl.LOCK_UN)
    os.close(old_lock)
    # The writer takes the old LOCK, sees it is no longer the workspace's, and
    # opens the new one, where it has to wait.
    _wait_until_opened_twice(new_lock, done)
    assert not done, "the writer went on under a LOCK that is no longer the workspace's"
    fcntl.flock(new_lock, fcntl.LOCK_UN)
    os.close(new_lock)
    writer.join(10)
    assert done and done[0].seqs == [2]
    rows = [r.to_dict() for r in Store(tmp_path).history("ws").rows()]
    assert [(r["seq"], r["parts"][0]["text"]) for r in rows] == [(1, "recreated"), (2, "waited")]
