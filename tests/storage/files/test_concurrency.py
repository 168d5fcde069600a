"""Concurrent writers: processes and threads appending to one history at once."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import pytest

from ledger import Store
from ledger.core.format import files as ffmt
from tests.helpers import PYTHON, WRITER, check_log, dicts, msg, subprocess_env, tree

PROCS = 4
THREADS = 3
BATCHES = 25


def test_processes_and_threads_append_at_once(store_root: Path, tmp_path: Path) -> None:
    """4 processes x 3 threads (some sharing one History, some with their own
    Store), small segments: no lost or duplicated row, gap-free seqs, every
    batch adjacent and whole, every acknowledged seq where it was reported."""
    h = Store(store_root, durability="off").history("ws")
    first = h.append(msg("first"))
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [PYTHON, WRITER, "threads", str(store_root), "ws", str(THREADS), str(BATCHES),
             str(go), str(p)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env(),
        )
        for p in range(PROCS)
    ]
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    # This process writes too, from two threads, while the others run.
    local_acks: list[str] = []

    def local(t: int) -> None:
        mine = Store(store_root, durability="off", segment_bytes=2048, lock_timeout=60
                     ).history("ws")
        for k in range(BATCHES):
            bid = f"local-{t}-{k}"
            r = mine.append_many([msg(bid), msg(bid, role="assistant")], batch_id=bid)
            local_acks.append(bid + " " + " ".join(map(str, r.seqs)))

    go.write_bytes(b"")
    pool = [threading.Thread(target=local, args=(t,)) for t in range(2)]
    for t in pool:
        t.start()
    acks: list[str] = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        acks.extend(out.split("\n"))
    for t in pool:
        t.join()
    acks.extend(local_acks)

    acked: dict[str, list[int]] = {first.batch_id: first.seqs}
    for line in filter(None, acks):
        bid, *seqs = line.split()
        acked[bid] = [int(s) for s in seqs]
    assert len(acked) == 1 + PROCS * THREADS * BATCHES + 2 * BATCHES

    rows = dicts(h)
    batches = check_log(rows, "after concurrent appends")
    assert batches == acked  # nothing lost, nothing extra, seqs as reported
    assert len({r["id"] for r in rows}) == len(rows)
    assert len([p for p in (store_root / "ws").iterdir() if ffmt.segment_number(p.name)]) > 1
    assert h.snapshot().verified


def test_first_writes_race_on_a_new_workspace(store_root: Path) -> None:
    """Eight threads make the first write of one workspace at the same time;
    every append succeeds and FORMAT is written."""
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def first(t: int) -> None:
        h = Store(store_root, durability="full").history("fresh")
        start.wait()
        try:
            for k in range(5):
                h.append(msg(f"{t}-{k}"))
        except BaseException as exc:
            errors.append(exc)

    pool = [threading.Thread(target=first, args=(t,)) for t in range(8)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert errors == []
    check_log(dicts(Store(store_root).history("fresh")))
    assert (store_root / "fresh" / ffmt.FORMAT_NAME).read_bytes() == ffmt.FORMAT_TEXT


def test_format_temp_removed_by_a_concurrent_first_writer(store_root: Path, monkeypatch) -> None:
    """A second first-writer arriving while the first is about to rename its
    FORMAT temp file must not sweep that temp file away as a dead writer's
    leftover (FORMAT is committed under the lock). Both appends succeed or
    fail with a LedgerError, and FORMAT exists afterwards."""
    import os

    from ledger.core.errors import LedgerError

    real_rename = os.rename
    fired: list[bool] = []

    def rename(src, dst, *a, **k):
        if os.path.basename(os.fspath(dst)) == ffmt.FORMAT_NAME and not fired:
            fired.append(True)
            def second() -> None:
                # FORMAT is written under the lock now, so the second writer
                # waits; a short timeout keeps the test quick either way.
                try:
                    Store(store_root, durability="off", lock_timeout=0.3).history("ws").append(
                        msg("b")
                    )
                except LedgerError:
                    pass

            other = threading.Thread(target=second)
            other.start()
            other.join()
        return real_rename(src, dst, *a, **k)

    monkeypatch.setattr(os, "rename", rename)
    h = Store(store_root, durability="off").history("ws")
    try:
        h.append(msg("a"))
    except LedgerError:
        pass
    assert fired
    monkeypatch.setattr(os, "rename", real_rename)
    h.append(msg("c"))
    check_log(dicts(h))
    assert (store_root / "ws" / ffmt.FORMAT_NAME).read_bytes() == ffmt.FORMAT_TEXT


def test_readers_never_see_a_torn_batch(store_root: Path) -> None:
    """While a writer process appends (small segments, so segments roll), a
    reader keeps reading: every read is a gap-free prefix of whole batches."""
    h = Store(store_root, durability="off").history("ws")
    h.append(msg("first"))
    done = threading.Event()
    errors: list[BaseException] = []

    def write() -> None:
        w = Store(store_root, durability="off", segment_bytes=600).history("ws")
        try:
            for k in range(300):
                w.append_many([msg(f"w{k} {i} " + "p" * (k % 50)) for i in range(1 + k % 4)])
        except BaseException as exc:
            errors.append(exc)
        finally:
            done.set()

    writer = threading.Thread(target=write)
    writer.start()
    reads = 0
    seen = 0
    while not done.is_set() or reads < 3:
        rows = dicts(h)
        check_log(rows, f"read {reads}")
        assert len(rows) >= seen, "a later read saw fewer rows"
        seen = len(rows)
        view = h.provider_view()
        assert all(r.kind == "message" for r in view)
        reads += 1
    writer.join()
    assert errors == []
    assert len(check_log(dicts(h))) == 301


def test_lock_timeout_for_writers_and_readers(store_root: Path) -> None:
    """A writer that cannot get the lock in time gets LockTimeout (a
    LedgerError naming the workspace) and writes nothing; so does a reader
    that needs the shared lock."""
    from ledger import LockTimeout
    from ledger.storage.files.lock import locked

    h = Store(store_root, durability="off", lock_timeout=0.2).history("ws")
    h.append(msg("a"))
    before = tree(store_root)
    with locked(str(store_root / "ws"), "ws", 1.0, shared=False):
        with pytest.raises(LockTimeout) as info:
            h.append(msg("b"))
        assert "ws" in str(info.value)
        with pytest.raises(LockTimeout):
            h.snapshot()
        assert tree(store_root) == before
    assert h.append(msg("b")).seqs == [2]
