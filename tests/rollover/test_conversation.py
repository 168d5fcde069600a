"""The runtime object (``ledger.rollover.conversation.Conversation``) on a real
store with real tiktoken counts: a 40-turn agent loop with tool steps under a
small budget, new workspaces, hard preflight and quarantine, the lead-in, and
the guards against the caller's budget."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from ledger import Store
from ledger.core.husks import is_husk, rejected_original
from ledger.rollover.conversation import Conversation, Request, SendRefused, tool_schema
from ledger.rollover.engine import Action
from ledger.rollover.guards import check_request, fits_fresh_window
from recovery.check import check

WS = "agent"
BASH = tool_schema("bash", "Run a shell command and return its output.",
                   {"type": "object", "properties": {"cmd": {"type": "string"}},
                    "required": ["cmd"]})


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"type": "text", "text": text}]}


def says(text: str) -> dict[str, Any]:
    return {"role": "assistant", "parts": [{"type": "text", "text": text}]}


def calls(*ids: str) -> dict[str, Any]:
    return {"role": "assistant", "parts": [
        {"type": "tool_call", "id": i, "name": "bash", "input": {"cmd": f"run {i}"}} for i in ids
    ]}


def result(call_id: str, output: str, *, error: bool = False) -> dict[str, Any]:
    return {"role": "tool",
            "parts": [{"type": "tool_result", "id": call_id, "output": output, "error": error}]}


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i % 97}" for i in range(n))


def conversation(root: Path, limit: int = 3000, **kw: Any) -> Conversation:
    return Conversation.open(Store(root, durability="off"), WS, model="gpt-4o",
                             context_limit=limit, system="You are a careful agent.",
                             tools={"bash": BASH}, **kw)


def assert_paired(messages: Sequence[dict[str, Any]], *, settled: bool = True) -> None:
    """Every result follows its call; with ``settled`` every call has a result."""
    seen: set[str] = set()
    answered: set[str] = set()
    for row in messages:
        for part in row.get("parts", []):
            if part.get("type") == "tool_call":
                seen.add(part["id"])
            elif part.get("type") == "tool_result":
                assert part["id"] in seen, f"result {part['id']} without its call"
                answered.add(part["id"])
    if settled:
        assert seen == answered, f"calls without results: {sorted(seen - answered)}"


def assert_within(req: Request, conv: Conversation) -> None:
    assert req.tokens <= req.ceiling == conv.config.ceiling
    # recount independently with the hard guard against the caller's budget
    verdict = check_request("gpt-4o", rows=req.messages, system=req.system,
                            tools=list(req.tools), context_limit=conv.config.ceiling)
    assert verdict.ok and verdict.tokens == req.tokens, verdict.reason


def chat_pairs_ok(body: dict[str, Any]) -> None:
    """Chat Completions: each assistant tool_calls message is followed by one
    tool message per call."""
    msgs = body["messages"]
    for i, m in enumerate(msgs):
        if m.get("tool_calls"):
            ids = [c["id"] for c in m["tool_calls"]]
            follow = [x["tool_call_id"] for x in msgs[i + 1:i + 1 + len(ids)]
                      if x.get("role") == "tool"]
            assert sorted(follow) == sorted(ids)


def test_forty_turn_loop_with_tool_steps_rolls_over_and_stays_within_the_ceiling(
    tmp_path: Path,
) -> None:
    # 3,125 tokens leave room either way (every rollover lands on a step from
    # 3,050 to at least 3,200 with today's tool schemas): a schema that grows
    # or shrinks a little does not move a rollover onto a user message.
    conv = conversation(tmp_path, 3125)
    requests: list[Request] = []
    for turn in range(40):
        req = conv.send(user(f"turn {turn}: " + words(40, "q")))
        requests.append(req)
        if turn % 3 == 0:
            # one call, model output recorded first, the result is the trigger
            conv.record(calls(f"t{turn}"))
            req = conv.send(result(f"t{turn}", words(90, "out")))
        elif turn % 3 == 1:
            # parallel calls answered out of order, one at a time
            conv.record(calls(f"t{turn}a", f"t{turn}b"))
            conv.record(result(f"t{turn}b", words(50, "b")))
            req = conv.send(result(f"t{turn}a", words(50, "a")))
        else:
            # the assistant row with its call and the result in one send
            req = conv.send([calls(f"t{turn}"), result(f"t{turn}", words(60, "r"))])
        requests.append(req)
        conv.record(says(words(30, "done")))
    rollovers = [r for r in requests if r.rolled_over]
    assert len(rollovers) >= 3
    for req in requests:
        assert_within(req, conv)
        assert_paired(req.messages)
        chat_pairs_ok(req.openai_chat())
        assert req.anthropic()["messages"][0]["role"] == "user"  # also after a carried step
    for req in rollovers:
        # the step that settled is in the new window: call and result together
        kinds = [m.get("kind", "message") for m in req.messages]
        assert kinds[0] == "lead_in" and f"(window {req.window})" in (
            req.messages[0]["parts"][0]["text"])
        assert any(p.get("type") == "tool_result" for m in req.messages for p in m["parts"])
    # what the model got at a rollover is what the store now holds for that window
    last = rollovers[-1]
    stored = [r.to_dict() for r in conv.history.rows(after_seq=last.window)]
    assert [r["parts"] for r in stored[: len(last.messages)]] == [
        m["parts"] for m in last.messages
    ]
    assert check(conv.history).ok


def test_warning_is_appended_once_per_window(tmp_path: Path) -> None:
    conv = conversation(tmp_path)
    warned = []
    for _ in range(30):
        req = conv.send(user(words(60, "w")))
        conv.record(says(words(20, "ok")))
        warned.append((req.window, req.warned))
        if req.warned:
            assert req.decision.action is Action.WARN
            assert req.messages[-1]["kind"] == "warning"
    windows = {w for w, _ in warned}
    per_window = {w: sum(1 for x, y in warned if x == w and y) for w in windows}
    assert len(windows) >= 3 and max(per_window.values()) == 1
    assert sum(per_window.values()) >= 2


def test_new_workspace_first_send_and_oversized_first_message(tmp_path: Path) -> None:
    root = tmp_path / "root"
    conv = conversation(root)
    assert conv.window == 0 and conv.history.provider_view() == []
    assert not root.exists()  # reading created nothing
    with pytest.raises(SendRefused) as info:
        conv.send(user(words(5000, "big")), quarantine=False)
    assert info.value.decision.rule == "B5" and info.value.quarantined == ()
    assert "hard ceiling" in str(info.value) and "nothing was stored" in str(info.value)
    assert not root.exists()  # refused without quarantine: still nothing on disk
    big = {**user(words(5000, "big")), "id": "u-big", "x_extra": {"k": 1}}
    with pytest.raises(SendRefused) as info:
        conv.send(big)
    seqs = info.value.quarantined
    rows = [r.to_dict() for r in conv.history.rows()]
    assert len(seqs) == 1 and [r["seq"] for r in rows] == list(seqs)  # one batch, one row
    assert rows[0]["batch"]["n"] == 1 and is_husk(rows[0])
    assert rejected_original(rows[0]) == big  # the original, unknown fields included
    assert conv.history.provider_view() == []  # never in the provider view
    req = conv.send(user("hello"))
    assert req.decision.action is Action.SEND and [m["role"] for m in req.messages] == ["user"]


def test_lead_in_names_the_window_session_history_lists(tmp_path: Path) -> None:
    conv = conversation(tmp_path, limit=2000)
    req = None
    for turn in range(12):
        req = conv.send(user(f"fact {turn}: the code word is w{turn}x " + words(60, "f")))
        conv.record(says("noted"))
        if req.rolled_over:
            break
    assert req is not None and req.rolled_over
    text = req.messages[0]["parts"][0]["text"]
    listed = conv.session_history().list()
    windows = [w["window"] for w in listed["items"]]
    assert windows[-1] == req.window == conv.window
    assert f"(window {req.window})" in text and "`session_history`" in text
    stored = conv.history.get(req.window + 1)
    assert stored is not None and stored.kind == "lead_in"
    assert stored.parts[0]["text"] == text  # the request holds the stored text
    found = conv.session_history().search("w0x")
    assert found["items"] and found["items"][0]["window"] < req.window


def test_a_user_message_settles_a_waiting_approval_and_its_late_result_is_text(
        tmp_path: Path) -> None:
    """A call waits for approval and the user goes on: the user's message
    settles the call with an error result in the same batch, so the window
    can roll over (no wedge). The approval's result, when it comes after all,
    is stored and reaches the model as text, never as a second result."""
    conv = conversation(tmp_path, limit=2000)
    conv.send(user("deploy please"))
    conv.record(calls("deploy-1"))
    assert [c.id for c in conv.open_calls()] == ["deploy-1"]
    req = conv.send(user("status? " + words(60, "s")))
    assert conv.open_calls() == []
    stored = [r.to_dict() for r in conv.history.rows()][-2:]
    assert stored[0]["role"] == "tool" and stored[0]["parts"][0]["id"] == "deploy-1"
    assert stored[0]["parts"][0]["error"] and "before the user went on" in (
        stored[0]["parts"][0]["output"])
    assert stored[0]["batch"]["id"] == stored[1]["batch"]["id"]  # one batch with the user row
    assert_paired(req.messages)
    rolled = []
    for turn in range(14):
        req = conv.send(user(f"status {turn}? " + words(60, "s")))
        assert_paired(req.messages)
        rolled.append(req.rolled_over)
        conv.record(says("waiting for approval"))
    assert any(rolled)  # nothing blocked the rollover
    req = conv.send(result("deploy-1", "deployed v2 to production"))
    assert_paired(req.messages)
    flat = str(req.anthropic()["messages"])
    assert "deployed v2 to production" in flat and "[result of tool call deploy-1" in flat


def test_a_result_after_a_manual_clear_is_user_text_and_check_notices(tmp_path: Path) -> None:
    conv = conversation(tmp_path)
    conv.send(user("look"))
    conv.record(calls("c-old"))
    conv.clear()
    req = conv.send(result("c-old", "late output"))
    assert req.messages[0]["role"] == "user"
    assert "late output" in req.messages[0]["parts"][0]["text"]
    assert_paired(req.messages)
    assert "late output" in str(req.openai_responses()["input"])
    report = check(conv.history)
    assert report.ok and [f.code for f in report.findings] == ["tool_pair_split"]
    cli = subprocess.run([sys.executable, "-m", "ledger.cli", "--root", str(tmp_path),
                          "check", WS], capture_output=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    assert b"notice" in cli.stdout and b"'c-old'" in cli.stdout


def test_guards_respect_the_callers_budget() -> None:
    rows = [user(words(2000, "g"))]
    own = check_request("gpt-4o", rows=rows)
    assert own.ok and 3000 < own.tokens < 128_000
    budget = check_request("gpt-4o", rows=rows, context_limit=3000)
    assert not budget.ok and budget.limit == 3000 and budget.headroom == 3000 - own.tokens
    assert "3,000 token budget" in budget.reason
    assert not fits_fresh_window("gpt-4o", rows, context_limit=3000).ok
    assert fits_fresh_window("gpt-4o", rows, context_limit=own.tokens).ok


def test_cached_tool_schema_costs_equal_uncached_counts() -> None:
    from ledger.tokens.counting import TokenCounter
    from ledger.tokens.rows import RowTokenCache

    tools = {"bash": BASH, "other": tool_schema("other", "x" * 300, {"type": "object"})}
    cache = RowTokenCache()
    cached = TokenCounter("gpt-4o", cache=cache)
    first, again = cached.raw_tools(tools), cached.raw_tools(tools)
    assert first == again == TokenCounter("gpt-4o", cache=None).raw_tools(tools)
    assert len(cache) == 2
    claude = TokenCounter("claude-sonnet-4", cache=cache).raw_tools(tools)
    assert len(cache) == 4 and claude == TokenCounter("claude-sonnet-4", cache=None).raw_tools(
        tools)  # profiles never share an entry


def test_a_record_is_counted_when_its_bound_is_above_the_ceiling(tmp_path: Path) -> None:
    """``record`` checks its rows against a fresh window (rule B5) with a
    bound found without the tokenizer first; rows whose bound is above the
    hard ceiling but whose count is below it are counted and stored, and
    the request after them holds them within the ceiling."""
    from ledger.rollover.rules import lead_in_for, lead_in_message

    conv = conversation(tmp_path)
    conv.send(user("read the log"))
    conv.record(calls("cat-1"))
    output = "ok " * 1400  # ~4,200 bytes, ~1,400 tokens: bound above 2,850, count below
    rows = [result("cat-1", output)]
    request = conv._request_for([lead_in_message(lead_in_for(conv._next_seq)), *rows], "")
    bound = conv._bound(request)
    assert bound is not None and bound > conv.config.ceiling >= conv._count(request)[0]
    stored = conv.record(rows)
    assert len(stored.seqs) == 1
    req = conv.send(user("and now?"))
    assert any(output.strip() in str(m) for m in req.messages)
    assert_within(req, conv)


def test_a_recorded_result_too_big_for_any_window_is_refused_and_quarantined(
    tmp_path: Path,
) -> None:
    conv = conversation(tmp_path)
    conv.send(user("read the log"))
    conv.record(calls("cat-1"))
    with pytest.raises(SendRefused) as info:
        conv.record(result("cat-1", words(4000, "log")))
    assert info.value.decision.rule == "B5" and len(info.value.quarantined) == 1
    assert "fresh window" in str(info.value)
    # the call is still open; an error result settles it and the loop goes on
    req = conv.send(result("cat-1", "output too large (4,000 lines); use grep", error=True))
    assert_paired(req.messages)
    assert_within(req, conv)
    assert all("log1 " not in str(m) for m in req.messages)  # never in the provider view


def test_history_rollover_never_splits_a_pair(tmp_path: Path) -> None:
    from ledger.transcript.history import OpenToolCalls

    h = Store(tmp_path, durability="off").history("h")
    h.append_many([user("go"), calls("a", "b"), result("a", "A")])
    with pytest.raises(OpenToolCalls) as info:
        h.rollover([user("next")])  # "b" would get its result in the new window
    assert info.value.call_ids == ("b",) and "['b']" in str(info.value)
    with pytest.raises(OpenToolCalls) as info:
        h.rollover([result("b", "B")])  # the result without its call
    assert info.value.call_ids == ("b",)
    assert h.window == 0  # nothing written
    h.append(result("b", "B"))
    r = h.rollover([user("next"), calls("c")])  # a call in the trigger may wait
    h.append(result("c", "C"))
    view = [row.to_dict() for row in h.provider_view()]
    assert_paired(view)
    assert f"(window {r.window})" in view[0]["parts"][0]["text"] and r.window == h.window


def test_context_limit_defaults_to_the_models_input_room_and_never_exceeds_it(
    tmp_path: Path,
) -> None:
    from ledger.rollover.engine import BudgetConfigError
    from ledger.tokens.models import resolve

    spec = resolve("gpt-4o")
    store = Store(tmp_path, durability="off")
    conv = Conversation.open(store, WS, model="gpt-4o")
    assert conv.config.context_limit == spec.context_limit - spec.output_reserve
    with pytest.raises(BudgetConfigError) as info:
        Conversation.open(store, WS, model="gpt-4o", context_limit=spec.context_limit)
    assert "output reserve" in str(info.value)
    with pytest.raises(BudgetConfigError):
        Conversation.open(store, WS, model="gpt-4o", context_limit=0)


def test_the_budget_is_one_config_object(tmp_path: Path) -> None:
    from ledger.rollover.engine import BudgetConfig, BudgetConfigError
    from ledger.tokens.models import resolve

    store = Store(tmp_path, durability="off")
    budget = BudgetConfig(2000, warn_fraction=0.3, rollover_fraction=0.6, hard_ceiling=1500)
    conv = Conversation.open(store, WS, model="gpt-4o", budget=budget, tools={"bash": BASH})
    assert conv.config is budget and conv.pinned.hard_ceiling == 1500
    req = conv.send(user("hello " * 500))  # above 30% of 2000, below 60%: the warning
    assert req.warned and req.ceiling == 1500
    with pytest.raises(BudgetConfigError, match="not both"):
        Conversation.open(store, WS, model="gpt-4o", budget=budget, context_limit=2000)
    spec = resolve("gpt-4o")
    with pytest.raises(BudgetConfigError, match="output reserve"):
        Conversation.open(store, WS, model="gpt-4o", budget=BudgetConfig(spec.context_limit))
    with pytest.raises(TypeError):  # the thresholds are the config's, not keywords
        Conversation.open(store, WS, model="gpt-4o", warn_fraction=0.5)  # type: ignore[call-arg]


@pytest.mark.parametrize("bad", [
    {"role": "robot", "parts": []},
    {"kind": "reset", "role": "system", "parts": [], "reset": {"reason": "manual"}},
    {"role": "user", "parts": [{"type": "text", "text": "x"}], "seq": 4},
    "not a row",
])
def test_bad_rows_are_refused_before_anything_is_stored(tmp_path: Path, bad: Any) -> None:
    from ledger import InvalidRow

    conv = conversation(tmp_path / "r")
    for call in (lambda: conv.send([user("ok"), bad]),
                 lambda: conv.send([user("big " * 5000), bad]),
                 lambda: conv.record([bad])):
        with pytest.raises(InvalidRow) as info:
            call()
        assert "row 1" in str(info.value) or "row 0" in str(info.value)
    assert not (tmp_path / "r").exists()


def test_the_runtime_object_on_postgresql(pg_root: str) -> None:
    """The same object over the PostgreSQL engine: a new workspace, preflight
    with one-batch quarantine, tool steps carried at rollovers."""
    conv = Conversation.open(Store(pg_root), WS, model="gpt-4o", context_limit=2000,
                             tools={"bash": BASH})
    assert conv.window == 0 and conv.history.provider_view() == []
    with pytest.raises(SendRefused) as info:
        conv.send(user(words(4000, "big")))
    assert len(info.value.quarantined) == 1 and conv.history.provider_view() == []
    rolled = []
    opened = []
    for turn in range(24):
        asked = conv.send(user(words(40, "q")))
        conv.record(calls(f"p{turn}"))
        req = conv.send(result(f"p{turn}", words(80, "o")))
        assert_within(req, conv)
        assert_paired(req.messages)
        opened += [r.window for r in (asked, req) if r.rolled_over]
        if req.rolled_over:
            rolled.append(req)
            assert req.carried == 1 and f"(window {req.window})" in str(req.messages[0])
    assert len(rolled) >= 2
    windows = [w["window"] for w in conv.session_history().list()["items"]]
    assert windows[-1] == conv.window == opened[-1]


def _settled_ids(conv: Conversation) -> list[str]:
    """Ids of the calls a user message settled (``meta.settled``), oldest first."""
    return [p["id"] for r in conv.history.rows() if r.meta.get("settled") == "user_moved_on"
            for p in r.parts]


def test_open_calls_kept_between_sends_follow_other_writers(tmp_path: Path) -> None:
    """The open calls a conversation keeps from its own batches are used only
    while nothing else wrote: a call another writer opened, a result another
    writer stored and a result another writer's rewrite took away (a new
    epoch, the next seq unchanged) are each seen by the next user message."""
    conv = conversation(tmp_path, limit=16000)
    other = Store(tmp_path, durability="off").history(WS)
    conv.send(user("hello"))
    conv.record(calls("a"))
    conv.send(result("a", "done"))
    conv.send(user("next"))
    assert _settled_ids(conv) == []
    other.append(calls("b"))  # another writer opens a call
    conv.send(user("and then"))
    assert _settled_ids(conv) == ["b"]
    conv.record(calls("c"))
    other.append(result("c", "stored elsewhere"))  # another writer settles it
    conv.send(user("after c"))
    assert _settled_ids(conv) == ["b"]
    conv.record(calls("d"))
    conv.send(result("d", "done"))
    assert conv.open_calls() == []
    stored = next(r.seq for r in conv.history.rows() if r.parts and r.parts[0].get("id") == "d"
                  and r.parts[0].get("type") == "tool_result")
    other.reject(stored)  # a rewrite elsewhere reopens d
    conv.send(user("after d"))
    assert _settled_ids(conv) == ["b", "d"]
    assert conv.open_calls() == []
    req = conv.send(user("last"))
    assert_paired(req.messages)


def test_a_record_that_reads_no_window_still_sees_other_writers(tmp_path: Path) -> None:
    """A record of rows that settle nothing starts from the state of the
    conversation's own last batch instead of reading it. What another writer
    did in between is still seen: a call it opened and a result its rewrite
    took away (a new epoch, the next seq unchanged) are settled by the next
    user message, and a clear moves the record into the new window."""
    conv = conversation(tmp_path, limit=16000)
    other = Store(tmp_path, durability="off").history(WS)
    conv.send(user("hello"))
    other.append(calls("x"))  # another writer opens a call
    conv.record(says("thinking"))
    conv.send(user("next"))
    assert _settled_ids(conv) == ["x"]
    conv.record(calls("a"))
    conv.send(result("a", "done"))
    stored = next(r.seq for r in conv.history.rows() if r.parts and r.parts[0].get("id") == "a"
                  and r.parts[0].get("type") == "tool_result")
    other.reject(stored)  # a rewrite elsewhere reopens a
    conv.record(says("still thinking"))
    conv.send(user("after a"))
    assert _settled_ids(conv) == ["x", "a"]
    assert conv.open_calls() == []
    other.clear_soft()  # a new window, opened elsewhere
    conv.record(says("after the clear"))
    assert conv.window == conv.history.window == other.window
    assert [r.parts[0]["text"] for r in conv.history.provider_view()] == ["after the clear"]
    req = conv.send(user("last"))
    assert_paired(req.messages)
    assert [m["parts"][0]["text"] for m in req.messages] == ["after the clear", "last"]


def test_a_send_reads_the_window_and_its_state_in_one_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A send, a record holding a user message and ``request()`` each read
    the workspace once: the view with the state it was read under
    (``History.window_state``), no state read of their own before it. A
    record of model output reads neither (it starts from its own last
    batch)."""
    conv = conversation(tmp_path, limit=16000)
    conv.send(user("hello"))  # the first batch picks the epoch: the next send learns it
    conv.send(user("again"))
    engine = type(conv.history.engine)
    reads: list[str] = []
    for name in ("snapshot", "window_state"):
        def counted(self: Any, _name: str = name, _real: Any = getattr(engine, name)) -> Any:
            reads.append(_name)
            return _real(self)
        monkeypatch.setattr(engine, name, counted)
    conv.record(calls("a"))
    assert reads == []
    conv.send(result("a", "done"))
    assert reads == ["window_state"]
    conv.record(user("a user message, recorded"))
    assert reads == ["window_state"] * 2
    req = conv.request()
    assert reads == ["window_state"] * 3
    assert [m["parts"][0].get("text") for m in req.messages][-1] == "a user message, recorded"
    assert conv.window == 0 and not conv.open_calls()


def test_messages_a_caller_changes_change_nothing_else(tmp_path: Path) -> None:
    """A request's messages are the caller's to change: a later request is
    counted from the stored rows (not from a request counted before), and a
    row a live middleware hook adds is handed out as a copy, so changing it
    does not change what the hook adds next time."""
    from ledger.admission import MiddlewareRegistry, Registration

    note = {"kind": "message", "role": "user", "parts": [{"type": "text", "text": "hook note"}]}

    def hook(request: dict[str, Any], mount: Any) -> dict[str, Any]:
        return {**request, "messages": [*request["messages"], note]}

    registry = MiddlewareRegistry()
    plain = conversation(tmp_path / "plain", limit=16000)
    hooked = conversation(tmp_path / "hooked", limit=16000, registry=registry)
    registry.register(Registration.unrestricted("r1", "plugin", hook))
    for conv in (plain, hooked):
        req = conv.send(user("hello there"))
        req.messages[0]["parts"] = [{"type": "text", "text": words(3000, "changed")}]
        req.messages[-1]["parts"] = [{"type": "text", "text": "changed"}]
        again = conv.request()
        assert_within(again, conv)
        assert again.messages[0]["parts"][0]["text"] == "hello there"
        assert again.tokens == req.tokens  # counted before the change
    assert note["parts"] == [{"type": "text", "text": "hook note"}]
    assert hooked.request().messages[-1]["parts"][0]["text"] == "hook note"


@pytest.mark.parametrize("how", ["rollover", "clear"])
def test_send_stored_refuses_a_trigger_another_writer_sealed(tmp_path: Path, how: str) -> None:
    """A trigger stored, then sealed by another writer's rollover or clear
    before ``send_stored`` reads the window: the rows from its first seq on
    are now the other writer's (a lead-in, their trigger). The send is
    refused with rule ``sealed`` and nothing is appended, so no request goes
    out without the trigger (it was built from the other writer's rows)."""
    conv = conversation(tmp_path)
    for i in range(3):
        conv.send(user(words(40, f"q{i}")))
        conv.record(says(words(10, f"a{i}")))
    mine = conv.history.append(user("my question")).seqs[0]
    other = conversation(tmp_path)
    if how == "rollover":
        other.send(user("their question"))
        other.rollover()
    else:
        other.clear()
    before = conv.history.next_seq
    with pytest.raises(SendRefused, match="sealed") as refused:
        conv.send_stored(mine)
    assert refused.value.decision.rule == "sealed"
    assert conv.history.next_seq == before
