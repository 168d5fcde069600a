"""The recall index reads the log as every other read does: a segment that is
a symlink or no regular file is ``UnsafePath`` (nothing followed, a FIFO never
waited on), not a mismatch that throws the index away to rebuild it.

The segment is swapped after the state was read (another process between
the two): the state's own scan refuses a link it meets, so this is where the
index's one-line reads (``RecallIndex._line_at``, whose line
``_read_line_hash`` hashes) meet it. A ranked search answers
``history_unavailable`` naming the segment, and ``tledger check`` reports it
as damage (exit 1, one clear line, no traceback); with the file back, the
index answers as before.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from ledger import Store
from ledger.cli import main
from ledger.core.format import files as ffmt
from ledger.storage.files import recall
from tests.helpers import msg


def history(root: Path) -> Any:
    return Store(str(root), durability="off", segment_bytes=4096).history("w")


def seeded(root: Path) -> Any:
    h = history(root)
    h.append_many([msg("bluebird deploy rollback"), msg("cache warm", "assistant")])
    for i in range(30):
        h.append(msg(f"filler row {i} about the otter and the heron " * 3))
    h.append(msg("the otter swims; the heron waits", "assistant"))
    return h


def ask(h: Any, query: str = "otter heron") -> dict[str, Any]:
    tool = h.session_history()
    try:
        out = json.loads(tool.call({"action": "search", "query": query, "mode": "ranked",
                                    "current": True, "limit": 5}))
        assert isinstance(out, dict)
        return out
    finally:
        if tool.reader._recall is not None:
            tool.reader._recall.close()


def last_segment(root: Path) -> Path:
    return max((root / "w").glob("seg-*.jsonl"))


def swap(seg: Path, kind: str, tmp: Path) -> Callable[[], None]:
    """Put a symlink (to a copy of the file) or a FIFO in the segment's place;
    returns what puts the file back."""
    keep = tmp / "kept.jsonl"
    shutil.copy2(seg, keep)
    seg.unlink()
    if kind == "symlink":
        os.symlink(keep, seg)
    else:
        os.mkfifo(seg)
    return lambda: (seg.unlink(), shutil.copy2(keep, seg))  # type: ignore[func-returns-value]


class Blocked(BaseException):
    """No OSError: a read's own error handling cannot take it for a mismatch."""


@contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """A read that waits on a FIFO fails the test instead of hanging it."""
    def stop(*_: object) -> None:
        raise Blocked("a FIFO in a segment's place was waited on")
    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_ranked_search_refuses_a_segment_swapped_after_the_state(
        tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "root"
    want = ask(seeded(root))
    assert want.get("items"), want
    index = root / "w" / ffmt.RECALL_NAME
    seg = last_segment(root)  # where the index's mark ends
    restore: list[Callable[[], None]] = []
    search = recall.RecallIndex.search

    def swapped_then(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not restore:
            restore.append(swap(seg, kind, tmp_path))
        return search(self, *args, **kwargs)

    monkeypatch.setattr(recall.RecallIndex, "search", swapped_then)
    with deadline(5):
        got = ask(history(root))  # a fresh handle: the index checks the log
    assert restore, "the search never reached the index"
    error = got.get("error", {})
    assert error.get("code") == "history_unavailable", got
    what = "a symlink" if kind == "symlink" else "a FIFO"
    assert f"{seg} is {what}, not a regular file" in error["message"]
    monkeypatch.setattr(recall.RecallIndex, "search", search)
    before = index.stat()
    restore[0]()
    assert ask(history(root))["items"] == want["items"]
    # The refused search threw nothing away: the index was brought up to the
    # log again, not rebuilt from nothing (its docs table kept, the mark held).
    assert index.stat().st_ino == before.st_ino


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_tledger_check_reports_a_segment_swapped_before_the_index_is_read(
        tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "root"
    ask(seeded(root))
    seg = last_segment(root)
    inspect = recall.inspect
    restore: list[Callable[[], None]] = []

    def swapped_then(*args: Any) -> Any:
        restore.append(swap(seg, kind, tmp_path))
        return inspect(*args)

    monkeypatch.setattr(recall, "inspect", swapped_then)
    with deadline(5):
        code = main(["--root", str(root), "check", "w"])
    out = capsys.readouterr()
    assert restore, "check never inspected the index"
    what = "a symlink" if kind == "symlink" else "a FIFO"
    assert code == 1, out
    assert f"damage {seg.name}: {seg} is {what}, not a regular file" in out.out
    assert "Traceback" not in out.out + out.err and "recall_index" not in out.out
    monkeypatch.setattr(recall, "inspect", inspect)
    restore[0]()
    assert main(["--root", str(root), "check", "w"]) == 0
