"""Contract: the engine operations recovery and the CLI drive -- ``backup``,
``load_rows``, ``put_quarantine``, ``list_quarantine``, ``clean_quarantine``, and ``verify`` /
``repair`` on a healthy workspace and on one with a damaged row (the runner's
``corrupt`` fixture damages a row's stored bytes the way its engine can hold
them: a segment line on files, a stored row in memory or in ``tl_rows``).

Each case drives ``History.engine`` (``ledger.storage.engine.WorkspaceEngine``)
as ``recovery`` and the CLI do."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ledger import LedgerError, Store
from ledger.core.errors import WorkspaceNotFound
from ledger.transcript.history import History
from tests.contract.support import ContractBase, MakeStore, lines
from tests.helpers import msg

# ``corrupt(h, seq)``: damage the stored bytes of row ``seq`` of ``h`` so its
# checksum fails (same length, the word "payload" in it becomes "paXload").
Corrupt = Callable[[History, int], None]


def damaged(line: bytes) -> bytes:
    """``line`` with its first "payload" changed: the checksum no longer matches."""
    assert b"payload" in line, line
    return line.replace(b"payload", b"paXload", 1)


def damage_tl_row(h: History, seq: int) -> None:
    """``corrupt`` for the PostgreSQL and Citus runners: damage row ``seq``'s
    bytes in ``tl_rows``."""
    with h.engine.db.write("damage a row for the test") as conn:  # type: ignore[attr-defined]
        (raw,) = conn.execute("SELECT raw FROM tl_rows WHERE workspace = %s AND seq = %s",
                              (h.workspace, seq)).fetchone()
        conn.execute("UPDATE tl_rows SET raw = %s WHERE workspace = %s AND seq = %s",
                     (damaged(bytes(raw)), h.workspace, seq))


def _filled(h: History) -> list[int]:
    """Three batches, a manual reset among them; the seqs of the middle batch."""
    h.append(msg("before"))
    h.clear_soft()
    seqs = h.append_many([msg("payload one"), msg("payload two", "assistant")]).seqs
    h.append(msg("after"))
    return seqs


class OperationsContract(ContractBase):
    # --- backup --------------------------------------------------------------------

    def test_backup_is_a_file_engine_workspace_with_the_same_bytes(
        self, make_store: MakeStore, ws: str, tmp_path: Path
    ) -> None:
        h = make_store().history(ws)
        _filled(h)
        dest = tmp_path / "copies" / ws
        dest.parent.mkdir()
        got = h.engine.backup(str(dest))
        assert (got.workspace, got.dest) == (ws, str(dest))
        assert got.bytes >= sum(len(line) + 1 for line in lines(h))  # rows, plus FORMAT ...
        copy = Store(tmp_path / "copies", durability="off").history(ws)
        assert lines(copy) == lines(h)
        # the same window and floor (positions are each engine's own: compare seqs)
        for got_b, want_b in [(copy.snapshot().window, h.snapshot().window),
                              (copy.snapshot().floor, h.snapshot().floor)]:
            assert want_b is not None and got_b is not None and got_b.seq == want_b.seq
        with pytest.raises(LedgerError, match="already exists"):
            h.engine.backup(str(dest))

    def test_backup_of_a_workspace_never_written_is_refused(
        self, make_store: MakeStore, ws: str, tmp_path: Path
    ) -> None:
        h = make_store().history(ws)
        with pytest.raises(WorkspaceNotFound):
            h.engine.backup(str(tmp_path / "copy"))
        assert not (tmp_path / "copy").exists()
        assert not h.exists()

    # --- load_rows ------------------------------------------------------------------

    def test_load_rows_makes_a_byte_identical_workspace(
        self, make_store: MakeStore, ws: str
    ) -> None:
        store = make_store(durability="off")
        src = store.history(ws)
        _filled(src)
        src.reject(src.snapshot().next_seq - 1)
        dst = store.history(ws + "-copy")
        got = dst.engine.load_rows(src.rows())
        assert (got.rows, got.bytes) == (len(lines(src)),
                                         sum(len(line) + 1 for line in lines(src)))
        assert lines(dst) == lines(src)
        a, b = src.snapshot(), dst.snapshot()
        assert b.next_seq == a.next_seq
        assert (b.window_seq, b.floor and b.floor.seq) == (a.window_seq, a.floor and a.floor.seq)
        assert [r.to_dict() for r in dst.provider_view()] == [
            r.to_dict() for r in src.provider_view()]
        # the copy is a workspace like any other: it takes appends after the rows
        assert dst.append(msg("next")).seqs == [a.next_seq]

    def test_load_rows_into_an_existing_workspace_writes_nothing(
        self, make_store: MakeStore, ws: str
    ) -> None:
        store = make_store(durability="off")
        src = store.history(ws)
        _filled(src)
        dst = store.history(ws + "-copy")
        dst.append(msg("already here"))
        before = lines(dst)
        with pytest.raises(LedgerError, match="already exists"):
            dst.engine.load_rows(src.rows())
        assert lines(dst) == before

    # --- quarantine ---------------------------------------------------------------------

    def test_put_quarantine_keeps_the_same_bytes_once_and_clean_removes_them(
        self, make_store: MakeStore, ws: str
    ) -> None:
        h = make_store(durability="off").history(ws)
        h.append(msg("hi"))
        before = lines(h)
        base = h.engine.stat().quarantine_bytes
        data = b'{"not": "a row"}\x00\xff'
        name = h.engine.put_quarantine(data, source="import.jsonl", offset=17, reason="refused")
        assert isinstance(name, str) and name
        held = h.engine.stat().quarantine_bytes
        assert held >= base + len(data)  # the bytes, and the engine's own record of them
        again = h.engine.put_quarantine(data, source="import.jsonl", offset=17, reason="refused")
        assert again == name
        assert h.engine.stat().quarantine_bytes == held  # kept once
        [entry] = h.engine.list_quarantine()
        assert (entry.name, entry.bytes, entry.seq) == (name, len(data), None)
        assert "refused" in entry.reason and abs(entry.ts_ms - time.time() * 1000) < 60_000
        assert lines(h) == before  # the log is untouched
        kept = h.engine.clean_quarantine(3600)
        assert (kept.removed, kept.bytes) == (0, 0)
        assert h.engine.stat().quarantine_bytes == held
        gone = h.engine.clean_quarantine(-1)
        assert (gone.removed, gone.bytes) == (1, len(data))
        assert h.engine.stat().quarantine_bytes == 0
        assert h.engine.list_quarantine() == []
        assert lines(h) == before

    def test_list_quarantine_shows_what_a_truncation_put_aside(
        self, make_store: MakeStore, ws: str
    ) -> None:
        h = make_store(durability="off").history(ws)
        with pytest.raises(WorkspaceNotFound):
            h.engine.list_quarantine()
        h.append(msg("kept"))
        h.append_many([msg("dropped"), msg("also", "assistant")])
        assert h.engine.list_quarantine() == []
        h.truncate_after(1)
        entries = h.engine.list_quarantine()
        assert entries and all("truncat" in e.reason for e in entries)
        assert sum(e.bytes for e in entries) >= sum(len(line) for line in [
            b'"dropped"', b'"also"'])
        assert h.engine.clean_quarantine(-1).removed == len(entries)
        assert h.engine.list_quarantine() == []

    def test_put_quarantine_needs_the_workspace(self, make_store: MakeStore, ws: str) -> None:
        h = make_store(durability="off").history(ws)
        with pytest.raises(WorkspaceNotFound):
            h.engine.put_quarantine(b"x", source="s", offset=0, reason="r")
        assert not h.exists()

    # --- verify and repair -----------------------------------------------------------------

    def test_verify_and_repair_a_healthy_workspace_change_nothing(
        self, make_store: MakeStore, ws: str
    ) -> None:
        h = make_store(durability="off").history(ws)
        _filled(h)
        before, epoch = lines(h), h.epoch
        report = h.engine.verify()
        assert report.ok and report.damage == 0 and report.rows == len(before)
        fixed = h.engine.repair()
        assert not fixed.changed and fixed.consistent
        assert lines(h) == before and h.epoch == epoch

    def test_verify_and_repair_a_damaged_row(
        self, make_store: MakeStore, ws: str, corrupt: Corrupt
    ) -> None:
        h = make_store(durability="off").history(ws)
        seqs = _filled(h)
        intact = {r.seq: r.line for r in h.rows() if r.seq not in seqs}
        corrupt(h, seqs[0])
        report = h.engine.verify()
        assert not report.ok and report.damage >= 1
        damaged_bytes = [line for line in _raw_lines(h)]
        dry = h.engine.repair(dry_run=True)
        assert dry.changed and dry.after is None
        assert _raw_lines(h) == damaged_bytes  # a dry run writes nothing
        assert not h.engine.verify().ok
        assert _strict_refuses(h)
        assert _raw_lines(h) == damaged_bytes  # strict refuses to remove anything
        epoch = h.epoch
        fixed = h.engine.repair()
        assert fixed.changed and fixed.consistent
        assert fixed.after is not None and fixed.after.ok
        assert h.epoch != epoch
        assert h.engine.verify().ok
        # what failed verification went to the quarantine, never lost; the
        # rows of the other batches are there byte for byte
        assert h.engine.stat().quarantine_bytes > 0
        assert {r.seq: r.line for r in h.rows() if r.seq not in seqs} == intact
        assert seqs[0] not in [r.seq for r in h.rows()]
        # the privacy floor (the reset before the damage) still holds
        assert "before" not in [t for r in h.provider_view() for t in _texts(r.to_dict())]
        again = h.engine.repair()
        assert not again.changed
        assert h.append(msg("goes on")).seqs == [h.snapshot().next_seq - 1]


def _raw_lines(h: History) -> list[bytes]:
    """What a reader can get of the rows now (damaged rows included where the
    engine reads them raw): the bytes of every row readable, in order."""
    try:
        return [r.line for r in h.rows()]
    except LedgerError as exc:  # an engine that refuses to stream a damaged row
        return [str(exc).encode()]


def _strict_refuses(h: History) -> bool:
    """Whether ``repair(policy="strict")`` refuses: a LedgerError, or a report
    that says so (``refused``, exit code 1) and changed nothing."""
    try:
        got = h.engine.repair(policy="strict")
    except LedgerError:
        return True
    return got.refused is not None and got.exit_code() == 1


def _texts(row: dict[str, object]) -> list[str]:
    parts = row.get("parts")
    return [str(p.get("text")) for p in parts if isinstance(p, dict)] if isinstance(
        parts, list) else []
