"""The segment table (``ledger/storage/files/watch.py``): a history with many
segments is validated from the kernel's change events instead of a ``stat``
of every segment, and must still see every change a full pass sees -- the
untracked edits of ``test_receipt_untracked.py`` run on both paths; these
are the cases only the table has: another link to a segment, a lost event
queue, a replaced directory, a forked process."""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path

import pytest

from ledger import Store
from ledger.storage.files import watch
from ledger.storage.files.bulk import bulk_load
from tests.helpers import dicts, msg, segment_files

pytestmark = pytest.mark.skipif(not watch.available(), reason="no inotify on this system")


@pytest.fixture(autouse=True)
def small_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch, "WATCH_MIN_SEGMENTS", 4)


def _store(root: Path) -> Store:
    return Store(root, durability="off", segment_bytes=8192)


def _history(root: Path):  # type: ignore[no-untyped-def]
    """A history of more segments than a scan stats in rotation (appends
    merge small segments when one is sealed: a bulk load leaves them)."""
    h = _store(root).history("ws")
    bulk_load(h, [[msg(f"row {k} " + "z" * (k * 13 % 70))] for k in range(150)], 200,
              durability="off")
    assert len(segment_files(root / "ws")) > 3 * watch.ROTATE
    return h


def _watched(root: Path):  # type: ignore[no-untyped-def]
    h = _history(root)
    assert h.snapshot().verified
    assert h.engine.table.watching, "the table did not start watching"
    return h


def _facts(h) -> tuple[object, ...]:  # type: ignore[no-untyped-def]
    s = h.snapshot()
    return (s.verified, s.next_seq, s.epoch, s.window_seq, s.floor, s.segments, s.digest)


def test_a_watched_history_answers_as_a_full_pass(store_root: Path) -> None:
    h = _watched(store_root)
    for k in range(30):
        if k % 7 == 3:
            h.clear_soft()
        elif k % 11 == 5:
            h.rollover([msg(f"trigger {k}")])
        else:
            h.append_many([msg(f"more {k} " + "y" * (k * 7 % 90)), msg("r", role="assistant")])
        fresh = _store(store_root).history("ws")
        assert _facts(h) == _facts(fresh), f"after step {k}"
        assert [r.seq for r in h.provider_view()] == [r.seq for r in fresh.provider_view()]
    assert h.engine.table.watching


def test_an_edit_through_another_link_is_seen_at_once(store_root: Path, tmp_path: Path) -> None:
    """A fork shares sealed segments by hard link: a write through the other
    name changes this history's bytes too, and its directory hears nothing."""
    _history(store_root)
    oldest = segment_files(store_root / "ws")[0]
    other = tmp_path / "elsewhere"
    other.mkdir()
    os.link(oldest, other / "shared.jsonl")  # a new ctime: untracked, as a fork's link is
    h = _store(store_root).history("ws")
    h.append(msg("re-baselined"))  # its first pass found the second link
    assert h.snapshot().verified and h.engine.table.watching
    with open(other / "shared.jsonl", "ab") as f:
        f.write(b'{"kind":"reset","x":\n')
    snap = h.snapshot()
    assert not snap.verified, "an edit through another link went unseen"
    assert snap.floor is not None and snap.floor.segment == 1


def test_a_link_made_after_watching_is_seen_within_a_rotation(
    store_root: Path, tmp_path: Path
) -> None:
    """The one change the kernel does not report here: a link made from
    another directory after the table's last pass, then a write through it.
    The rotating stat finds it within segments / ROTATE scans."""
    h = _watched(store_root)
    count = len(segment_files(store_root / "ws"))
    oldest = segment_files(store_root / "ws")[0]
    other = tmp_path / "elsewhere"
    other.mkdir()
    os.link(oldest, other / "late.jsonl")
    with open(other / "late.jsonl", "ab") as f:
        f.write(b'{"kind":"reset","x":\n')
    scans = 0
    while h.snapshot().verified:
        scans += 1
        assert scans <= math.ceil(count / watch.ROTATE) + 1, "the rotation never reached it"
    assert h.snapshot().floor is not None


def test_a_lost_event_queue_falls_back_to_a_full_pass(store_root: Path) -> None:
    h = _watched(store_root)
    before = h.snapshot()
    scratch = store_root / "ws" / "scratch"
    with open(scratch, "wb") as f:  # more events than the kernel queues (16,384 by default)
        for _ in range(20_000):
            f.write(b"x")
            f.flush()
    scratch.unlink()
    oldest = segment_files(store_root / "ws")[0]
    with open(oldest, "ab") as f:
        f.write(b'{"x": 1}\n')
    assert not h.snapshot().verified
    r = h.append(msg("tracked"))
    assert r.epoch != before.epoch and h.snapshot().verified
    assert h.engine.table.watching


def test_a_replaced_directory_is_read_again(store_root: Path, tmp_path: Path) -> None:
    h = _watched(store_root)
    copy = tmp_path / "copy"
    shutil.copytree(store_root / "ws", copy)
    oldest = segment_files(copy)[0]
    offset = oldest.stat().st_size
    with open(oldest, "ab") as f:
        f.write(b'{"kind":"reset","x":\n')
    os.rename(store_root / "ws", tmp_path / "old")
    os.rename(copy, store_root / "ws")
    snap = h.snapshot()
    assert snap.floor is not None and (snap.floor.segment, snap.floor.offset) == (1, offset)


def test_a_forked_process_keeps_its_own_table(store_root: Path) -> None:
    h = _watched(store_root)
    next_seq = h.snapshot().next_seq
    pid = os.fork()
    if pid == 0:  # the child: its own events, the parent's queue untouched
        code = 1
        try:
            r = h.append(msg("from the child"))
            snap = h.snapshot()
            code = 0 if snap.verified and r.seqs == [next_seq] and snap.next_seq == next_seq + 1 \
                else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    snap = h.snapshot()
    assert snap.verified and snap.next_seq == next_seq + 1
    assert dicts(h)[-1]["parts"][0]["text"] == "from the child"
    with open(segment_files(store_root / "ws")[0], "ab") as f:
        f.write(b'{"x": 1}\n')
    assert not h.snapshot().verified


def test_an_idle_tables_events_are_bounded(
    store_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One process, two handles of one workspace: the busy one's appends fill
    the idle one's event list (the queue is the process's); past EVENTS_MAX
    the idle table keeps no more and makes a full pass on its next scan, so
    an untracked edit among the dropped events is still seen."""
    monkeypatch.setattr(watch, "EVENTS_MAX", 8)
    idle = _watched(store_root)
    busy = _store(store_root).history("ws")
    for k in range(12):
        busy.append(msg(f"busy {k}"))
    assert busy.engine.table.watching
    table = idle.engine.table
    numbers = sorted(int(p.name[4:12]) for p in segment_files(store_root / "ws"))
    # a sealed segment the idle table's next rotation does not reach
    far = numbers[(table._turn % len(numbers) + len(numbers) // 2) % len(numbers)]
    with open(store_root / "ws" / f"seg-{far:08d}.jsonl", "ab") as f:
        f.write(b'{"x": 1}\n')
    busy.engine.table.scan()  # drains the queue: the idle table's share is over its bound
    assert len(table.events) <= watch.EVENTS_MAX and table.overflowed
    assert not idle.snapshot().verified, "an edit among the dropped events went unseen"


def test_a_table_collected_while_the_queue_is_read_does_not_deadlock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The collector runs wherever Python allocates, also inside ``take``
    while it holds the instance's lock; a watched table collected there must
    not wait for that lock (it did: the test suite hung), and its watch goes
    at the next read of the queue."""
    import gc
    import threading

    monkeypatch.setattr(watch, "WATCH_MIN_SEGMENTS", 1)
    dirs = []
    for name in ("collected", "busy"):
        d = tmp_path / name
        d.mkdir()
        (d / "seg-00000001.jsonl").write_bytes(b"x\n")
        dirs.append(d)
    doomed = watch.SegmentTable(str(dirs[0]))
    doomed.scan()
    doomed.cycle = doomed  # type: ignore[attr-defined]  # only the collector frees it
    busy = watch.SegmentTable(str(dirs[1]))
    busy.scan()
    assert doomed.watching and busy.watching
    ino = watch._inotify()
    assert ino is not None
    wds = set(ino.hearers)
    del doomed
    real = watch._Inotify._dispatch

    def dispatch_then_collect(self: watch._Inotify, buf: bytes) -> None:
        gc.collect()
        real(self, buf)

    monkeypatch.setattr(watch._Inotify, "_dispatch", dispatch_then_collect)
    (dirs[1] / "seg-00000001.jsonl").write_bytes(b"y\n")  # an event: take() dispatches it
    done = threading.Event()
    thread = threading.Thread(target=lambda: (busy.scan(), done.set()), daemon=True)
    thread.start()
    thread.join(20)
    assert done.is_set(), "a scan deadlocked on a table the collector freed inside it"
    busy.scan()  # the next read of the queue drops the collected table's watch
    assert len(set(ino.hearers) & wds) == 1
