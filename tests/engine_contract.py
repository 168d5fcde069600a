"""The engine contract: behaviour every storage engine must show through the
public surface (DESIGN.md 12), written once.

``EngineContract`` holds the cases; a test module subclasses it and provides
the ``make_store`` fixture (a factory: ``make_store(**options) -> Store`` on a
fresh, empty root of its engine). ``tests/test_contract_files.py`` runs it
against the file engine; an engine added later runs the same class unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from ledger import (
    Conflict,
    CursorExpired,
    InvalidRow,
    LedgerError,
    Store,
    WindowChanged,
    WorkspaceNotFound,
)
from ledger.core.bounds import RESULT_BYTES

MakeStore = Callable[..., Store]


def msg(text: str, role: str = "user") -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "text": text}]}


def seqs_of(store: Store, ws: str) -> list[int]:
    return [r.seq for r in store.history(ws).rows()]


class EngineContract:
    """Subclass and provide ``make_store`` (module doc)."""

    # --- atomic batches and gap-free seqs -----------------------------------------

    def test_a_batch_gets_consecutive_seqs_from_one(self, make_store: MakeStore) -> None:
        h = make_store().history("ws")
        assert h.append_many([msg("a"), msg("b", "assistant")]).seqs == [1, 2]
        assert h.append(msg("c")).seqs == [3]
        assert [r.to_dict()["parts"][0]["text"] for r in h.rows()] == ["a", "b", "c"]
        assert [r.seq for r in h.rows(after_seq=1)] == [2, 3]
        got = h.get(2)
        assert got is not None and got.to_dict()["role"] == "assistant"
        assert h.get(99) is None

    def test_a_bad_row_refuses_the_whole_batch(self, make_store: MakeStore) -> None:
        store = make_store()
        h = store.history("ws")
        h.append(msg("kept"))
        before = [r.to_dict() for r in h.rows()]
        epoch = h.epoch
        with pytest.raises(InvalidRow) as info:
            h.append_many([msg("fine"), {"role": "user", "parts": "not a list"}])
        assert "1" in str(info.value)  # names the row
        assert [r.to_dict() for r in h.rows()] == before
        assert h.epoch == epoch
        assert h.append(msg("next")).seqs == [2]  # no seq was consumed

    def test_nothing_exists_until_the_first_write(self, make_store: MakeStore) -> None:
        store = make_store()
        h = store.history("ws")
        assert store.workspaces() == []
        with pytest.raises(WorkspaceNotFound):
            list(h.rows())
        h.append(msg("x"))
        assert store.workspaces() == ["ws"]

    # --- conditional and idempotent appends ---------------------------------------

    def test_expect_next_seq_and_window(self, make_store: MakeStore) -> None:
        h = make_store().history("ws")
        with pytest.raises(Conflict):
            h.append(msg("x"), expect_next_seq=5)
        assert not h.exists()  # a refused conditional creates nothing
        h.append(msg("x"), expect_next_seq=1)
        with pytest.raises(Conflict):
            h.append(msg("y"), expect_next_seq=1)
        h.clear_soft()
        with pytest.raises(WindowChanged):
            h.append(msg("z"), expect_window=0)
        r = h.append(msg("z"), expect_window=h.window)
        assert r.seqs == [3]

    def test_a_retry_with_the_same_batch_id_writes_nothing(self, make_store: MakeStore) -> None:
        h = make_store().history("ws")
        first = h.append_many([msg("a"), msg("b")], batch_id="turn-1")
        again = h.append_many([msg("a"), msg("b")], batch_id="turn-1")
        assert again.seqs == first.seqs == [1, 2]
        assert [r.seq for r in h.rows()] == [1, 2]

    # --- epochs: every rewrite, and only rewrites ---------------------------------

    def test_appends_keep_the_epoch(self, make_store: MakeStore) -> None:
        h = make_store().history("ws")
        epoch = h.append(msg("a")).epoch
        for i in range(5):
            assert h.append(msg(f"m{i}")).epoch == epoch
        assert h.clear_soft().epoch == epoch
        assert h.rollover([msg("go on")]).epoch == epoch
        assert h.epoch == epoch

    @pytest.mark.parametrize("rewrite", ["truncate_after", "reject", "purge_before_floor",
                                         "rebaseline"])
    def test_every_rewrite_bumps_the_epoch_and_expires_cursors(
        self, make_store: MakeStore, rewrite: str
    ) -> None:
        h = make_store().history("ws")
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
            h.rebaseline()
        assert h.epoch != epoch
        with pytest.raises(CursorExpired):
            tool.search("needle", cursor=page["cursor"], limit=2)

    def test_a_plain_append_never_expires_a_cursor(self, make_store: MakeStore) -> None:
        h = make_store().history("ws")
        for i in range(30):
            h.append(msg(f"needle {i}"))
        tool = h.session_history()
        page = tool.search("needle", limit=5)
        h.append(msg("needle late"))
        seen = [item["seq"] for item in page["items"]]
        cursor = page["cursor"]
        while cursor is not None:
            page = tool.search("needle", cursor=cursor, limit=5)
            seen += [item["seq"] for item in page["items"]]
            cursor = page["cursor"]
        assert seen == list(range(1, 31))  # the query's rows are fixed by its first page

    # --- floors ----------------------------------------------------------------------

    def test_no_row_at_or_below_the_floor_is_ever_returned(self, make_store: MakeStore) -> None:
        h = make_store().history("ws")
        h.append_many([msg("secret before reset"), msg("secret reply", "assistant")])
        h.clear_soft()
        h.append(msg("after the reset"))
        h.rollover([msg("next window")])
        tool = h.session_history()
        text = json.dumps([tool.call({"action": "search", "query": "secret"}),
                           tool.call({"action": "list"}),
                           tool.call({"action": "read", "seq": 1})])
        assert "secret before reset" not in text and "secret reply" not in text
        assert json.loads(tool.call({"action": "read", "seq": 1}))["error"]["code"] == "not_found"
        assert "after the reset" in tool.call({"action": "search", "query": "after"})
        assert [r.to_dict()["kind"] for r in h.provider_view()] == ["lead_in", "message"]

    def test_floors_hold_through_rewrites(self, make_store: MakeStore) -> None:
        h = make_store().history("ws")
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

    # --- bounded pages -------------------------------------------------------------

    def test_pages_stay_within_the_result_bound_and_cover_everything(
        self, make_store: MakeStore
    ) -> None:
        h = make_store().history("ws")
        big = "y" * 3000
        for i in range(60):
            h.append(msg(f"needle {i} {big}"))
        tool = h.session_history()
        seen: list[int] = []
        cursor = None
        pages = 0
        while True:
            args = {"action": "search", "query": "needle", "limit": 25}
            if cursor is not None:
                args["cursor"] = cursor
            text = tool.call(args)
            assert len(text.encode("utf-8")) <= RESULT_BYTES
            page = json.loads(text)
            seen += [item["seq"] for item in page["items"]]
            pages += 1
            cursor = page["cursor"]
            if cursor is None:
                break
        assert seen == list(range(1, 61)) and pages > 1

    # --- ranked search: every engine ranks as the file engine does -----------------

    def test_ranked_search_agrees_with_the_file_engine(self, make_store: MakeStore,
                                                       tmp_path: Any) -> None:
        words = ("deploy rollback cache ingress timeout invoice migration schema replica "
                 "approval release flaky region password degree graduate commute heron "
                 "parseHTTPRequest max_retries Café").split()

        def fill(h: Any) -> tuple[Any, int]:
            for i in range(48):
                text = " ".join(words[(i * k) % len(words)] for k in range(1, 3 + i % 9))
                if i % 16 == 15:
                    h.rollover([msg(f"window {i}: {text}")])
                elif i % 13 == 4:
                    args = {"action": "search", "query": text, "mode": "ranked"}
                    h.append_many([
                        {"role": "assistant", "parts": [{"type": "tool_call", "id": f"h{i}",
                                                         "name": "session_history",
                                                         "input": args}]},
                        {"role": "tool", "parts": [{"type": "tool_result", "id": f"h{i}",
                                                    "output": f"echo {text}"}]}])
                else:
                    h.append(msg(text, "user" if i % 2 else "assistant"))
                if i == 30:
                    h.reject(20)
                    h.clear_soft()
            return h.session_history(), h.snapshot().floor.seq

        ours, floor = fill(make_store().history("ws"))
        files, _ = fill(Store(str(tmp_path / "files-root")).history("ws"))
        found = 0
        for query in ("deploy rollback", "graduate degree commute", "parse HTTP request",
                      "cafe heron", '"rollback cache" release', "echo approval"):
            args = {"action": "search", "query": query, "mode": "ranked", "limit": 25}
            mine, theirs = json.loads(ours.call(args)), json.loads(files.call(args))
            assert "error" not in mine, mine
            assert mine["items"] == theirs["items"], query  # seqs, snippets, scores
            assert all(item["seq"] > floor for item in mine["items"])
            found += len(mine["items"])
        assert found > 20

    # --- delete ------------------------------------------------------------------------

    def test_delete_removes_the_workspace(self, make_store: MakeStore) -> None:
        store = make_store()
        store.history("a").append(msg("x"))
        store.history("b").append(msg("y"))
        assert store.delete("a") is True
        assert store.workspaces() == ["b"]
        assert store.delete("a") is False
        assert store.history("a").append(msg("again")).seqs == [1]

    def test_a_bad_option_is_refused(self, make_store: MakeStore) -> None:
        with pytest.raises(LedgerError) as info:
            make_store(durability="sometimes")
        assert "durability" in str(info.value)
