"""What the in-memory engine does beyond the contract (tests/helpers/engine_contract.py
runs on it in tests/storage/memory/test_contract.py): its roots, its lock, streams across
rewrites, backup and load as the other engines read them, and ranked search
that ranks as the file engine does."""

from __future__ import annotations

import dataclasses
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger import HistoryDamaged, InvalidRow, LockTimeout, Store
from ledger.core.errors import CursorExpired, InvalidRoot, RecoveryError, WorkspaceNotFound
from ledger.storage.memory import MemoryEngine, discard
from tests.helpers.engine_contract import msg


@pytest.fixture
def name() -> Iterator[str]:
    n = f"t-{uuid.uuid4().hex}"
    yield n
    discard(n)


def test_memory_alone_is_a_store_of_its_own_and_a_name_is_shared(name: str) -> None:
    a, b = Store("memory://"), Store("memory://")
    a.history("ws").append(msg("only in a"))
    assert a.workspaces() == ["ws"] and b.workspaces() == []
    Store(f"memory://{name}").history("ws").append(msg("shared"))
    other = Store(f"memory://{name}")  # the first Store is gone: the named store stays
    assert [r.to_dict()["parts"][0]["text"] for r in other.history("ws").rows()] == ["shared"]
    assert discard(name) is True and discard(name) is False
    assert Store(f"memory://{name}").workspaces() == []


@pytest.mark.parametrize("root", ["memory://a/b", "memory://" + "x" * 101, "memory://a b"])
def test_a_malformed_name_is_refused(root: str) -> None:
    with pytest.raises(InvalidRoot, match="memory://NAME"):
        Store(root)


def test_a_held_lock_times_out(name: str) -> None:
    store = Store(f"memory://{name}", lock_timeout=0.05)
    h = store.history("ws")
    h.append(msg("x"))
    engine = store.engine
    assert isinstance(engine, MemoryEngine)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with engine.root.locked(5, "ws"):
            held.set()
            release.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    try:
        assert held.wait(10)
        with pytest.raises(LockTimeout, match=r"within 0\.05 s"):
            h.append(msg("y"))
        with pytest.raises(LockTimeout):
            Store(f"memory://{name}", lock_timeout=0).history("ws").snapshot()
    finally:
        release.set()
        t.join()
    assert h.append(msg("y")).seqs == [2]


def test_threads_append_gap_free_whole_batches() -> None:
    h = Store("memory://").history("ws")
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        try:
            for i in range(20):
                h.append_many([msg(f"{k}.{i}.a"), msg(f"{k}.{i}.b", "assistant")])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    rows = [r.to_dict() for r in h.rows()]
    assert [r["seq"] for r in rows] == list(range(1, 161))
    for first, second in zip(rows[::2], rows[1::2], strict=True):
        assert first["batch"]["id"] == second["batch"]["id"]
        assert first["parts"][0]["text"][:-1] == second["parts"][0]["text"][:-1]


def test_a_stream_sees_appends_and_says_read_again_after_a_rewrite() -> None:
    h = Store("memory://").history("ws")
    for i in range(4):
        h.append(msg(f"m{i}"))
    stream = h.rows()
    assert next(stream).seq == 1
    h.append(msg("late"))
    assert [next(stream).seq for _ in range(4)] == [2, 3, 4, 5]
    stream = h.rows(after_seq=2)
    assert next(stream).seq == 3
    h.rebaseline()
    with pytest.raises(HistoryDamaged, match="read again"):
        next(stream)


def test_a_refused_batch_creates_nothing() -> None:
    store = Store("memory://", max_row_bytes=256)
    h = store.history("ws")
    with pytest.raises(InvalidRow):
        h.append(msg("x" * 1000))
    assert not h.exists() and store.workspaces() == []
    assert h.append(msg("fits")).seqs == [1]


def test_a_workspace_made_again_never_revives_a_cursor() -> None:
    store = Store("memory://")
    h = store.history("ws")
    for i in range(30):
        h.append(msg(f"needle {i}"))
    page = h.session_history().search("needle", limit=5)
    epoch = h.epoch
    assert store.delete("ws") is True
    for i in range(30):
        h.append(msg(f"needle {i}"))
    assert h.epoch != epoch
    with pytest.raises(CursorExpired):
        h.session_history().search("needle", cursor=page["cursor"], limit=5)


def test_truncated_rows_go_to_the_quarantine_and_stat_counts_them() -> None:
    h = Store("memory://").history("ws")
    h.append_many([msg("a"), msg("b")])
    h.append(msg("dropped"))
    out = h.truncate_after(2)
    assert out.removed_rows == 1 and out.quarantine == ["memory quarantine (1 rows)"]
    st = h.stat()
    assert st.engine == "memory" and st.rows == 2 and st.quarantine_bytes > 0
    assert h.append(msg("next")).seqs == [4]  # seq 3 stays the dropped row's, in quarantine
    engine = h.engine
    assert engine.clean_quarantine(3600).to_dict() == {"removed": 0, "bytes": 0}
    assert engine.clean_quarantine(-1).removed == 1
    assert h.stat().quarantine_bytes == 0


def test_backup_is_a_file_engine_directory_and_load_takes_it_back(tmp_path: Path) -> None:
    h = Store("memory://").history("ws")
    h.append_many([msg("q"), msg("a", "assistant")])
    h.clear_soft()
    h.rollover([msg("go on")])
    h.backup(str(tmp_path / "copy" / "ws"))
    files = Store(tmp_path / "copy").history("ws")
    assert [r.line for r in files.rows()] == [r.line for r in h.rows()]
    assert files.window == h.window and files.snapshot().floor.seq == 3  # type: ignore[union-attr]
    loaded = Store("memory://").history("ws")
    out = loaded.engine.load_rows(files.rows())
    assert out.rows == 6
    assert [r.line for r in loaded.rows()] == [r.line for r in h.rows()]
    assert (loaded.window, loaded.next_seq) == (h.window, h.next_seq)
    assert loaded.snapshot().floor == h.snapshot().floor
    assert loaded.append_many([msg("a")], batch_id=h.rows().__next__().batch["id"]).seqs == [1, 2]


def test_ranked_search_ranks_as_the_file_engine_does(tmp_path: Path) -> None:
    files = Store(tmp_path / "s", durability="off").history("ws")
    memory = Store("memory://").history("ws")
    topics = ["the deploy failed with a timeout", "lunch plans for friday",
              "retry the deploy after the timeout", "parseHTTPRequest raised an error",
              "friday deploy freeze", "nothing relevant here"]
    for h in (files, memory):
        for i in range(40):
            h.append_many([msg(f"{topics[i % len(topics)]} #{i}"),
                           msg(f"noted {i}", "assistant")])
            if i == 10:
                h.clear_soft()
            if i % 13 == 12:
                h.rollover([msg("carry on")])
    windows = [w["window"] for w in memory.session_history().list()["items"]]
    assert len(windows) == 4
    served = 0
    for query in ("deploy timeout", "friday", '"deploy freeze"', "http request error"):
        for window in (None, *windows):
            args = {"query": query, "mode": "ranked", "limit": 7}
            if window is not None:
                args["window"] = window
            a = files.session_history().search(**args)
            b = memory.session_history().search(**args)
            assert a["items"] == b["items"], (query, window)
            assert (a["cursor"] is None) == (b["cursor"] is None)
            served += len(b["items"])
    assert served >= 50


def test_a_reader_changing_a_row_changes_nothing_stored() -> None:
    h = Store("memory://").history("ws")
    h.append(msg("original"))
    for row in (h.get(1), next(h.rows()), h.window_rows()[0]):
        assert row is not None
        row.data["parts"][0]["text"] = "changed"
        row.to_dict()["parts"].append({"type": "text", "text": "more"})
    assert [r.to_dict()["parts"] for r in h.rows()] == [[{"type": "text", "text": "original"}]]


# --- verify and repair (ledger/storage/rowspace.py over the memory primitives) -------


def _space(h: Any) -> Any:
    return h.engine.root.spaces[h.engine.workspace]


def test_check_and_repair_run_on_a_memory_workspace() -> None:
    from recovery.check import check
    from recovery.repair import repair

    h = Store("memory://").history("ws")
    with pytest.raises(WorkspaceNotFound):
        check(h)
    h.append_many([msg("q"), msg("a", "assistant")])
    h.clear_soft()
    h.append(msg("after"))
    report = check(h)
    assert report.ok and report.findings == [] and (report.rows, report.receipt) == (4, "memory")
    assert report.text().endswith("ws: ok: 0 damage, 0 notices (0 segments, 4 rows, "
                                  f"{report.bytes} bytes; receipt memory)")
    epoch = h.epoch
    done = repair(h)
    assert (done.changed, done.exit_code(), h.epoch) == (False, 0, epoch)
    assert done.text() == "ws: consistent, nothing to repair"
    assert done.to_dict()["problems"] == [] and done.to_dict()["check"]["ok"] is True


def test_repair_moves_a_damaged_batch_to_the_quarantine_and_keeps_the_floor() -> None:
    from recovery.check import check
    from recovery.repair import repair

    h = Store("memory://").history("ws")
    h.append_many([msg("q"), msg("a", "assistant")])
    reset = h.clear_soft().seqs[0]
    h.append_many([msg("x"), msg("y", "assistant")])
    sp = _space(h)
    bad = sp.rows[reset - 1].raw.replace(b'"role":"system"', b'"role":"systex"')
    sp.rows[reset - 1] = dataclasses.replace(sp.rows[reset - 1], raw=bad)
    sp.next_seq = 2
    report = check(h)
    codes = sorted({f.code for f in report.findings})
    assert not report.ok and codes == ["bad-row", "head"], report.text()
    assert "the memory quarantine" in report.text()
    with pytest.raises(RecoveryError, match="strict"):
        repair(h, policy="strict")
    dry = repair(h, dry_run=True)
    assert dry.changed and dry.exit_code() == 1 and dry.after is None
    assert check(h).damage == report.damage  # a dry run writes nothing
    epoch = h.epoch
    done = repair(h)
    assert done.changed and done.consistent and done.epoch is not None and h.epoch != epoch
    assert done.quarantined_batches and "move batch" in done.text()
    assert check(h).ok and [r.seq for r in h.rows()] == [1, 2, 4, 5]
    # The damaged row may have been a reset: the floor stays at its seq (fail closed).
    assert h.snapshot().floor.seq == reset  # type: ignore[union-attr]
    assert h.append(msg("next")).seqs == [6]
    assert not repair(h).changed  # a second repair changes nothing


def test_check_finds_a_wrong_boundary_and_a_gap_nothing_explains() -> None:
    from recovery.check import check
    from recovery.repair import repair

    h = Store("memory://").history("ws")
    h.append(msg("q"))
    h.clear_soft()
    h.append(msg("a"))
    sp = _space(h)
    sp.rows[1] = dataclasses.replace(sp.rows[1], boundary=None)
    assert [f.code for f in check(h).findings] == ["projection"]
    repair(h)
    assert check(h).ok and h.snapshot().floor.seq == 2  # type: ignore[union-attr]
    gap = Store("memory://").history("ws")
    gap.engine.load_rows(r for r in h.rows() if r.seq != 2)
    found = check(gap)
    assert found.ok and [(f.severity, f.code) for f in found.findings] == [("notice", "seq-gap")]
