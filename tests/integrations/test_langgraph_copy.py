"""``LedgerSaver.copy_thread`` is a fork (extra ``langgraph``): the copy shares
the source's rows (hard-linked segments on files), a graph continues on it
with the whole state, the source never moves, the copy is its own thread
for ``list`` and the ownership check, and copying into a thread that exists
still appends copies."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.base", reason="the langgraph extra is not installed "
                    "(pip install 'transcript-ledger[langgraph]')")

from langchain_core.messages import HumanMessage

from ledger import LedgerError, Store
from ledger.integrations.langgraph import LedgerSaver, thread_workspace
from tests.integrations.test_langgraph import _chat_graph


def _cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def _texts(app: Any, thread: str) -> list[str]:
    return [m.content for m in app.get_state(_cfg(thread)).values["messages"]]


@pytest.mark.parametrize("engine", ["files", "memory"])
def test_a_copied_thread_is_a_fork_the_graph_continues(engine: str, tmp_path: Path) -> None:
    root = tmp_path / "s" if engine == "files" else f"memory://lg-{uuid.uuid4().hex}"
    store = Store(root, durability="off", segment_bytes=4096)
    saver = LedgerSaver(store=store)
    app = _chat_graph(saver)
    src, dst = "main/thread", "copy of main"  # the source's name is hashed
    for i in range(40):
        app.invoke({"messages": [HumanMessage(f"question {i}")]}, _cfg(src))
    before = _texts(app, src)
    src_rows = [r.to_dict() for r in store.history(thread_workspace(src)).rows()]
    saver.copy_thread(src, dst)
    [branch] = store.branches(thread_workspace(src))
    assert branch.workspace == thread_workspace(dst)
    assert _texts(app, dst) == before
    assert len(list(saver.list(_cfg(dst)))) == len(list(saver.list(_cfg(src))))
    app.invoke({"messages": [HumanMessage("only on the copy")]}, _cfg(dst))
    assert _texts(app, dst)[:-2] == before and _texts(app, dst)[-2] == "only on the copy"
    assert _texts(app, src) == before  # the source never moved, byte for byte
    assert [r.to_dict() for r in store.history(thread_workspace(src)).rows()] == src_rows
    # each thread is listed under its own id; the copy is owned by its own id
    owners = {tup.config["configurable"]["thread_id"] for tup in saver.list(None)}
    assert owners == {src, dst}
    fresh = _chat_graph(LedgerSaver(store=Store(root, durability="off")))
    assert _texts(fresh, dst)[-2] == "only on the copy"
    with pytest.raises(LedgerError, match="same thread"):
        saver.copy_thread(dst, dst)
    if engine == "files":  # sealed segments are shared, not copied
        src_dir, dst_dir = tmp_path / "s" / thread_workspace(src), tmp_path / "s" / branch.workspace
        shared = {(st.st_ino) for p in src_dir.rglob("*") if p.is_file()
                  for st in [os.stat(p)]} & {os.stat(p).st_ino for p in dst_dir.rglob("*")
                                             if p.is_file()}
        assert len(shared) >= 3


def test_copying_into_a_thread_that_exists_appends_copies(tmp_path: Path) -> None:
    store = Store(tmp_path, durability="off")
    saver = LedgerSaver(store=store)
    app = _chat_graph(saver)
    app.invoke({"messages": [HumanMessage("source")]}, _cfg("a"))
    app.invoke({"messages": [HumanMessage("target")]}, _cfg("b"))
    saver.copy_thread("a", "b")
    assert store.branches("a") == []  # not a fork: b had its own history
    ids = {tup.checkpoint["id"] for tup in saver.list(_cfg("b"))}
    assert {tup.checkpoint["id"] for tup in saver.list(_cfg("a"))} <= ids
