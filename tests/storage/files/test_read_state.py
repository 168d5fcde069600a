"""A reader's state right after this process's own append
(``ledger.storage.files.reads.WorkspaceBase.read_state``): the state that
append published is used again, without listing the directory, only while
the receipt holds the bytes it wrote, the directory lists the segments it
listed and each has its stamp.

Each other change between our append and our ranked search -- another
process appending, merging, rewriting (a new epoch), resetting (a privacy
floor), purging, a writer killed after its pending receipt, untracked edits
of the active or a sealed segment, an untracked new segment after the active
one or in a gap a merge left -- is seen: the
state is a fresh process's, and the answers a fresh index's. Reusing the
append's state without the checks fails each of these tests.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from ledger import Store
from ledger.core.format import files as ffmt
from ledger.core.format import rows as fmt
from ledger.storage.files import reads
from ledger.storage.files import segments as segs
from tests.helpers import PYTHON, msg, subprocess_env
from tests.helpers.recall import rebuilt
from tests.storage.files.test_recall_tail import answer, answers, history

TICK = 0.05  # a timestamp tick: an edit later than this has new times

# Another process's operation on workspace "w" (argv: root, op).
OTHER = """\
import os, signal, sys
import ledger.storage.files.workspace as wsmod
from ledger import Store
wsmod.AUTO_MIN_SEALED = 1 << 30
root, op = sys.argv[1], sys.argv[2]
h = Store(root, segment_bytes=256, durability="off").history("w")
row = {"role": "user", "parts": [{"type": "text", "text": "zebra crossing heron"}]}
if op == "append":
    h.append_many([row])
elif op == "merge":
    assert h.engine.merge_segments() >= 1
elif op == "truncate":
    h.truncate_after(h.next_seq - 3)
elif op == "reset":
    h.clear_soft()
elif op == "purge":
    h.clear_soft()
    h.purge_before_floor()
elif op == "killed":
    os.rename = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
    h.append_many([row])
"""


@pytest.fixture(autouse=True)
def no_auto_merge(monkeypatch: pytest.MonkeyPatch) -> None:
    """Our appends leave the small segments in place (another process merges)."""
    monkeypatch.setattr("ledger.storage.files.workspace.AUTO_MIN_SEALED", 1 << 30)


def other(root: Path, op: str) -> int:
    done = subprocess.run([PYTHON, "-c", OTHER, str(root), op], env=subprocess_env(),
                          timeout=120, check=False)
    return done.returncode


def started(root: Path) -> tuple[Any, Any]:
    """A history of several sealed segments and an index, then one more
    append of this process (its state the one to reuse)."""
    h = Store(str(root), segment_bytes=256, durability="off").history("w")
    for i in range(24):
        h.append_many([msg(f"trip plan {i} quokka"), msg(f"noted {i} lisbon", "assistant")])
    tool = h.session_history()
    answers(tool)  # builds the index
    h.append_many([msg("bluebird deploy rollback"), msg("cache warm", "assistant")])
    assert tool.reader.ws is h.engine and h.engine.own is not None
    return h, tool


def reader_state(tool: Any) -> Any:
    with tool.reader.locked():
        return tool.reader.ws.read_state()


def fresh_state(root: Path) -> Any:
    """The state a process that never wrote here finds (a full pass)."""
    engine = Store(str(root), segment_bytes=256, durability="off").history("w").engine
    assert engine.own is None
    return engine.snapshot()


def fresh_answers(root: Path, scratch: Path) -> list[dict[str, Any]]:
    """What a new store with no index answers (the workspace copied without it)."""
    with rebuilt(root, scratch, history) as tool:
        return answers(tool)


def same_as_fresh(root: Path, tool: Any, scratch: Path, *, moved: bool = False) -> None:
    """The state a fresh process finds; a fresh index's answers. ``moved``: a
    merge moved rows the index holds, which are then found by seq within the
    call's read budget (``FileReader.locate_at``), so a page may end sooner:
    the answers are then the fresh index's first items, in its order, with
    its scores."""
    assert reader_state(tool) == fresh_state(root)
    got, want = answers(tool), fresh_answers(root, scratch)
    if not moved:
        assert got == want
        return
    for mine, fresh in zip(got, want, strict=True):
        assert mine["items"] == fresh["items"][:len(mine["items"])]
        assert bool(mine["items"]) == bool(fresh["items"])


def full_passes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the full validations (``state()``: the table's scan, the
    receipt decoded) from now on."""
    seen: list[int] = []
    real = reads.WorkspaceBase.state

    def counted(self: Any, *args: Any, **kw: Any) -> Any:
        seen.append(1)
        return real(self, *args, **kw)

    monkeypatch.setattr(reads.WorkspaceBase, "state", counted)
    return seen


def test_after_its_own_append_a_reader_reuses_its_state(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "root"
    h, tool = started(root)
    bluebird = h.next_seq - 2
    seen = full_passes(monkeypatch)
    st = reader_state(tool)
    assert not seen, "the reader validated again what its own append published"
    assert answer(tool, "bluebird")["items"][0]["seq"] == bluebird
    assert not seen
    monkeypatch.undo()
    assert st.verified and st == fresh_state(root)
    assert answers(tool) == fresh_answers(root, tmp_path / "fresh")


@pytest.mark.parametrize("op", ["append", "merge", "truncate", "reset", "purge"])
def test_another_process_writing_after_our_append(tmp_path: Path, op: str) -> None:
    root = tmp_path / "root"
    _h, tool = started(root)
    before = reader_state(tool)
    assert other(root, op) == 0
    st = reader_state(tool)
    assert st != before
    same_as_fresh(root, tool, tmp_path / "fresh", moved=op == "merge")
    if op == "append":
        assert answer(tool, "zebra")["items"][0]["seq"] == st.next_seq - 1
    if op == "merge":
        assert st.epoch == before.epoch and len(st.segments) < len(before.segments)
    if op == "truncate":
        assert st.epoch != before.epoch  # a rewrite
        assert answer(tool, "bluebird")["items"] == []  # the truncated rows are gone
    if op == "reset":
        assert st.floor is not None and st.floor.seq == before.next_seq
    if op == "purge":
        assert st.epoch != before.epoch and len(st.segments) < len(before.segments)
    if op in ("reset", "purge"):
        # Every row is behind the new floor (purged or not): none is served.
        assert answer(tool, "bluebird")["items"] == []
        assert answer(tool, "quokka")["items"] == []


def test_a_writer_killed_after_its_pending_receipt(tmp_path: Path) -> None:
    root = tmp_path / "root"
    _h, tool = started(root)
    assert other(root, "killed") == -9
    st = reader_state(tool)
    assert st.receipt is not None and not st.receipt.stable and not st.verified
    same_as_fresh(root, tool, tmp_path / "fresh")


def _active(root: Path) -> int:
    wsdir = root / "w"
    return max(segs.segments_in(str(wsdir), os.listdir(wsdir)))


def _reword(path: Path, old: bytes, new: bytes) -> None:
    """Rewrite one line of ``path`` in place, same size, its checksum right."""
    data = path.read_bytes()
    at = data.index(old)
    start = data.rindex(b"\n", 0, at) + 1 if b"\n" in data[:at] else 0
    end = data.index(b"\n", at) + 1
    body = fmt.body_of(data[start:end - 1])
    assert body is not None
    line = fmt.frame(body.replace(old, new))
    assert len(line) == end - start
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, line, start)
    finally:
        os.close(fd)


def test_untracked_edit_of_a_sealed_segment(tmp_path: Path) -> None:
    root = tmp_path / "root"
    _h, tool = started(root)
    time.sleep(TICK)
    first = min(segs.segments_in(str(root / "w"), os.listdir(root / "w")))
    assert first != _active(root)
    _reword(root / "w" / ffmt.segment_name(first), b"quokka", b"wombat")
    st = reader_state(tool)
    assert not st.verified  # the stamps no longer confirm the receipt
    same_as_fresh(root, tool, tmp_path / "fresh")
    assert answer(tool, "wombat")["items"]


def test_untracked_edit_of_the_active_segment(tmp_path: Path) -> None:
    root = tmp_path / "root"
    _h, tool = started(root)
    time.sleep(TICK)
    _reword(root / "w" / ffmt.segment_name(_active(root)), b"bluebird", b"wombatxx")
    assert not reader_state(tool).verified
    same_as_fresh(root, tool, tmp_path / "fresh")
    assert answer(tool, "wombatxx")["items"] and not answer(tool, "bluebird")["items"]


def test_untracked_new_segment_after_the_active_one(tmp_path: Path) -> None:
    root = tmp_path / "root"
    h, tool = started(root)
    active = _active(root)
    last = (root / "w" / ffmt.segment_name(active)).read_bytes().splitlines()[-1]
    row = fmt.decode_line(last)
    assert row is not None
    row = {**row, "seq": h.next_seq, "id": "r-untracked",
           "parts": [{"type": "text", "text": "yak untracked"}]}
    path = root / "w" / ffmt.segment_name(active + 1)
    path.write_bytes(fmt.encode_line(row))
    os.chmod(path, 0o600)
    st = reader_state(tool)
    assert not st.verified and st.active == active + 1
    same_as_fresh(root, tool, tmp_path / "fresh")
    assert answer(tool, "yak")["items"][0]["seq"] == h.next_seq - 1


def test_untracked_new_segment_in_a_gap(tmp_path: Path) -> None:
    """A segment file put below the active one, where a merge left a gap (a
    history copied in by hand): its rows are the log's, as a fresh process
    finds them."""
    root = tmp_path / "root"
    h, tool = started(root)
    assert other(root, "merge") == 0
    h.append_many([msg("after the merge")])  # our own append again: its state to reuse
    wsdir = root / "w"
    numbers = segs.segments_in(str(wsdir), os.listdir(wsdir))
    gap = next(n for n in range(numbers[0], numbers[-1]) if n not in numbers)
    first = wsdir / ffmt.segment_name(numbers[0])
    (wsdir / ffmt.segment_name(gap)).write_bytes(first.read_bytes())
    st = reader_state(tool)
    assert not st.verified and gap in st.segments
    assert st == fresh_state(root)
