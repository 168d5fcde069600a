"""Contract: fork and rewind (issue 33) -- what a fork holds and refuses,
that the privacy floor is carried, that neither side of a fork loses a byte
to the other's rewrites or delete, and what a rewind hides, keeps, refuses
and restores."""

from __future__ import annotations

import json

import pytest

from ledger import CursorExpired, RewriteRefused, WorkspaceNotFound
from ledger.core.errors import EpochChanged
from ledger.core.forks import ForkRefused
from ledger.core.husks import rejected_original
from tests.contract.support import ContractBase, MakeStore, found, lines, view
from tests.helpers import msg


def _turns(h: object, n: int, tag: str = "turn") -> None:
    for i in range(n):
        h.append_many([msg(f"{tag} {i} question"), msg(f"{tag} {i} answer", "assistant")])  # type: ignore[attr-defined]


class ForkContract(ContractBase):
    # --- fork -------------------------------------------------------------------------

    def test_fork_holds_the_rows_up_to_at_byte_for_byte_then_its_own(
        self, make_store: MakeStore, ws: str
    ) -> None:
        store = make_store(segment_bytes=300)
        src = store.history(ws)
        _turns(src, 6)
        before, epoch, nxt = lines(src), src.epoch, src.next_seq
        fork = src.fork(ws + "-f", at=8)
        rows = list(fork.rows())
        assert [r.line for r in rows[:8]] == before[:8]  # seqs, ids, batches: the same bytes
        assert rows[8].seq == 9 and rows[8].kind == "fork" and len(rows) == 9
        assert fork.next_seq == 10 and fork.epoch not in (0, epoch)
        got = fork.append(msg("only in the fork"))
        assert got.seqs == [10]
        assert [r["parts"][0]["text"] for r in view(fork)][-2:] == ["turn 3 answer",
                                                                    "only in the fork"]
        # the source is untouched: bytes, epoch, next seq
        assert lines(src) == before and src.epoch == epoch and src.next_seq == nxt
        assert "only in the fork" not in json.dumps(view(src))

    def test_fork_defaults_to_the_newest_row_and_records_its_origin(
        self, make_store: MakeStore, ws: str
    ) -> None:
        store = make_store()
        src = store.history(ws)
        _turns(src, 3)
        epoch = src.epoch
        fork = src.fork(ws + "-a")
        origin = fork.origin
        assert origin is not None
        assert (origin.workspace, origin.source, origin.seq, origin.epoch) == (
            ws + "-a", ws, 6, epoch)
        assert src.origin is None
        assert fork.stat().to_dict()["origin"] == origin.to_dict()
        assert src.stat().to_dict()["origin"] is None
        second = src.fork(ws + "-b", at=2)
        assert [b.workspace for b in store.branches(ws)] == [ws + "-a", ws + "-b"]
        assert [b.seq for b in store.branches(ws)] == [6, 2]
        assert store.branches(ws + "-a") == [] and store.branches("never-written") == []
        # a fork of a fork names its own source
        third = second.fork(ws + "-c")
        assert third.origin is not None and third.origin.source == ws + "-b"
        assert [b.workspace for b in store.branches(ws + "-b")] == [ws + "-c"]

    def test_the_fork_event_is_never_shown_nor_found(self, make_store: MakeStore,
                                                     ws: str) -> None:
        src = make_store().history(ws)
        _turns(src, 2)
        fork = src.fork(ws + "-f")
        assert all(r.get("kind") != "fork" for r in view(fork))
        assert found(fork.session_history(), ws) == []  # the event names the source
        assert found(fork.session_history(), "turn 1 answer") == [4]

    @pytest.mark.parametrize("case", ["exists", "mid_batch", "missing", "same", "at_floor",
                                      "before_floor", "zero"])
    def test_fork_refusals_write_nothing(self, make_store: MakeStore, ws: str,
                                         case: str) -> None:
        store = make_store()
        src = store.history(ws)
        src.append(msg("secret"))
        src.clear_soft()  # the floor: seq 2
        _turns(src, 2)  # seqs 3..6, batches of two
        target = ws + "-t"
        if case == "exists":
            store.history(target).append(msg("mine"))
        before_src, before_target = lines(src), store.history(target).exists() and lines(
            store.history(target))
        at = {"exists": 6, "mid_batch": 5, "missing": 99, "same": 6, "at_floor": 2,
              "before_floor": 1, "zero": 0}[case]
        with pytest.raises(ForkRefused) as info:
            src.fork(ws if case == "same" else target, at=at)
        assert ws in str(info.value) or target in str(info.value)
        if case == "mid_batch":
            assert "never split" in str(info.value)
        if case in ("at_floor", "before_floor"):
            assert "privacy floor" in str(info.value)
        assert lines(src) == before_src
        if case == "exists":
            assert lines(store.history(target)) == before_target
        else:
            assert not store.history(target).exists()
        assert store.branches(ws) == []

    def test_fork_of_a_missing_workspace(self, make_store: MakeStore, ws: str) -> None:
        store = make_store()
        with pytest.raises(WorkspaceNotFound):
            store.history(ws).fork(ws + "-f")
        assert not store.history(ws + "-f").exists()

    def test_the_privacy_floor_is_carried(self, make_store: MakeStore, ws: str) -> None:
        store = make_store()
        src = store.history(ws)
        src.append(msg("the secret password is swordfish"))
        src.clear_soft()
        _turns(src, 2)
        fork = src.fork(ws + "-f")
        assert fork.snapshot().floor is not None
        assert fork.snapshot().floor.seq == src.snapshot().floor.seq == 2  # type: ignore[union-attr]
        assert "swordfish" not in json.dumps(view(fork))
        tool = fork.session_history()
        assert found(tool, "swordfish") == []
        assert "swordfish" not in tool.call({"action": "list"})
        assert "swordfish" not in tool.call({"action": "read", "seq": 1})
        # the cleared rows are the fork's own copy: a purge of the fork deletes them there
        fork.purge_before_floor()
        assert all("swordfish" not in json.dumps(r.to_dict()) for r in fork.rows())
        assert any("swordfish" in json.dumps(r.to_dict()) for r in src.rows())

    @pytest.mark.parametrize("op", ["purge", "truncate", "reject", "rewind", "delete",
                                    "append"])
    @pytest.mark.parametrize("side", ["source", "fork"])
    def test_neither_side_loses_a_byte_to_the_other(
        self, make_store: MakeStore, ws: str, op: str, side: str
    ) -> None:
        store = make_store(segment_bytes=256)
        src = store.history(ws)
        src.append(msg("old secret"))
        src.clear_soft()
        _turns(src, 8)  # seqs 3..18
        fork = src.fork(ws + "-f", at=14)
        fork.append(msg("fork's own"))
        actor, other = (src, fork) if side == "source" else (fork, src)
        kept = lines(other)
        epoch = other.epoch
        if op == "purge":
            actor.purge_before_floor()
        elif op == "truncate":
            actor.truncate_after(4)
        elif op == "reject":
            actor.reject(3)
        elif op == "rewind":
            actor.rewind(to=4)
        elif op == "delete":
            assert store.delete(actor.workspace)
        else:
            actor.append(msg("more"))
        assert lines(other) == kept
        assert other.epoch == epoch
        # the other side still writes and reads as before
        other.append(msg("still here"))
        assert view(other)[-1]["parts"][0]["text"] == "still here"

    # --- rewind -----------------------------------------------------------------------

    def test_rewind_brings_back_the_view_as_it_was_at_to(self, make_store: MakeStore,
                                                         ws: str) -> None:
        h = make_store().history(ws)
        _turns(h, 3)  # seqs 1..6
        at_six = view(h)
        window = h.window
        h.append(msg("wrong turn"))
        h.rollover([msg("after the rollover")])
        h.append(msg("and on"))
        h.compact([msg("a summary")])
        h.append(msg("more"))
        nxt = h.next_seq
        epoch = h.epoch
        got = h.rewind(to=6)
        assert got.to == 6 and got.rewound == list(range(7, nxt)) and got.already == []
        assert got.epoch == h.epoch != epoch
        assert view(h) == at_six
        assert h.window == window  # the window structure of seq 6 is back
        # nothing is deleted: the rows keep their seqs and the originals
        rows = list(h.rows())
        assert [r.seq for r in rows] == list(range(1, nxt))
        originals = [rejected_original(r.to_dict()) for r in rows[6:]]
        assert originals[0]["parts"][0]["text"] == "wrong turn"
        assert originals[1]["kind"] == "reset"
        # appends go on after the old high-water mark
        assert h.append(msg("the right turn")).seqs == [nxt]
        assert view(h)[-1]["parts"][0]["text"] == "the right turn"
        assert len(view(h)) == len(at_six) + 1

    def test_rewound_rows_are_not_found_and_cursors_expire(self, make_store: MakeStore,
                                                          ws: str) -> None:
        h = make_store().history(ws)
        for i in range(30):
            h.append(msg(f"needle {i} " + "x" * 200))
        tool = h.session_history()
        page = tool.search("needle", limit=2)
        assert page["cursor"] is not None
        h.rewind(to=10)
        with pytest.raises(CursorExpired):
            tool.search("needle", cursor=page["cursor"], limit=2)
        assert found(h.session_history(), "needle") == list(range(1, 11))

    def test_rewind_is_conditional_on_the_epoch(self, make_store: MakeStore, ws: str) -> None:
        h = make_store().history(ws)
        _turns(h, 3)
        stale = h.epoch
        h.reject(5)
        before = lines(h)
        with pytest.raises(EpochChanged):
            h.rewind(to=2, expect_epoch=stale)
        assert lines(h) == before
        got = h.rewind(to=2, expect_epoch=h.epoch)
        assert got.rewound == [3, 4, 6] and got.already == [5]

    def test_rewind_refusals_change_nothing(self, make_store: MakeStore, ws: str) -> None:
        h = make_store().history(ws)
        _turns(h, 2)
        before, epoch = lines(h), h.epoch
        with pytest.raises(RewriteRefused, match="never split"):
            h.rewind(to=3)
        with pytest.raises(RewriteRefused, match="no readable row"):
            h.rewind(to=40)
        with pytest.raises(RewriteRefused):
            h.rewind(to=-1)
        assert lines(h) == before and h.epoch == epoch
        assert h.rewind(to=4).rewound == []  # the newest row: nothing to do
        assert h.epoch == epoch

    def test_rewind_never_undoes_a_clear_unless_the_user_says_so(
        self, make_store: MakeStore, ws: str
    ) -> None:
        h = make_store().history(ws)
        h.append(msg("private thing"))
        h.clear_soft()  # seq 2
        h.append(msg("after the clear"))
        before, epoch = lines(h), h.epoch
        with pytest.raises(RewriteRefused, match="restore_cleared"):
            h.rewind(to=1)
        assert lines(h) == before and h.epoch == epoch
        assert "private thing" not in json.dumps(view(h))
        h.rewind(to=2)  # at the floor: nothing it hides comes back
        assert view(h) == []
        got = h.rewind(to=1, restore_cleared=True)
        assert got.rewound == [2]
        assert h.snapshot().floor is None
        assert [r["parts"][0]["text"] for r in view(h)] == ["private thing"]
        assert found(h.session_history(), "private") == [1]

    def test_truncate_still_deletes_what_a_rewind_hid(self, make_store: MakeStore,
                                                      ws: str) -> None:
        h = make_store().history(ws)
        _turns(h, 3)
        h.rewind(to=2)
        h.truncate_after(2)
        assert [r.seq for r in h.rows()] == [1, 2]
