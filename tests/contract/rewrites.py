"""Contract: reject, truncate_after, purge_before_floor and rebaseline --
what each hides or removes, what each refuses, and that each is a new epoch
(DESIGN.md 2, 10)."""

from __future__ import annotations

import json

import pytest

from ledger import CursorExpired, LedgerError
from ledger.core.errors import RewriteRefused
from tests.contract.support import ContractBase, MakeStore, call, code, found, lines, view
from tests.helpers import msg


class RewriteContract(ContractBase):
    def test_appends_keep_the_epoch(self, make_store: MakeStore, ws: str) -> None:
        h = make_store().history(ws)
        epoch = h.append(msg("a")).epoch
        for i in range(5):
            assert h.append(msg(f"m{i}")).epoch == epoch
        assert h.clear_soft().epoch == epoch
        assert h.rollover([msg("go on")]).epoch == epoch
        assert h.compact([msg("summary")]).epoch == epoch
        assert h.epoch == epoch

    @pytest.mark.parametrize("rewrite", ["truncate_after", "reject", "purge_before_floor",
                                         "rebaseline"])
    def test_every_rewrite_bumps_the_epoch_and_expires_cursors(
        self, make_store: MakeStore, ws: str, rewrite: str
    ) -> None:
        h = make_store().history(ws)
        for i in range(4):
            h.append_many([msg(f"hello {i}"), msg(f"reply {i}", "assistant")])
        h.clear_soft()
        for i in range(30):
            h.append(msg(f"needle {i} " + "x" * 200))
        tool = h.session_history()
        page = tool.search("needle", limit=2)
        assert page["cursor"] is not None
        epoch = h.epoch
        if rewrite == "truncate_after":
            h.truncate_after(h.snapshot().next_seq - 2)
        elif rewrite == "reject":
            h.reject(h.snapshot().next_seq - 1)
        elif rewrite == "purge_before_floor":
            h.purge_before_floor()
        else:
            assert h.rebaseline() == h.epoch
        assert h.epoch != epoch
        with pytest.raises(CursorExpired):
            tool.search("needle", cursor=page["cursor"], limit=2)
        assert [i["seq"] for i in tool.search("needle", limit=2)["items"]] == [10, 11]

    def test_floors_hold_through_rewrites(self, make_store: MakeStore, ws: str) -> None:
        h = make_store().history(ws)
        h.append(msg("secret"))
        h.clear_soft()
        for i in range(3):
            h.append(msg(f"visible {i}"))
        h.reject(h.snapshot().next_seq - 1)
        h.truncate_after(h.snapshot().next_seq - 2)
        tool = h.session_history()
        assert "secret" not in tool.call({"action": "search", "query": "secret"})
        assert "visible 0" in tool.call({"action": "search", "query": "visible"})
        h.purge_before_floor()
        assert all("secret" not in json.dumps(r.to_dict()) for r in h.rows())

    # --- reject ----------------------------------------------------------------------

    def test_reject_makes_an_empty_assistant_record_keeping_the_original(
        self, make_store: MakeStore, ws: str
    ) -> None:
        h = make_store().history(ws)
        h.append(msg("hi"))
        r = h.append(msg("too big", meta={"skill": "x"}, future_field={"keep": [1, "é"]}))
        h.append(msg("reply", "assistant"))
        seq = r.seqs[0]
        original = h.get(seq)
        assert original is not None
        epoch = h.epoch
        h.reject(seq)
        husk = h.get(seq)
        assert husk is not None
        d = husk.to_dict()
        assert list(d) == ["seq", "id", "kind", "role", "parts", "partial", "meta", "ts", "batch"]
        assert (d["seq"], d["id"], d["kind"], d["ts"], d["batch"]) == (
            seq, original.id, "message", original.to_dict()["ts"], original.batch)
        assert d["role"] == "assistant" and d["parts"] == [] and d["partial"] is False
        assert d["meta"] == {"quarantine": {"v": 1, "row": original.to_dict()}}
        assert [x.seq for x in h.provider_view()] == [1, 3]
        assert h.epoch != epoch
        tool = h.session_history()
        assert call(tool, {"action": "search", "query": "too big"})["items"] == []
        assert code(call(tool, {"action": "read", "seq": seq})) == "not_found"
        h.reject(seq)  # again: nothing more to do
        assert h.get(seq).to_dict() == d  # type: ignore[union-attr]
        assert h.append(msg("next")).seqs == [4]

    def test_reject_takes_the_synthetic_prelude_rows_it_owns(
        self, make_store: MakeStore, ws: str
    ) -> None:
        h = make_store().history(ws)
        h.append(msg("earlier", meta={"synthetic": True}))  # another batch: not owned
        r = h.append_many([msg("file snapshot", meta={"synthetic": True}),
                           msg("skill text", meta={"owner": "req-1"}),
                           msg("the request", id="req-1")])
        h.reject(r.seqs[2])
        rows = [x.to_dict() for x in h.rows()]
        assert rows[0]["parts"] == [{"type": "text", "text": "earlier"}]
        assert all(x["parts"] == [] and "quarantine" in x["meta"] for x in rows[1:])
        assert [x["seq"] for x in view(h)] == [1]

    def test_reject_refuses_resets_and_missing_seqs(self, make_store: MakeStore, ws: str) -> None:
        h = make_store().history(ws)
        h.append(msg("a"))
        c = h.clear_soft()
        before, epoch = lines(h), h.epoch
        with pytest.raises(RewriteRefused, match="reset"):
            h.reject(c.seqs[0])
        with pytest.raises(RewriteRefused, match="no readable row"):
            h.reject([1, 99])
        assert lines(h) == before and h.epoch == epoch

    # --- truncate ----------------------------------------------------------------------

    def test_truncate_after_drops_the_tail_and_seqs_go_on(
        self, make_store: MakeStore, ws: str
    ) -> None:
        h = make_store(segment_bytes=300).history(ws)
        for i in range(5):
            h.append_many([msg(f"tok {i}"), msg(f"tok answer {i}", "assistant")])
        high = h.snapshot().next_seq
        tool = h.session_history()
        h.truncate_after(4)
        assert [r.seq for r in h.rows()] == [1, 2, 3, 4]
        assert found(tool, "tok") == [1, 2, 3, 4]
        assert h.get(5) is None
        # Seqs are identities: the truncated rows keep theirs in quarantine, so
        # the next row goes on from the old high-water mark, never reusing one.
        new = h.append(msg("new")).seqs[0]
        assert new == high
        epoch = h.epoch
        h.truncate_after(new)  # nothing after the last row: nothing to do
        assert [r.seq for r in h.rows()] == [1, 2, 3, 4, new] and h.epoch == epoch

    def test_truncate_never_splits_a_batch(self, make_store: MakeStore, ws: str) -> None:
        h = make_store().history(ws)
        r = h.append_many([msg("a"), msg("b"), msg("c")])
        before, epoch = lines(h), h.epoch
        with pytest.raises(RewriteRefused, match="never split"):
            h.truncate_after(r.seqs[1])
        with pytest.raises(RewriteRefused):
            h.truncate_after(42)
        assert lines(h) == before and h.epoch == epoch
        h.truncate_after(r.seqs[2])
        assert lines(h) == before

    def test_truncate_never_removes_the_privacy_floor(
        self, make_store: MakeStore, ws: str
    ) -> None:
        h = make_store().history(ws)
        h.append(msg("SECRET before clear"))
        h.clear_soft()
        h.append(msg("after"))
        tool = h.session_history()
        with pytest.raises(LedgerError, match="privacy floor"):
            h.truncate_after(1)
        assert found(tool, "secret") == []
        h.truncate_after(2)  # after the floor: allowed
        assert [r.seq for r in h.rows()] == [1, 2]
        assert found(tool, "secret") == [] and h.snapshot().floor.seq == 2  # type: ignore[union-attr]

    # --- purge ---------------------------------------------------------------------------

    def test_purge_deletes_at_or_before_the_floor(self, make_store: MakeStore, ws: str) -> None:
        h = make_store(segment_bytes=600).history(ws)
        for i in range(4):
            h.append_many([msg(f"old {i}"), msg(f"old answer {i}", "assistant")])
        c = h.clear_soft()
        h.append(msg("new 1"))
        h.rollover([msg("trigger")])
        after = [x.to_dict() for x in h.rows() if x.seq > c.seqs[0]]
        high, window, v = h.snapshot().next_seq, h.window, view(h)
        h.purge_before_floor()
        assert [x.to_dict() for x in h.rows()] == after
        assert all(h.get(s) is None for s in range(1, c.seqs[0] + 1))
        assert (h.window, view(h)) == (window, v)
        assert h.append(msg("x")).seqs == [high]
        epoch = h.epoch
        h.purge_before_floor()  # nothing left before the floor
        assert next(x.seq for x in h.rows()) == c.seqs[0] + 1 and h.epoch == epoch

    def test_verify_and_repair_are_engine_operations(self, make_store: MakeStore, ws: str) -> None:
        """check and repair go through the engine (WorkspaceEngine.verify and
        .repair): a history that went through every rewrite checks clean, and
        repair leaves it as it is (no new epoch), dry run or not."""
        from recovery.check import check
        from recovery.repair import repair

        h = make_store().history(ws)
        with pytest.raises(LedgerError):
            check(h)  # nothing written yet: WorkspaceNotFound
        for i in range(3):
            h.append_many([msg(f"q{i}"), msg(f"a{i}", "assistant")])
        h.clear_soft()  # a manual reset: the floor purge cuts at
        h.append_many([msg("after"), msg("reply", "assistant")])
        h.append(msg("dropped"))
        h.truncate_after(h.next_seq - 2)
        h.purge_before_floor()
        h.append(msg("last"))
        report = check(h)
        assert report.ok and report.damage == 0, report.text()
        assert report.rows == len(list(h.rows()))
        assert report.to_dict()["findings"] == [f.to_dict() for f in report.findings]
        epoch, lines_before = h.epoch, [r.line for r in h.rows()]
        dry = repair(h, dry_run=True)
        assert (dry.changed, dry.exit_code(), dry.after) == (False, 0, None)
        done = repair(h)
        assert not done.changed and done.consistent and done.exit_code() == 0
        assert done.after is not None and done.after.ok
        assert (h.epoch, [r.line for r in h.rows()]) == (epoch, lines_before)
        assert done.to_dict()["check"] == done.after.to_dict()
        with pytest.raises(LedgerError, match="unknown repair policy"):
            repair(h, policy="bogus")
        assert h.engine.clean_quarantine(3600).to_dict() == {"removed": 0, "bytes": 0}
        assert h.engine.clean_quarantine(-1).removed >= 1  # the truncated row
