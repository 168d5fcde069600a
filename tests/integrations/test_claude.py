"""The Claude Agent SDK session store (extra ``claude``): the SDK's own
conformance run unmodified, real Claude Code transcripts with subagents read
back through the SDK's store helpers exactly as its in-memory reference store
gives them, fork and resume through the SDK's helpers (no CLI, no network),
uuid idempotency, and the session as a transcript for ``session_history``."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("claude_agent_sdk", reason="the claude extra is not installed "
                    "(pip install 'transcript-ledger[claude]')")

from claude_agent_sdk import (
    ClaudeAgentOptions,
    InMemorySessionStore,
    SessionStore,
    fork_session_via_store,
    get_session_messages_from_store,
    get_subagent_messages_from_store,
    list_sessions_from_store,
    list_subagents_from_store,
    project_key_for_directory,
)
from claude_agent_sdk._internal.session_resume import materialize_resume_session
from claude_agent_sdk.testing import run_session_store_conformance

from ledger import Store
from ledger.integrations.claude import LedgerSessionStore, session_workspace

REAL = Path(__file__).resolve().parents[2] / ".." / "shared" / "real-transcripts" / "claude-code"
MAROT = "4d5611e5-241a-462a-8d15-5122611a9569"
OPTIONAL = ("list_sessions", "list_session_summaries", "delete", "list_subkeys")


def _store(root: Path) -> LedgerSessionStore:
    return LedgerSessionStore(store=Store(root, durability="off"))


def test_the_sdk_conformance_run_passes_with_every_optional_method(tmp_path: Path) -> None:
    n = 0

    def make() -> LedgerSessionStore:
        nonlocal n
        n += 1
        return _store(tmp_path / f"s{n}")

    probe = make()
    for method in OPTIONAL:  # the run skips contracts of methods a store leaves out
        assert getattr(type(probe), method) is not getattr(SessionStore, method), method
    asyncio.run(run_session_store_conformance(make))
    assert n >= 14  # one fresh store per contract


def _entry(kind: str, text: str, sid: str, parent: str | None = None) -> dict[str, Any]:
    return {"type": kind, "uuid": str(uuid.uuid4()), "parentUuid": parent, "sessionId": sid,
            "timestamp": "2026-01-02T03:04:05.000Z", "isSidechain": False, "cwd": "/w",
            "message": {"role": kind, "content": [{"type": "text", "text": text}]}}


def _conversation(sid: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, text in enumerate(["the deploy key is in vault/ops", "noted", "rotate it?",
                              "rotated"]):
        out.append(_entry("user" if i % 2 == 0 else "assistant", text, sid,
                          out[-1]["uuid"] if out else None))
    out.append({"type": "custom-title", "customTitle": "key rotation", "sessionId": sid})
    return out


def test_fork_and_resume_through_the_sdk_helpers(tmp_path: Path) -> None:
    directory = str(tmp_path / "project")
    pk = project_key_for_directory(directory)
    sid = str(uuid.uuid4())
    entries = _conversation(sid)
    store = _store(tmp_path / "store")

    async def run() -> None:
        await store.append({"project_key": pk, "session_id": sid}, entries[:2])
        await store.append({"project_key": pk, "session_id": sid}, entries[2:])
        await store.append({"project_key": pk, "session_id": sid}, entries[:2])  # a retry
        assert await store.load({"project_key": pk, "session_id": sid}) == entries
        texts = [m.message["content"][0]["text"]
                 for m in await get_session_messages_from_store(store, sid, directory)]
        assert texts == ["the deploy key is in vault/ops", "noted", "rotate it?", "rotated"]
        [info] = await list_sessions_from_store(store, directory)
        assert (info.session_id, info.custom_title) == (sid, "key rotation")

        fork = await fork_session_via_store(store, sid, directory,
                                            up_to_message_id=entries[1]["uuid"])
        assert fork.session_id != sid
        forked = await get_session_messages_from_store(store, fork.session_id, directory)
        assert [m.message["content"][0]["text"] for m in forked] == [
            "the deploy key is in vault/ops", "noted"]
        assert {m.uuid for m in forked}.isdisjoint(e.get("uuid") for e in entries)
        listed = {s.session_id for s in await list_sessions_from_store(store, directory)}
        assert listed == {sid, fork.session_id}

        resumed = await materialize_resume_session(
            ClaudeAgentOptions(cwd=directory, resume=sid, session_store=store))
        assert resumed is not None and resumed.resume_session_id == sid
        try:
            path = resumed.config_dir / "projects" / pk / f"{sid}.jsonl"
            assert [json.loads(line) for line in path.read_text().splitlines()] == entries
        finally:
            await resumed.cleanup()

    asyncio.run(run())
    # The session is a conversation for the ledger too; the title entry is bookkeeping.
    h = Store(tmp_path / "store").history(session_workspace({"project_key": pk,
                                                              "session_id": sid}))
    assert [r.parts[0]["text"] for r in h.provider_view()] == [
        "the deploy key is in vault/ops", "noted", "rotate it?", "rotated"]
    found = h.session_history().search(query="deploy key")
    assert [i["text"] for i in found["items"]] == ["the deploy key is in vault/ops"]


def _read(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (REAL / name).read_text("utf-8").splitlines()]


@pytest.mark.skipif(not REAL.is_dir(), reason="../shared/real-transcripts is absent")
def test_a_real_session_with_subagents_reads_back_as_the_reference_store_gives_it(
    tmp_path: Path,
) -> None:
    directory = str(tmp_path / "spotter")
    pk = project_key_for_directory(directory)
    main = _read(f"marot-spotter__{MAROT}.jsonl")
    subs = {f"subagents/agent-{a}": _read(f"marot-spotter__4d5611e5__subagents__agent-{a}.jsonl")
            for a in ("a2898e3", "acompact-e1f845")}
    ours, ref = _store(tmp_path / "store"), InMemorySessionStore()
    key = {"project_key": pk, "session_id": MAROT}

    async def fill(store: Any) -> None:
        for i in range(0, len(main), 100):  # the SDK flushes in batches
            await store.append(key, main[i:i + 100])
        for subpath, entries in subs.items():
            await store.append({**key, "subpath": subpath}, entries)

    async def run() -> None:
        await fill(ours)
        await fill(ref)
        # A retried flush: entries with a uuid are not stored twice (entries
        # without one -- snapshots, queue operations -- always are, as the SDK asks).
        await ours.append(key, [e for e in main if "uuid" in e])
        assert await ours.load(key) == main
        for subpath, entries in subs.items():
            assert await ours.load({**key, "subpath": subpath}) == entries
        assert await ours.list_subkeys(key) == sorted(subs)
        mine = await get_session_messages_from_store(ours, MAROT, directory)
        assert len(mine) > 100
        assert mine == await get_session_messages_from_store(ref, MAROT, directory)
        agents = await list_subagents_from_store(ours, MAROT, directory)
        assert sorted(agents) == sorted(await list_subagents_from_store(ref, MAROT, directory))
        for agent in agents:
            assert await get_subagent_messages_from_store(ours, MAROT, agent, directory) == \
                await get_subagent_messages_from_store(ref, MAROT, agent, directory)
        [a] = await list_sessions_from_store(ours, directory)
        [b] = await list_sessions_from_store(ref, directory)
        a.last_modified = b.last_modified  # each store's own write clock
        assert a == b
        await ours.delete(key)
        assert await ours.load(key) is None
        assert await ours.list_subkeys(key) == []

    asyncio.run(run())
    assert Store(tmp_path / "store").workspaces() == []


@pytest.mark.skipif(not REAL.is_dir(), reason="../shared/real-transcripts is absent")
def test_subagents_stay_out_of_the_main_conversation(tmp_path: Path) -> None:
    key = {"project_key": "p", "session_id": MAROT}
    sub = _read("marot-spotter__4d5611e5__subagents__agent-a2898e3.jsonl")
    store = _store(tmp_path)
    asyncio.run(store.append(key, _read(f"marot-spotter__{MAROT}.jsonl")[:50]))
    asyncio.run(store.append({**key, "subpath": "subagents/agent-a2898e3"}, sub))
    s = Store(tmp_path)
    main_ws = session_workspace(key)
    sub_ws = session_workspace({**key, "subpath": "subagents/agent-a2898e3"})
    assert sorted(s.workspaces()) == sorted([main_ws, sub_ws])
    main_raw = (REAL / f"marot-spotter__{MAROT}.jsonl").read_text("utf-8")[:10**7]
    texts = [p["text"] for e in sub if e.get("type") == "assistant"
             for p in e["message"]["content"] if p.get("type") == "text" and len(p["text"]) > 60]
    # Something only the subagent said (its prompt and its final answer also pass
    # through the main session, as the Task call and its result).
    needle = next(t[:40] for t in texts if t[:40].isprintable() and t[:40] not in main_raw
                  and not set(t[:40]) & set('"\\/'))
    assert s.history(sub_ws).session_history().search(query=needle)["items"]
    assert not s.history(main_ws).session_history().search(query=needle)["items"]


APPENDER = """
import asyncio, os, sys, time, uuid
from ledger import Store
from ledger.integrations.claude import LedgerSessionStore

root, name = sys.argv[1], sys.argv[2]
store = LedgerSessionStore(store=Store(root, durability="off"))
key = {"project_key": "p", "session_id": "shared"}
open(os.path.join(root, "..", f"ready-{name}"), "w").close()
while not os.path.exists(os.path.join(root, "..", "go")):
    time.sleep(0.005)

async def main():
    for i in range(15):
        await store.append(key, [{"type": "user", "uuid": f"{name}-{i}", "sessionId": "shared",
                                  "timestamp": f"2026-01-01T00:00:{i:02d}.000Z",
                                  "message": {"role": "user", "content": f"{name} says {i}"}}])

asyncio.run(main())
"""


def test_appending_processes_fold_one_summary_from_every_entry(tmp_path: Path) -> None:
    import subprocess
    import time

    from claude_agent_sdk import fold_session_summary

    from tests.helpers import PYTHON, subprocess_env

    root = tmp_path / "store"
    root.mkdir()
    procs = [subprocess.Popen([PYTHON, "-c", APPENDER, str(root), f"w{i}"],
                              stderr=subprocess.PIPE, text=True, env=subprocess_env())
             for i in range(3)]
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("ready-*"))) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    (tmp_path / "go").touch()
    errs = [p.communicate(timeout=240)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errs
    store = _store(root)
    key = {"project_key": "p", "session_id": "shared"}
    entries = asyncio.run(store.load(key))
    assert entries is not None and len(entries) == 45
    assert len({e["uuid"] for e in entries}) == 45
    [summary] = asyncio.run(store.list_session_summaries("p"))
    # The stored summary is the fold of every stored entry: no append folded
    # from a summary another process had already replaced.
    assert summary["data"] == fold_session_summary(None, key, entries)["data"]
