"""Real full disks, read-only media and descriptor exhaustion.

A small ``tmpfs`` (``size=``) is mounted for each test (root only, as in CI;
elsewhere these tests skip with the reason). On a full disk every write
operation fails with a ``LedgerError`` (``CommitFailed`` for commits), leaves
every stored row as it was and no temp file behind, and succeeds once space
is freed. Remounted read-only, the store still reads, searches, checks and
exports; every write fails with a clear error. With ``RLIMIT_NOFILE`` low,
appends and reads fail cleanly and work again when descriptors return.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger import CommitFailed, LedgerError, Store
from ledger.cli import main as cli_main
from recovery.check import check
from recovery.repair import repair
from tests.helpers import msg, subprocess_env

WS = "ws"


def _mount(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["mount", *args], capture_output=True, text=True, timeout=30)


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs mounted at a fresh directory, unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a size-limited tmpfs needs root (CI runs as root)")
    where = tmp_path / "mnt"
    where.mkdir()
    done = _mount(["-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(where)])
    if done.returncode != 0:
        reason = f"cannot mount a tmpfs here: {done.stderr.strip()}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=30)


def rows_of(store: Store) -> list[bytes]:
    return [r.line for r in store.history(WS).rows()]


def temps(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob(".tmp-*"))


def fill(where: Path) -> Path:
    """Take every free byte of the file system; returns the filler file."""
    filler = where / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)
    return filler


def build(root: Path) -> Store:
    store = Store(root, segment_bytes=400)
    h = store.history(WS)
    for i in range(20):  # many small sealed segments: a merge has work to do
        h.append_many([msg(f"needle {i} " + "q" * 60), msg(f"answer {i}", "assistant")])
    h.clear_soft()
    h.append(msg("needle after the floor"))
    return store


OPERATIONS: dict[str, Callable[[Store], Any]] = {
    "append": lambda s: s.history(WS).append_many([msg("big " + "z" * 8000)]),
    "clear": lambda s: s.history(WS).clear_soft(),
    "rollover": lambda s: s.history(WS).rollover([msg("go on " + "r" * 8000)]),
    "merge": lambda s: s.history(WS).engine.merge_segments(),
    "reject": lambda s: s.history(WS).reject(s.history(WS).snapshot().next_seq - 1),
    "truncate": lambda s: s.history(WS).truncate_after(41),
    "repair": lambda s: repair(s.history(WS)),
}


@pytest.mark.parametrize("name", list(OPERATIONS))
def test_a_full_disk_fails_cleanly_and_the_operation_works_after(
    small_fs: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = small_fs / "store"
    with monkeypatch.context() as m:  # leave the sealed segments for merge_segments
        m.setattr("ledger.storage.files.workspace.AUTO_MIN_SEALED", 1 << 30)
        store = build(root)
    op = OPERATIONS[name]
    if name == "repair":  # something for repair to write: a torn tail
        seg = sorted((root / WS).glob("seg-*"))[-1]
        with open(seg, "ab") as f:
            f.write(b'{"seq":999,"torn' + b"t" * 3000)
    before = rows_of(Store(root)) if name != "repair" else None
    filler = fill(small_fs)
    with pytest.raises(LedgerError) as info:
        result = op(store)
        if name == "repair" and not result.consistent:  # a report, not an exception
            raise LedgerError(result.text())
    if name in ("append", "clear", "rollover"):
        assert isinstance(info.value, CommitFailed)
    assert "No space left" in str(info.value) or "ENOSPC" in str(info.value) \
        or "space" in str(info.value).lower(), str(info.value)
    if before is not None:
        assert rows_of(Store(root)) == before  # nothing stored changed
    assert temps(root) == []  # no temp file left behind
    filler.unlink()
    op(store)  # the same operation, with space again
    report = check(store.history(WS))
    assert report.ok, report.text()
    if name in ("append", "clear", "rollover"):
        assert rows_of(Store(root))[: len(before or [])] == before


def test_read_only_media_reads_and_refuses_every_write(small_fs: Path, tmp_path: Path) -> None:
    root = small_fs / "store"
    store = build(root)
    expected = rows_of(store)
    done = _mount(["-o", "remount,ro", str(small_fs)])
    assert done.returncode == 0, done.stderr
    try:
        ro = Store(root)
        h = ro.history(WS)
        assert rows_of(ro) == expected
        assert [r.seq for r in h.provider_view()] == [42]
        found = h.session_history().search("needle", limit=5)
        assert [item["seq"] for item in found["items"]] == [42]  # never past the floor
        assert check(h).ok
        out = tmp_path / "export.jsonl"
        with open(out, "w") as f:
            import contextlib

            with contextlib.redirect_stdout(f):
                assert cli_main(["--root", str(root), "export", WS, "--format", "jsonl"]) == 0
        assert len(out.read_text().splitlines()) == len(expected)
        for name, op in OPERATIONS.items():
            with pytest.raises(LedgerError) as info:
                result = op(ro)
                if name == "repair" and result.changed:
                    raise AssertionError("repair changed a read-only history")
                if name in ("merge", "repair"):
                    raise LedgerError("no change to make")  # nothing to write: fine
            text = str(info.value)
            assert name in ("merge", "repair") or "Read-only" in text or "read-only" in text, \
                f"{name}: {text}"
        assert rows_of(ro) == expected
    finally:
        _mount(["-o", "remount,rw", str(small_fs)])


DESCRIPTORS = textwrap.dedent("""
    import json, os, resource, sys
    from ledger import LedgerError, Store
    from recovery.check import check
    root = sys.argv[1]
    store = Store(root, durability="off")
    h = store.history("ws")
    h.append({"role": "user", "parts": [{"type": "text", "text": "first"}]})
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    used = len(os.listdir("/proc/self/fd"))
    out = {}
    resource.setrlimit(resource.RLIMIT_NOFILE, (used, hard))  # no descriptor left
    for name, op in (("append", lambda: h.append({"role": "user", "parts": []})),
                     ("read", lambda: list(h.rows())),
                     ("view", lambda: h.provider_view())):
        try:
            op()
            out[name] = "ok"
        except LedgerError as exc:
            out[name] = type(exc).__name__
        except OSError as exc:
            out[name] = "OSError " + str(exc)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    out["after"] = h.append({"role": "user", "parts": []}).seqs
    out["rows"] = [r.seq for r in h.rows()]
    out["check"] = check(h).ok
    print(json.dumps(out))
""")


def test_descriptor_exhaustion_fails_cleanly_and_recovers(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", DESCRIPTORS, str(tmp_path / "store")],
                          capture_output=True, text=True, timeout=120, env=subprocess_env())
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    for name in ("append", "read", "view"):
        assert out[name] != "ok" and not out[name].startswith("OSError"), out
    assert out["after"] == [2]  # the refused append wrote nothing
    assert out["rows"] == [1, 2] and out["check"] is True
