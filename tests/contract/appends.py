"""Contract: atomic batches, seq assignment, conditional and idempotent
appends, reads of rows, workspaces, stat and delete (DESIGN.md 3, 12)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from ledger import (
    Conflict,
    InvalidRow,
    InvalidWorkspace,
    LedgerError,
    WindowChanged,
    WorkspaceNotFound,
)
from ledger.core.errors import RowTooLarge
from tests.contract.support import ContractBase, MakeStore, call, code, lines, view
from tests.helpers import check_log, msg


def _batch(tag: str) -> list[dict[str, Any]]:
    return [msg(f"{tag} 1"), msg(f"{tag} 2", role="assistant"), msg(f"{tag} 3")]


class AppendContract(ContractBase):
    # --- atomic batches and gap-free seqs -------------------------------------------

    def test_a_batch_gets_consecutive_seqs_from_one(self, make_store: MakeStore, ws: str) -> None:
        h = make_store().history(ws)
        assert h.append_many([msg("a"), msg("b", "assistant")]).seqs == [1, 2]
        assert h.append(msg("c")).seqs == [3]
        assert [r.to_dict()["parts"][0]["text"] for r in h.rows()] == ["a", "b", "c"]
        assert [r.seq for r in h.rows(after_seq=1)] == [2, 3]
        got = h.get(2)
        assert got is not None and got.to_dict()["role"] == "assistant"
        assert h.get(99) is None

    def test_a_bad_row_refuses_the_whole_batch(self, make_store: MakeStore, ws: str) -> None:
        h = make_store().history(ws)
        h.append(msg("kept"))
        before = [r.to_dict() for r in h.rows()]
        epoch = h.epoch
        with pytest.raises(InvalidRow) as info:
            h.append_many([msg("fine"), {"role": "user", "parts": "not a list"}])
        assert info.value.index == 1 and "row 1" in str(info.value)  # names the row
        assert [r.to_dict() for r in h.rows()] == before
        assert h.epoch == epoch
        assert h.append(msg("next")).seqs == [2]  # no seq was consumed

    def test_a_row_above_max_row_bytes_is_refused(self, make_store: MakeStore, ws: str) -> None:
        h = make_store(max_row_bytes=1024).history(ws)
        with pytest.raises(RowTooLarge) as info:
            h.append_many([msg("small"), msg("x" * 2000)])
        assert info.value.index == 1 and "max_row_bytes" in str(info.value)
        assert not h.exists()
        # The limit is on the stored line: a row just under it goes in.
        r = h.append(msg("y" * 700))
        got = h.get(r.seqs[0])
        assert r.seqs == [1] and got is not None and len(got.line) <= 1024

    def test_concurrent_writers_get_whole_gap_free_batches(
        self, make_store: MakeStore, ws: str
    ) -> None:
        store = make_store()
        store.history(ws).append(msg("first"), batch_id="first")
        errors: list[BaseException] = []
        acks: dict[str, list[int]] = {}

        def writer(k: int) -> None:
            h = store.history(ws)  # a History of its own, as a second caller has
            try:
                for i in range(6):
                    bid = f"t{k}-{i}"
                    acks[bid] = h.append_many(_batch(bid), batch_id=bid).seqs
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert errors == [] and not any(t.is_alive() for t in threads)
        batches = check_log([r.to_dict() for r in store.history(ws).rows()])
        assert {b: s for b, s in batches.items() if b != "first"} == acks
        assert len(acks) == 24

    # --- reads ------------------------------------------------------------------------

    def test_nothing_exists_until_the_first_write(self, make_store: MakeStore, ws: str) -> None:
        store = make_store()
        h = store.history(ws)
        assert ws not in store.workspaces() and not h.exists()
        with pytest.raises(WorkspaceNotFound) as info:
            list(h.rows())
        assert ws in str(info.value)
        with pytest.raises(WorkspaceNotFound):
            list(h.rows(after_seq=3))
        # A runtime's first send reads the window and the view: window 0, empty.
        assert (h.window, h.provider_view(), h.window_rows(), h.next_seq) == (0, [], [], 1)
        tool = h.session_history()
        res = call(tool, {"action": "search", "query": "x"})
        assert res["items"] == [] and res["cursor"] is None
        assert code(call(tool, {"action": "read", "seq": 1})) == "not_found"
        assert ws not in store.workspaces()  # reading created nothing
        h.append(msg("x"))
        assert ws in store.workspaces() and h.exists()

    def test_a_never_written_workspace_has_the_empty_snapshot(
        self, make_store: MakeStore, ws: str
    ) -> None:
        store = make_store()
        h = store.history(ws)
        for _ in range(2):  # never written, then written and deleted
            snap = h.snapshot()
            assert (snap.next_seq, snap.epoch, snap.window, snap.floor, snap.window_seq) == (
                1, 0, None, None, 0)
            assert (h.epoch, h.window, h.next_seq) == (0, 0, 1)
            assert ws not in store.workspaces() and not h.exists()  # reading created nothing
            # The empty state is what a first conditional append expects.
            r = h.append(msg("first"), expect_next_seq=snap.next_seq,
                         expect_window=snap.window_seq)
            assert r.seqs == [1] and r.window == 0 and r.epoch != 0  # a write never picks 0
            assert (h.epoch, h.next_seq) == (r.epoch, 2) and h.snapshot().epoch == r.epoch
            assert store.delete(ws) is True

    @pytest.mark.parametrize("segment_bytes", [1 << 16, 256])
    def test_rows_after_and_get(
        self, make_store: MakeStore, ws: str, segment_bytes: int
    ) -> None:
        h = make_store(segment_bytes=segment_bytes).history(ws)
        sizes = [1, 3, 2, 1, 4, 1, 1, 2, 5, 1, 3, 1, 2, 1, 1, 2]
        for k, n in enumerate(sizes):
            h.append_many([msg(f"b{k} r{i} " + "x" * (k * 7 % 90)) for i in range(n)])
        total = sum(sizes)
        rows = [r.to_dict() for r in h.rows()]
        assert [r["seq"] for r in rows] == list(range(1, total + 1))
        for after in [None, -5, 0, *range(1, total + 2), 10**6]:
            got = [r.seq for r in h.rows(after_seq=after)]
            lo = 0 if after is None else max(after, 0)
            assert got == list(range(lo + 1, total + 1)), f"after_seq={after}"
        for seq in range(1, total + 1):
            row = h.get(seq)
            assert row is not None and row.to_dict() == rows[seq - 1], f"get({seq})"
        for seq in [0, -1, total + 1, 10**9]:
            assert h.get(seq) is None, f"get({seq})"

    def test_rows_streams_lazily(self, make_store: MakeStore, ws: str) -> None:
        """rows() is an iterator: the first rows come before the rest is read."""
        h = make_store(segment_bytes=256).history(ws)
        h.append_many([msg(f"r{k}") for k in range(20)])
        it = h.rows()
        assert next(it).seq == 1 and next(it).seq == 2
        h.append(msg("later"))
        assert len(list(h.rows())) == 21

    def test_rows_round_trip_with_store_assigned_fields(
        self, make_store: MakeStore, ws: str
    ) -> None:
        h = make_store().history(ws)
        odd = {"role": "user", "parts": [{"type": "text", "text": 'a\u2028"\\\n\x00😀'}],
               "zeta": 1, "alpha": {"b": 2, "a": [1.5, None, True]}, "meta": {"k": "é"}}
        r1 = h.append_many([odd, msg("b", "assistant")])
        # An unknown top-level "reset" on a message keeps the caller's order and
        # is no floor.
        r2 = h.append({"role": "user", "parts": [], "zzz": 1, "reset": {"reason": "manual"},
                       "aaa": 2})
        got = [r.to_dict() for r in h.rows()]
        canonical = ["seq", "id", "kind", "role", "parts", "partial", "meta", "ts", "batch"]
        assert list(got[0]) == [*canonical, "zeta", "alpha"]
        assert got[0]["parts"] == odd["parts"] and got[0]["alpha"] == odd["alpha"]
        assert got[0]["meta"] == {"k": "é"} and got[0]["kind"] == "message"
        assert list(got[2])[9:] == ["zzz", "reset", "aaa"]
        assert h.snapshot().floor is None and h.window == 0
        ids = [r["id"] for r in got]
        assert len(set(ids)) == 3 and all(isinstance(i, str) and i for i in ids)
        assert all(isinstance(r["ts"], int) for r in got)
        assert [r["batch"] for r in got] == [
            {"id": r1.batch_id, "n": 2, "i": 0}, {"id": r1.batch_id, "n": 2, "i": 1},
            {"id": r2.batch_id, "n": 1, "i": 0}]
        assert r1.batch_id != r2.batch_id

    # --- conditional appends ----------------------------------------------------------

    def test_expect_next_seq(self, make_store: MakeStore, ws: str) -> None:
        h = make_store().history(ws)
        assert h.append(msg("a"), expect_next_seq=1).seqs == [1]
        before = lines(h)
        for wrong in (1, 3, 0, 100):
            with pytest.raises(Conflict) as info:
                h.append(msg("b"), expect_next_seq=wrong)
            assert not isinstance(info.value, WindowChanged)
            assert "2" in str(info.value)
        assert lines(h) == before
        assert h.append_many([msg("b"), msg("c")], expect_next_seq=2).seqs == [2, 3]
        assert h.clear_soft(expect_next_seq=4).seqs == [4]

    def test_expect_window(self, make_store: MakeStore, ws: str) -> None:
        h = make_store().history(ws)
        r = h.append(msg("a"), expect_window=0)
        assert r.window == 0
        c = h.clear_soft()
        before = lines(h)
        with pytest.raises(WindowChanged):
            h.append(msg("stale"), expect_window=r.window)
        with pytest.raises(WindowChanged):
            h.rollover([msg("t")], expect_window=r.window)
        assert lines(h) == before
        assert h.append(msg("fresh"), expect_window=c.window).seqs == [3]
        ro = h.rollover([msg("t")], expect_window=c.window)
        assert ro.window == 4 != c.window
        with pytest.raises(WindowChanged):
            h.compact([msg("s")], expect_window=c.window)
        assert h.compact([msg("s")], expect_window=ro.window).window == 7

    def test_expect_epoch(self, make_store: MakeStore, ws: str) -> None:
        """A rewrite keeps the next seq and the window but changes the epoch:
        ``expect_epoch`` refuses an append planned on the history before it."""
        h = make_store().history(ws)
        r = h.append_many([msg("a"), msg("b", role="assistant")])
        assert h.append(msg("c"), expect_epoch=r.epoch, expect_next_seq=3,
                        expect_window=r.window).seqs == [3]
        snap = h.snapshot()
        h.reject(2)
        after = h.snapshot()
        assert (after.next_seq, after.window_seq) == (snap.next_seq, snap.window_seq)
        assert after.epoch != snap.epoch
        before = lines(h)
        with pytest.raises(Conflict) as info:
            h.append(msg("stale"), expect_next_seq=snap.next_seq,
                     expect_window=snap.window_seq, expect_epoch=snap.epoch)
        assert not isinstance(info.value, WindowChanged)
        assert str(snap.epoch) in str(info.value) and str(after.epoch) in str(info.value)
        assert lines(h) == before
        assert h.append(msg("fresh"), expect_epoch=after.epoch).seqs == [snap.next_seq]

    def test_a_refused_conditional_append_creates_nothing(
        self, make_store: MakeStore, ws: str
    ) -> None:
        store = make_store()
        with pytest.raises(Conflict):
            store.history(ws).append(msg("x"), expect_next_seq=5)
        with pytest.raises(WindowChanged):
            store.history(ws).append(msg("x"), expect_window=3)
        with pytest.raises(Conflict):
            store.history(ws).append(msg("x"), expect_epoch=7)
        assert ws not in store.workspaces() and not store.history(ws).exists()
        assert store.history(ws).append(msg("x"), expect_next_seq=1,
                                        expect_epoch=0).seqs == [1]

    # --- idempotent appends -----------------------------------------------------------

    @pytest.mark.parametrize("segment_bytes", [1 << 16, 200])
    def test_retrying_a_committed_batch_returns_it_and_writes_nothing(
        self, make_store: MakeStore, ws: str, segment_bytes: int
    ) -> None:
        h = make_store(segment_bytes=segment_bytes).history(ws)
        first = h.append_many(_batch("a"), batch_id="job-1")
        for k in range(8):
            h.append_many(_batch(f"filler {k}"))
        before, snap = lines(h), h.snapshot()
        retry = h.append_many(_batch("different content"), batch_id="job-1")
        assert retry.seqs == first.seqs == [1, 2, 3]
        assert retry.epoch == first.epoch and retry.batch_id == "job-1"
        assert lines(h) == before and h.snapshot() == snap, "an idempotent retry wrote"
        one = h.append(msg("single"), batch_id="job-single")
        assert h.append(msg("other"), batch_id="job-single").seqs == one.seqs == [28]

    def test_batch_ids_are_per_workspace(self, make_store: MakeStore, ws: str) -> None:
        store = make_store()
        a, b = store.history(ws), store.history(ws + "-b")
        assert a.append(msg(), batch_id="same").seqs == [1]
        a.append(msg())
        assert b.append(msg(), batch_id="same").seqs == [1]
        assert len(list(b.rows())) == 1

    def test_batch_id_that_is_a_substring_of_another(self, make_store: MakeStore, ws: str) -> None:
        """A committed id is matched as an id, not as bytes that contain it."""
        h = make_store().history(ws)
        h.append(msg("long"), batch_id="job-10")
        h.append(msg('text mentions job-1 and "job-1"'))
        assert h.append(msg("short"), batch_id="job-1").seqs == [3]
        assert [r.batch["id"] for r in h.rows()].count("job-1") == 1

    def test_an_idempotent_retry_wins_over_stale_conditions(
        self, make_store: MakeStore, ws: str
    ) -> None:
        """A retry of a committed batch returns its result even though its
        conditions no longer hold (they held when it was committed)."""
        h = make_store().history(ws)
        r = h.append(msg("a"), batch_id="job", expect_next_seq=1, expect_window=0)
        h.clear_soft()
        again = h.append(msg("a"), batch_id="job", expect_next_seq=1, expect_window=0)
        assert again.seqs == r.seqs == [1]
        assert len(list(h.rows())) == 2

    @pytest.mark.parametrize("rows", [3, 40], ids=["3-big-rows", "40-rows"])
    def test_a_retry_of_a_batch_over_1_mib_returns_every_seq(
        self, make_store: MakeStore, ws: str, rows: int
    ) -> None:
        """A batch of about 1.5 MiB (more than the tail a file retry looks
        in): the retry returns every seq of the original and writes nothing."""
        h = make_store().history(ws)
        h.append(msg("before"))
        pad = "x" * ((3 << 20) // (2 * rows))
        batch = [msg(f"{i} {pad}") for i in range(rows)]
        first = h.append_many(batch, batch_id="big-1")
        assert first.seqs == list(range(2, 2 + rows))
        snap = h.snapshot()
        again = h.append_many(batch, batch_id="big-1")
        assert again.seqs == first.seqs and h.snapshot() == snap
        assert h.append(msg("next")).seqs == [2 + rows]

    # --- workspaces, stat, delete -----------------------------------------------------

    def test_workspace_ids(self, make_store: MakeStore, ws: str) -> None:
        store = make_store()
        valid = [ws + "-A.b_c@d+e=f-g", (ws + "x" * 128)[:128], ws + "a..b"]
        for name in valid:
            assert store.history(name).append(msg()).seqs == [1]
        assert set(valid) <= set(store.workspaces())
        assert store.workspaces() == sorted(store.workspaces())
        for bad in ("", "..", "a/b", "x" * 129, ".hidden", "a b", "ü", None, 5):
            with pytest.raises(InvalidWorkspace):
                store.history(bad)  # type: ignore[arg-type]

    def test_stat_accounts_for_the_history(self, make_store: MakeStore, ws: str) -> None:
        h = make_store().history(ws)
        h.append_many([msg("a"), msg("b", "assistant")])
        floor = h.clear_soft().seqs[0]
        r = h.rollover([msg("go on")])
        s = h.stat()
        assert s.workspace == ws
        assert (s.epoch, s.window, s.next_seq) == (h.epoch, r.window, 7)
        assert s.windows == 3 and s.rows == 6 and s.bytes > 0
        assert s.floor is not None and s.floor.seq == floor
        h.reject(1)
        assert h.stat().epoch == h.epoch != s.epoch
        with pytest.raises(WorkspaceNotFound):
            make_store().history(ws + "-none").stat()

    def test_delete_removes_the_workspace(self, make_store: MakeStore, ws: str) -> None:
        store = make_store()
        a, b = ws + "-a", ws + "-b"
        store.history(a).append(msg("x"))
        store.history(b).append(msg("y"))
        assert store.delete(a) is True
        assert a not in store.workspaces() and b in store.workspaces()
        with pytest.raises(WorkspaceNotFound):
            list(store.history(a).rows())
        assert store.delete(a) is False
        assert call(store.history(a).session_history(),
                    {"action": "search", "query": "x"})["items"] == []
        assert store.history(a).append(msg("again")).seqs == [1]
        assert [r.to_dict()["parts"][0]["text"] for r in store.history(a).rows()] == ["again"]
        assert [r.seq for r in store.history(b).rows()] == [1]

    def test_a_bad_option_is_refused(self, make_store: MakeStore) -> None:
        with pytest.raises(LedgerError) as info:
            make_store(durability="sometimes")
        assert "durability" in str(info.value)

    # --- quarantined requests ---------------------------------------------------------

    def test_quarantine_stores_requests_out_of_sight(self, make_store: MakeStore, ws: str) -> None:
        h = make_store().history(ws)
        h.append(msg("before"))
        original = msg("a refused prompt", id="req-9", meta={"why": "too big"})
        r = h.quarantine([original])
        got = h.get(r.seqs[0])
        assert got is not None
        d = got.to_dict()
        assert (d["role"], d["parts"], d["id"]) == ("assistant", [], "req-9")
        assert d["meta"]["quarantine"]["row"] == original
        assert [x["seq"] for x in view(h)] == [1]
        tool = h.session_history()
        assert call(tool, {"action": "search", "query": "refused"})["items"] == []
        assert code(call(tool, {"action": "read", "seq": r.seqs[0]})) == "not_found"
        with pytest.raises(InvalidRow):
            h.quarantine([])
