"""The LangGraph checkpointer (extra ``langgraph``): LangGraph's own conformance
suite unmodified, a real StateGraph with an interrupt and a resume, time
travel, the messages channel as transcript rows (``session_history``,
``tledger show``), storage linear in the thread's length, and concurrent
writers that conflict instead of forking the thread."""

from __future__ import annotations

import asyncio
import operator
import os
import subprocess
import time
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

# The test extra brings langgraph-checkpoint (through the conformance suite),
# not langgraph itself: the graph tests need the langgraph extra.
pytest.importorskip("langgraph.checkpoint.base", reason="the langgraph extra is not installed "
                    "(pip install 'transcript-ledger[langgraph]')")
pytest.importorskip("langgraph.graph", reason="the langgraph extra is not installed "
                    "(pip install 'transcript-ledger[langgraph]')")
pytest.importorskip(
    "langgraph.checkpoint.conformance",
    reason="langgraph-checkpoint-conformance is not installed (test extra)")

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint import conformance
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from langgraph.checkpoint.conformance.spec import (
    test_copy_thread,
    test_delete_for_runs,
    test_delete_thread,
    test_get_tuple,
    test_list,
    test_prune,
    test_put,
    test_put_writes,
)
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import Command, interrupt

from ledger import Store
from ledger.integrations.langgraph import (
    CheckpointConflict,
    LedgerSaver,
    thread_workspace,
)
from tests.helpers import PYTHON, subprocess_env

SPEC_SIZES = {
    "put": len(test_put.ALL_PUT_TESTS),
    "put_writes": len(test_put_writes.ALL_PUT_WRITES_TESTS),
    "get_tuple": len(test_get_tuple.ALL_GET_TUPLE_TESTS),
    "list": len(test_list.ALL_LIST_TESTS),
    "delete_thread": len(test_delete_thread.ALL_DELETE_THREAD_TESTS),
    "delete_for_runs": len(test_delete_for_runs.ALL_DELETE_FOR_RUNS_TESTS),
    "copy_thread": len(test_copy_thread.ALL_COPY_THREAD_TESTS),
    "prune": len(test_prune.ALL_PRUNE_TESTS),
}


def _saver(root: Path) -> LedgerSaver:
    return LedgerSaver(store=Store(root, durability="off"))


def test_the_conformance_suite_passes_every_test_it_ships(tmp_path: Path) -> None:
    made: list[Path] = []

    @conformance.checkpointer_test(name="LedgerSaver")
    async def factory() -> AsyncGenerator[LedgerSaver, None]:
        root = tmp_path / f"store-{len(made)}"
        made.append(root)
        yield _saver(root)

    report = asyncio.run(conformance.validate(factory))
    assert {c.value for c in ALL_CAPABILITIES} == set(SPEC_SIZES)
    for cap, size in SPEC_SIZES.items():
        result = report.results[cap]
        assert result.detected, f"{cap}: not detected"
        assert result.failures == [], f"{cap}: {result.failures}"
        assert (result.tests_passed, result.tests_failed, result.tests_skipped) == (size, 0, 0)
    assert report.passed_all()
    assert sum(SPEC_SIZES.values()) >= 81


# --- a real graph -------------------------------------------------------------------


def _approval_graph(saver: LedgerSaver) -> Any:
    """reply -> ask (interrupts for a human decision) -> done."""

    def reply(state: MessagesState) -> dict[str, Any]:
        last = state["messages"][-1].content
        return {"messages": [AIMessage(f"draft answer to: {last}")]}

    def ask(state: MessagesState) -> dict[str, Any]:
        decision = interrupt({"question": "send the draft?"})
        return {"messages": [AIMessage(f"human said {decision}; sent")]}

    g = StateGraph(MessagesState)
    g.add_node("reply", reply)
    g.add_node("ask", ask)
    g.add_edge(START, "reply")
    g.add_edge("reply", "ask")
    return g.compile(checkpointer=saver)


def _chat_graph(saver: LedgerSaver) -> Any:
    def bot(state: MessagesState) -> dict[str, Any]:
        n = sum(isinstance(m, HumanMessage) for m in state["messages"])
        return {"messages": [AIMessage(f"reply {n} to {state['messages'][-1].content}")]}

    g = StateGraph(MessagesState)
    g.add_node("bot", bot)
    g.add_edge(START, "bot")
    return g.compile(checkpointer=saver)


def _message_rows(store: Store, thread: str) -> list[dict[str, Any]]:
    h = store.history(thread_workspace(thread))
    return [r.to_dict() for r in h.rows() if "langchain" in r.meta]


def test_a_state_graph_interrupts_and_resumes_across_saver_instances(tmp_path: Path) -> None:
    cfg = {"configurable": {"thread_id": "approval-1"}}
    app = _approval_graph(_saver(tmp_path))
    out = app.invoke({"messages": [HumanMessage("refund order 17")]}, cfg)
    assert out["__interrupt__"][0].value == {"question": "send the draft?"}
    assert app.get_state(cfg).next == ("ask",)

    # Another saver over the same root (another process's view) resumes it.
    again = _approval_graph(_saver(tmp_path))
    assert again.get_state(cfg).next == ("ask",)
    done = again.invoke(Command(resume="yes"), cfg)
    assert [m.content for m in done["messages"]] == [
        "refund order 17", "draft answer to: refund order 17", "human said yes; sent"]
    assert again.get_state(cfg).next == ()
    # Each message is one transcript row, stored once.
    rows = _message_rows(Store(tmp_path), "approval-1")
    assert [r["parts"][0]["text"] for r in rows] == [m.content for m in done["messages"]]
    assert [r["role"] for r in rows] == ["user", "assistant", "assistant"]


def test_time_travel_forks_from_an_earlier_checkpoint(tmp_path: Path) -> None:
    app = _chat_graph(_saver(tmp_path))
    cfg = {"configurable": {"thread_id": "tt"}}
    for text in ("one", "two", "three"):
        app.invoke({"messages": [HumanMessage(text)]}, cfg)
    history = list(app.get_state_history(cfg))
    after_one = next(s for s in history if len(s.values.get("messages", [])) == 2
                     and s.next == ())
    old_head = history[0]
    forked = app.invoke({"messages": [HumanMessage("other")]}, after_one.config)
    assert [m.content for m in forked["messages"]] == [
        "one", "reply 1 to one", "other", "reply 2 to other"]
    # The fork is the newest state; the original branch is still there, unchanged.
    assert [m.content for m in app.get_state(cfg).values["messages"]][-1] == "reply 2 to other"
    kept = app.get_state(old_head.config).values["messages"]
    assert [m.content for m in kept][-2:] == ["three", "reply 3 to three"]
    # Messages the branches share are stored once.
    texts = [r["parts"][0]["text"] for r in _message_rows(Store(tmp_path), "tt")]
    assert len(texts) == len(set(texts)) == 8


def test_the_thread_is_a_transcript_for_session_history_and_show(tmp_path: Path) -> None:
    app = _chat_graph(_saver(tmp_path))
    cfg = {"configurable": {"thread_id": "chat-7"}}
    for text in ("the vault code is 4417", "what is the weather", "thanks"):
        app.invoke({"messages": [HumanMessage(text)]}, cfg)
    h = Store(tmp_path).history("chat-7")
    view = [r.parts[0]["text"] for r in h.provider_view()]
    assert view == ["the vault code is 4417", "reply 1 to the vault code is 4417",
                    "what is the weather", "reply 2 to what is the weather",
                    "thanks", "reply 3 to thanks"]
    found = h.session_history().search(query="vault code")
    assert [i["text"] for i in found["items"]] == [
        "the vault code is 4417", "reply 1 to the vault code is 4417"]
    shown = subprocess.run(
        [PYTHON, "-m", "ledger", "--root", str(tmp_path), "show", "chat-7", "--color", "never",
         "--no-pager"], capture_output=True, text=True, env=subprocess_env(), timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert "the vault code is 4417" in shown.stdout and "reply 3 to thanks" in shown.stdout
    assert "empty record" not in shown.stdout  # checkpoint records are bookkeeping


def _workspace_bytes(root: Path, thread: str) -> int:
    ws = root / thread_workspace(thread)
    return sum(p.stat().st_size for p in ws.glob("seg-*.jsonl"))


def test_storage_grows_linearly_with_the_thread(tmp_path: Path) -> None:
    app = _chat_graph(_saver(tmp_path))
    cfg = {"configurable": {"thread_id": "long"}}
    sizes = []
    for turn in range(60):
        app.invoke({"messages": [HumanMessage(f"message number {turn} " + "x" * 200)]}, cfg)
        if turn % 20 == 19:
            sizes.append(_workspace_bytes(tmp_path, "long"))
    first, second, third = sizes[0], sizes[1] - sizes[0], sizes[2] - sizes[1]
    # A copy of the whole list per checkpoint would make each 20 turns cost more
    # than the last (about 2x, then 1.7x); deltas cost the same.
    assert third <= first * 1.15 and second <= first * 1.15, sizes
    assert len(_message_rows(Store(tmp_path), "long")) == 120
    # Reading it back from a cold saver gives the whole conversation.
    state = _chat_graph(_saver(tmp_path)).get_state(cfg)
    assert len(state.values["messages"]) == 120
    assert state.values["messages"][-1].content.startswith("reply 60 to message number 59")


# --- concurrent writers ---------------------------------------------------------------


def test_two_writers_from_one_head_conflict_instead_of_forking(tmp_path: Path) -> None:
    app = _chat_graph(_saver(tmp_path))
    cfg = {"configurable": {"thread_id": "race"}}
    app.invoke({"messages": [HumanMessage("hi")]}, cfg)
    a, b = _saver(tmp_path), _saver(tmp_path)
    head_a, head_b = a.get_tuple(cfg), b.get_tuple(cfg)
    assert head_a is not None and head_b is not None
    assert head_a.checkpoint["id"] == head_b.checkpoint["id"]

    def put_from(saver: LedgerSaver, tup: Any, text: str) -> dict[str, Any]:
        from langgraph.checkpoint.base import create_checkpoint

        cp = create_checkpoint(tup.checkpoint, None, 5)
        msgs = [*tup.checkpoint["channel_values"]["messages"], AIMessage(text, id=text)]
        version = int(tup.checkpoint["channel_versions"]["messages"]) + 1
        cp["channel_values"] = {"messages": msgs}
        cp["channel_versions"] = {**tup.checkpoint["channel_versions"], "messages": version}
        return saver.put(tup.config, cp, {"source": "loop", "step": 5}, {"messages": version})

    won = put_from(a, head_a, "from-a")
    with pytest.raises(CheckpointConflict, match="no longer the newest"):
        put_from(b, head_b, "from-b")
    latest = _saver(tmp_path).get_tuple(cfg)
    assert latest is not None and latest.checkpoint["id"] == won["configurable"]["checkpoint_id"]
    assert [m.content for m in latest.checkpoint["channel_values"]["messages"]][-1] == "from-a"
    assert "from-b" not in [r["parts"][0]["text"] for r in _message_rows(Store(tmp_path), "race")]
    # B loads the thread again and continues from A's checkpoint.
    put_from(b, b.get_tuple(cfg), "from-b")
    final = a.get_tuple(cfg)
    assert final is not None
    assert [m.content for m in final.checkpoint["channel_values"]["messages"]][-2:] == [
        "from-a", "from-b"]


def test_two_graphs_starting_one_new_thread_conflict(tmp_path: Path) -> None:
    a, b = _chat_graph(_saver(tmp_path)), _chat_graph(_saver(tmp_path))
    cfg = {"configurable": {"thread_id": "fresh"}}
    # Both looked before either wrote: B's saver saw an empty thread.
    assert b.get_state(cfg).values == {}
    a.invoke({"messages": [HumanMessage("first")]}, cfg)
    from langgraph.checkpoint.base import empty_checkpoint

    cp = empty_checkpoint()
    with pytest.raises(CheckpointConflict, match="started this thread first"):
        b.checkpointer.put({"configurable": {"thread_id": "fresh", "checkpoint_ns": ""}}, cp,
                           {"source": "input", "step": -1}, {})


def test_a_new_thread_on_the_memory_engine() -> None:
    # A never-written workspace reads as empty on every engine (History.snapshot):
    # the saver's first look at a thread on memory:// used to raise WorkspaceNotFound.
    store = Store("memory://")
    app = _chat_graph(LedgerSaver(store=store))
    cfg = {"configurable": {"thread_id": "fresh"}}
    assert app.get_state(cfg).values == {} and "fresh" not in store.workspaces()
    app.invoke({"messages": [HumanMessage("hi")]}, cfg)
    assert app.get_state(cfg).values["messages"][-1].content == "reply 1 to hi"


class FanState(TypedDict):
    log: Annotated[list[str], operator.add]


def test_parallel_tasks_write_concurrently_without_losing_a_write(tmp_path: Path) -> None:
    g = StateGraph(FanState)
    names = [f"n{i}" for i in range(6)]
    for name in names:
        g.add_node(name, lambda s, name=name: {"log": [name]})
        g.add_edge(START, name)
    app = g.compile(checkpointer=_saver(tmp_path))
    cfg = {"configurable": {"thread_id": "fan"}}
    for _ in range(3):
        out = app.invoke({"log": []}, cfg)
    assert sorted(out["log"]) == sorted(names * 3)
    again = g.compile(checkpointer=_saver(tmp_path)).get_state(cfg)
    assert sorted(again.values["log"]) == sorted(names * 3)


def test_async_graph_and_thread_ids_that_cannot_name_a_workspace(tmp_path: Path) -> None:
    app = _chat_graph(_saver(tmp_path))
    cfg = {"configurable": {"thread_id": "user/42: ünïcode"}}

    async def run() -> Any:
        await app.ainvoke({"messages": [HumanMessage("async hello")]}, cfg)
        return await app.aget_state(cfg)

    state = asyncio.run(run())
    assert state.values["messages"][-1].content == "reply 1 to async hello"
    ws = thread_workspace("user/42: ünïcode")
    assert ws.startswith("lg-") and os.path.isdir(tmp_path / ws)
    listed = list(_saver(tmp_path).list(None))
    assert {t.config["configurable"]["thread_id"] for t in listed} == {"user/42: ünïcode"}


def test_a_config_without_a_thread_is_a_clear_error(tmp_path: Path) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    from ledger import LedgerError

    saver = _saver(tmp_path)
    with pytest.raises(LedgerError, match=r"\['thread_id'\] is required"):
        saver.get_tuple({"configurable": {}})
    with pytest.raises(LedgerError, match=r"\['thread_id'\] is required"):
        saver.put({}, empty_checkpoint(), {}, {})
    with pytest.raises(LedgerError, match=r"\['checkpoint_id'\] is required"):
        saver.put_writes({"configurable": {"thread_id": "t"}}, [("ch", 1)], "task")
    assert Store(tmp_path).workspaces() == []


def test_a_rejected_message_row_is_a_clear_error_not_a_wrong_state(tmp_path: Path) -> None:
    from ledger import LedgerError

    app = _chat_graph(_saver(tmp_path))
    cfg = {"configurable": {"thread_id": "rw"}}
    app.invoke({"messages": [HumanMessage("keep me")]}, cfg)
    h = Store(tmp_path).history("rw")
    first = next(r.seq for r in h.rows() if "langchain" in r.meta)
    h.reject(first)  # a rewrite by another tool: a new epoch
    with pytest.raises(LedgerError, match=f"message row {first}"):
        _chat_graph(_saver(tmp_path)).get_state(cfg)
    with pytest.raises(LedgerError, match=f"message row {first}"):
        app.get_state(cfg)  # the saver that wrote it notices the new epoch too


WRITER = """
import sys
from langchain_core.messages import AIMessage
from langgraph.checkpoint.base import create_checkpoint
from ledger import Store
from ledger.integrations.langgraph import CheckpointConflict, LedgerSaver

import os, time
root, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
saver = LedgerSaver(store=Store(root, durability="off"))
open(os.path.join(root, "..", f"ready-{name}"), "w").close()
while not os.path.exists(os.path.join(root, "..", "go")):  # start together
    time.sleep(0.005)
cfg = {"configurable": {"thread_id": "shared"}}
done = conflicts = 0
while done < n:
    tup = saver.get_tuple(cfg)
    cp = create_checkpoint(tup.checkpoint, None, done)
    version = int(tup.checkpoint["channel_versions"]["messages"]) + 1
    cp["channel_values"] = {"messages": [*tup.checkpoint["channel_values"]["messages"],
                                         AIMessage(f"{name}-{done}", id=f"{name}-{done}")]}
    cp["channel_versions"] = {"messages": version}
    try:
        saver.put(tup.config, cp, {"source": "loop", "step": done}, {"messages": version})
    except CheckpointConflict:
        conflicts += 1
        continue
    done += 1
print(conflicts)
"""


def test_writer_processes_racing_on_one_thread_keep_one_chain(tmp_path: Path) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    store = tmp_path / "store"
    seed = empty_checkpoint()
    seed["channel_values"] = {"messages": [HumanMessage("start", id="start")]}
    seed["channel_versions"] = {"messages": 1}
    _saver(store).put({"configurable": {"thread_id": "shared", "checkpoint_ns": ""}}, seed,
                         {"source": "input", "step": -1}, {"messages": 1})
    procs = [subprocess.Popen([PYTHON, "-c", WRITER, str(tmp_path / "store"), f"w{i}", "8"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=subprocess_env()) for i in range(4)]
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("ready-*"))) < 4 and time.monotonic() < deadline:
        time.sleep(0.02)
    (tmp_path / "go").touch()
    outs = [p.communicate(timeout=240) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    tuples = list(_saver(store).list({"configurable": {"thread_id": "shared"}}))
    assert len(tuples) == 1 + 4 * 8
    parents = [t.parent_config["configurable"]["checkpoint_id"] for t in tuples
               if t.parent_config]
    assert len(parents) == len(set(parents)) == 32  # no checkpoint has two children
    head = tuples[0].checkpoint["channel_values"]["messages"]
    assert len(head) == 33 and len({m.id for m in head}) == 33  # every write is in the chain


def _put_messages(saver: LedgerSaver, config: dict[str, Any], messages: list[Any],
                  step: int) -> dict[str, Any]:
    from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint

    tup = saver.get_tuple(config) if config["configurable"].get("checkpoint_id") else None
    cp = create_checkpoint(tup.checkpoint if tup else empty_checkpoint(), None, step)
    cp["channel_values"] = {"messages": messages}
    cp["channel_versions"] = {"messages": step + 1}
    return saver.put(config, cp, {"source": "loop", "step": step}, {"messages": step + 1})


def test_message_lists_share_storage_but_never_a_caller_change(tmp_path: Path) -> None:
    """The saver keeps consecutive checkpoints' message lists as prefixes of
    one list it owns (a step costs its new messages, not a copy of the
    thread): a caller changing its list after a put, an edited message in
    the middle, and two branches from one checkpoint each keep their own
    messages, in this saver and in a fresh one reading the rows."""
    saver = _saver(tmp_path)
    cfg: dict[str, Any] = {"configurable": {"thread_id": "lists"}}
    msgs: list[Any] = [HumanMessage("m0", id="m0")]
    configs = [_put_messages(saver, cfg, msgs, 0)]
    for k in range(1, 6):
        msgs = [*msgs, AIMessage(f"m{k}", id=f"m{k}")]
        configs.append(_put_messages(saver, configs[-1], msgs, k))
    msgs.append(AIMessage("not put", id="x"))  # the caller changes its own list
    msgs[0] = HumanMessage("changed", id="m0")
    edited = [HumanMessage("m0", id="m0"), AIMessage("m1 edited", id="m1"),
              *[AIMessage(f"m{k}", id=f"m{k}") for k in range(2, 6)],
              AIMessage("m6", id="m6")]
    head = _put_messages(saver, configs[-1], edited, 6)
    at_2 = {"configurable": {k: v for k, v in configs[2]["configurable"].items()
                             if k != "__ledger_head__"}}  # a deliberate fork
    fork_a = _put_messages(saver, at_2, [
        HumanMessage("m0", id="m0"), AIMessage("m1", id="m1"), AIMessage("m2", id="m2"),
        AIMessage("a3", id="a3")], 7)
    fork_b = _put_messages(saver, at_2, [
        HumanMessage("m0", id="m0"), AIMessage("m1", id="m1"), AIMessage("m2", id="m2"),
        AIMessage("b3", id="b3"), AIMessage("b4", id="b4")], 8)
    want = {
        configs[2]["configurable"]["checkpoint_id"]: ["m0", "m1", "m2"],
        configs[5]["configurable"]["checkpoint_id"]: ["m0", "m1", "m2", "m3", "m4", "m5"],
        head["configurable"]["checkpoint_id"]: [
            "m0", "m1 edited", "m2", "m3", "m4", "m5", "m6"],
        fork_a["configurable"]["checkpoint_id"]: ["m0", "m1", "m2", "a3"],
        fork_b["configurable"]["checkpoint_id"]: ["m0", "m1", "m2", "b3", "b4"],
    }
    for reader in (saver, _saver(tmp_path)):
        for cid, texts in want.items():
            tup = reader.get_tuple({"configurable": {"thread_id": "lists",
                                                     "checkpoint_id": cid}})
            got = tup.checkpoint["channel_values"]["messages"]
            assert [m.content for m in got] == texts, (cid, reader is saver)
            got.append(AIMessage("the caller's own", id="own"))  # theirs to change
            again = reader.get_tuple({"configurable": {"thread_id": "lists",
                                                       "checkpoint_id": cid}})
            assert [m.content for m in again.checkpoint["channel_values"]["messages"]] == texts
