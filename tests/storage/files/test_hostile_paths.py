"""Every path opened as what it must be (issue 20, items 6, 7, 8).

- A workspace directory that is a symlink (out of the root or inside it) is
  refused the same way by the Python API and by every command: ``UnsafePath``,
  one line, exit 1. ``ls`` lists it (the table shows the problem) instead of
  hiding it; ``delete`` refuses it instead of saying "nothing to delete".
- A segment that is a directory, a dangling symlink or a FIFO, FORMAT as a
  directory or a FIFO, and LOCK as a FIFO: rows, check, repair, backup, append, history and
  context end in bounded time with one line naming the path (no traceback,
  no hang); check reports it as damage, repair refuses clearly.
- OS errors: an unreadable segment (mode 000, read by an unprivileged
  process), a backup into /proc or onto a full disk, a delete on a read-only
  file system or with a file that cannot be removed: a ``LedgerError``, never
  a raw ``OSError``. A delete that stops half-way is finished by the next
  ``delete``; until then reads say a delete is pending.

CLI runs are real subprocesses with a timeout, so a hang fails the test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ledger import LedgerError, Store
from ledger.core.errors import DeletePending, UnsafePath, WorkspaceNotFound
from ledger.storage.files import segments as segs
from recovery.check import check
from recovery.repair import repair
from tests.helpers import cli_proc, msg, subprocess_env

WS = "ws"
TIMEOUT = 30


def _build(root: Path) -> Path:
    h = Store(root, durability="off", segment_bytes=300).history(WS)
    for i in range(4):
        h.append(msg(f"row {i}"))
    return root / WS


def _seg(ws: Path, which: int) -> Path:
    return Path(segs.segment_path(str(ws), segs.list_segments(str(ws))[which]))


def _replace_with(path: Path, kind: str) -> None:
    path.unlink()
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "dangling":
        path.symlink_to("/nonexistent/segment")
    else:
        raise AssertionError(kind)


def _symlink_out(root: Path, tmp: Path) -> None:
    real = tmp / "elsewhere"
    shutil.move(str(root / WS), real)
    (root / WS).symlink_to(real)


def _symlink_in(root: Path, tmp: Path) -> None:
    shutil.move(str(root / WS), root / "other")
    (root / WS).symlink_to("other")


CASES: dict[str, Callable[[Path, Path], None]] = {
    "segment-directory": lambda r, t: _replace_with(_seg(r / WS, 0), "directory"),
    "segment-dangling-symlink": lambda r, t: _replace_with(_seg(r / WS, 0), "dangling"),
    "segment-fifo": lambda r, t: _replace_with(_seg(r / WS, 0), "fifo"),
    "active-segment-fifo": lambda r, t: _replace_with(_seg(r / WS, -1), "fifo"),
    "format-directory": lambda r, t: _replace_with(r / WS / "FORMAT", "directory"),
    "format-fifo": lambda r, t: _replace_with(r / WS / "FORMAT", "fifo"),
    "lock-fifo": lambda r, t: _replace_with(r / WS / "LOCK", "fifo"),
    "workspace-symlink-out-of-root": _symlink_out,
    "workspace-symlink-in-root": _symlink_in,
}
WHAT = {"segment-directory": "a directory", "segment-dangling-symlink": "a symlink",
        "segment-fifo": "a FIFO", "active-segment-fifo": "a FIFO",
        "format-directory": "a directory", "format-fifo": "a FIFO", "lock-fifo": "a FIFO",
        "workspace-symlink-out-of-root": "a symlink", "workspace-symlink-in-root": "a symlink"}


def tledger(root: Path, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[str]:
    done = cli_proc.run(["--root", str(root), *args], stdin=stdin, env=subprocess_env(),
                        timeout=TIMEOUT, module="ledger")
    return subprocess.CompletedProcess(done.args, done.returncode,
                                       done.stdout.decode("utf-8", "replace"),
                                       done.stderr.decode("utf-8", "replace"))


def _files(root: Path) -> dict[str, bytes | str]:
    out: dict[str, bytes | str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            if p.is_symlink():
                out[str(p.relative_to(root))] = f"-> {os.readlink(p)}"
            elif p.is_file():
                out[str(p.relative_to(root))] = p.read_bytes()
            elif not p.is_dir():
                out[str(p.relative_to(root))] = "special"
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_command_refuses_in_one_line(case: str, tmp_path: Path) -> None:
    root = tmp_path / "root"
    _build(root)
    CASES[case](root, tmp_path)
    before = _files(tmp_path)
    row = b'{"role":"user","parts":[{"type":"text","text":"new"}]}\n'
    # The commands this issue names (the CLI zoo, tests/cli/test_zoo.py, runs the rest).
    for args in (("rows", WS), ("check", WS), ("repair", WS), ("append", WS),
                 ("backup", WS, str(tmp_path / "copy"))):
        done = tledger(root, *args, stdin=row)
        assert "Traceback" not in done.stderr, (args, done.stderr)
        assert done.returncode == 1, (args, done.returncode, done.stdout, done.stderr)
        said = done.stderr + done.stdout
        assert WHAT[case] in said and (f"{WS}/" in said or f"'{WS}'" in said), (args, said)
    assert not (tmp_path / "copy").exists()
    assert _files(tmp_path) == before  # nothing was written anywhere, the target included


@pytest.mark.parametrize("case", ["workspace-symlink-out-of-root", "workspace-symlink-in-root"])
def test_symlinked_workspace_in_the_python_api_ls_and_delete(case: str, tmp_path: Path) -> None:
    root = tmp_path / "root"
    _build(root)
    CASES[case](root, tmp_path)
    before = _files(tmp_path)
    store = Store(root, durability="off")
    with pytest.raises(UnsafePath, match=r"workspace 'ws': .* is a symlink, not a directory"):
        store.history(WS)
    assert WS in store.workspaces()  # listed, not hidden
    with pytest.raises(UnsafePath, match="is a symlink"):
        store.delete(WS)
    assert _files(tmp_path) == before
    ls = tledger(root, "ls")
    assert ls.returncode == 0 and WS in ls.stdout.split()
    done = tledger(root, "delete", WS, "--yes")
    assert done.returncode == 1 and "is a symlink" in done.stderr
    assert "nothing to delete" not in done.stdout + done.stderr
    assert _files(tmp_path) == before


def test_a_symlink_made_after_the_history_was_opened_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    _build(root)
    h = Store(root, durability="off").history(WS)
    _symlink_out(root, tmp_path)
    for op in (lambda: list(h.rows()), h.provider_view, lambda: h.append(msg("x")),
               lambda: check(h), lambda: repair(h)):
        with pytest.raises(UnsafePath, match="is a symlink"):
            op()
    assert [p.name for p in (tmp_path / "elsewhere").iterdir() if p.name.endswith(".jsonl")]
    res = h.session_history().call({"action": "search", "query": "row"})
    assert '"history_unavailable"' in res and "is a symlink" in res


@pytest.mark.parametrize("case", ["segment-directory", "segment-fifo", "format-fifo"])
def test_check_reports_and_repair_refuses(case: str, tmp_path: Path) -> None:
    root = tmp_path / "root"
    _build(root)
    CASES[case](root, tmp_path)
    h = Store(root, durability="off").history(WS)
    report = check(h)
    assert not report.ok and "not_a_file" in {f.code for f in report.findings}
    fixed = repair(h)
    assert fixed.refused and WHAT[case] in fixed.refused and fixed.exit_code() == 1


# --- OS errors (root, as in CI) ------------------------------------------------


def _need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (to drop privileges, mount a tmpfs); CI runs as root")


def _mount(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["mount", *args], capture_output=True, text=True, timeout=30)


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs (tests/storage/files/test_media_faults.py does the same)."""
    _need_root()
    where = tmp_path / "mnt"
    where.mkdir()
    done = _mount("-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(where))
    if done.returncode != 0:
        if os.environ.get("CI") == "true":
            pytest.fail(f"cannot mount a tmpfs: {done.stderr.strip()}")
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=30)


DROP_DAC = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]


def test_unreadable_segment_is_a_ledger_error_in_check_and_repair(tmp_path: Path) -> None:
    """Mode 000 stops only a reader without CAP_DAC_OVERRIDE, so the commands
    run as root with that capability (and CAP_DAC_READ_SEARCH) dropped."""
    _need_root()
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is needed to drop CAP_DAC_OVERRIDE")
    root = tmp_path / "root"
    _build(root)
    _seg(root / WS, 0).chmod(0)
    for args in (("check", WS), ("repair", WS), ("repair", WS, "--dry-run"), ("rows", WS)):
        done = subprocess.run(
            [*DROP_DAC, sys.executable, "-m", "ledger", "--root", str(root), *args],
            capture_output=True, text=True, env=subprocess_env(), timeout=TIMEOUT, check=False)
        assert "Traceback" not in done.stderr and "PermissionError" not in done.stderr, \
            (args, done.stderr)
        assert done.returncode == 1 and "Permission denied" in done.stderr, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, (args, done.stderr)


def test_backup_to_an_unwritable_place_or_a_full_disk(tmp_path: Path, small_fs: Path) -> None:
    root = tmp_path / "root"
    _build(root)
    h = Store(root, durability="off").history(WS)
    for bad in ("/proc/tledger-backup", "/proc/self/tledger-backup"):
        with pytest.raises(LedgerError, match=r"backup to .* failed"):
            h.backup(bad)
        done = tledger(root, "backup", WS, bad)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    for _ in range(2):  # more than the 1 MiB file system holds
        Store(root, durability="off").history(WS).append(msg("x" * 700_000))
    with pytest.raises(LedgerError, match="No space left on device"):
        h.backup(str(small_fs / "copy"))
    assert os.listdir(small_fs) == []  # the staging copy went too
    done = tledger(root, "backup", WS, str(small_fs / "copy"))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr


def test_delete_on_a_read_only_file_system(tmp_path: Path, small_fs: Path) -> None:
    root = small_fs / "root"
    _build(root)
    assert _mount("-o", "remount,ro", str(small_fs)).returncode == 0
    try:
        store = Store(root, durability="off")
        with pytest.raises(LedgerError, match=r"Read-only file system.*nothing was deleted"):
            store.delete(WS)
        done = tledger(root, "delete", WS, "--yes")
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert [r.seq for r in store.history(WS).rows()] == [1, 2, 3, 4]  # all still there
    finally:
        _mount("-o", "remount,rw", str(small_fs))


def test_delete_that_fails_half_way_is_finished_by_the_next(tmp_path: Path,
                                                            small_fs: Path) -> None:
    """A file system mounted inside the workspace cannot be removed (EBUSY):
    the delete stops after the directory went to the trash. Reads and writes
    then say a delete is pending; a second delete fails the same clear way;
    once the mount is gone, delete finishes and the id can be used again."""
    root = tmp_path / "root"
    ws = _build(root)
    (ws / "stuck").mkdir()
    assert _mount("--bind", str(small_fs), str(ws / "stuck")).returncode == 0
    store = Store(root, durability="off")
    try:
        with pytest.raises(DeletePending, match="stopped half-way"):
            store.delete(WS)
        h = store.history(WS)
        for op in (lambda: list(h.rows()), h.provider_view, lambda: check(h)):
            with pytest.raises(DeletePending, match=r"is being deleted.*tledger delete ws"):
                op()
        with pytest.raises(LedgerError, match="being deleted"):
            h.append(msg("new"))
        done = tledger(root, "rows", WS)
        assert done.returncode == 1 and "being deleted" in done.stderr, done.stderr
        done = tledger(root, "delete", WS, "--yes")
        assert done.returncode == 1 and "half-way" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    finally:
        trash = [p for p in root.iterdir() if p.name.startswith(f".{WS}.deleted-")]
        for t in trash:
            subprocess.run(["umount", "-l", str(t / "stuck")], capture_output=True, timeout=30)
    done = tledger(root, "delete", WS, "--yes")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in root.iterdir()) == []
    with pytest.raises(WorkspaceNotFound) as info:
        list(store.history(WS).rows())
    assert not isinstance(info.value, DeletePending)
    assert store.history(WS).append(msg("again")).seqs == [1]
