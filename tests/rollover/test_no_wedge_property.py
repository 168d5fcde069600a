"""Property (issue 29): over random interleavings of user messages, parallel
tool calls, results sent or recorded, approvals that come after the user went
on, cancellations, restarts (a new object on the same store: the in-memory
state is lost, as after a crash; ``test_no_wedge.py`` kills a real process)
and providers that reuse call ids (``call_0`` in every step):

- no request is above the hard ceiling;
- no request holds a call without its result, or a result without its call;
- no refusal lasts past the next user message: every user message gets a
  request, and afterwards no call is open;
- the carried rows of a rollover never grow with the number of rollovers.

Real store, real tiktoken counts; kept small for the ``ci`` profile.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from ledger import Store
from ledger.rollover.conversation import Conversation, Request, SendRefused
from tests.rollover.test_conversation import BASH, assert_paired, result, says, user, words

OPS = st.one_of(
    st.tuples(st.just("user"), st.integers(40, 220)),
    st.tuples(st.just("say"), st.integers(5, 60)),
    st.tuples(st.just("step"), st.integers(1, 3), st.booleans()),
    st.tuples(st.just("answer"), st.integers(0, 5), st.integers(5, 120),
              st.sampled_from(["send", "record"])),
    st.tuples(st.just("late"), st.integers(0, 5), st.integers(5, 60)),
    st.tuples(st.just("cancel")),
    st.tuples(st.just("restart")),
)


def open_conv(root: Path) -> Conversation:
    return Conversation.open(Store(root, durability="off"), "wedge", model="gpt-4o",
                             context_limit=2000, system="agent", tools={"bash": BASH})


class Loop:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.conv = open_conv(root)
        self.n = 0
        self.settled: list[str] = []  # ids settled without their own result
        self.rollovers = 0
        self.max_carried = 0
        self.refusals = 0

    def check(self, req: Request) -> None:
        assert req.tokens <= req.ceiling
        assert_paired(req.messages)  # every call with its result, every result with its call
        if req.rolled_over:
            self.rollovers += 1
            self.max_carried = max(self.max_carried, req.carried)
            assert req.carried <= 4  # one step of at most 3 calls: its row and its results

    def open_ids(self) -> list[str]:
        return [c.id for c in self.conv.open_calls()]

    def run(self, op: tuple[Any, ...]) -> None:
        kind = op[0]
        if kind == "user":
            before = self.open_ids()
            req = self.conv.send(user(words(op[1], "u")))  # never refused
            self.check(req)
            assert self.open_ids() == []
            self.settled += before
        elif kind == "say":
            self.conv.record(says(words(op[1], "s")))
        elif kind == "step":
            self.n += 1
            ids = [f"call_{i}" if op[2] else f"c{self.n}_{i}" for i in range(op[1])]
            self.conv.record({"role": "assistant", "parts": [
                {"type": "tool_call", "id": i, "name": "bash", "input": {"cmd": i}}
                for i in ids]})
        elif kind == "answer":
            open_ = self.open_ids()
            if not open_:
                return
            row = result(open_[op[1] % len(open_)], words(op[2], "r"))
            if op[3] == "record":
                self.conv.record(row)
                return
            try:
                self.check(self.conv.send(row))
            except SendRefused as exc:  # P2 (others still open), or B5 (too big to carry)
                assert exc.decision.rule in ("P2", "B5"), exc
                if exc.decision.rule == "P2":
                    assert exc.open_calls and "cancel_open_calls" in str(exc)
                self.refusals += 1
        elif kind == "late" and self.settled:
            cid = self.settled[op[1] % len(self.settled)]
            try:  # the approval came after all: stored, served as text
                self.check(self.conv.send(result(cid, words(op[2], "late"))))
            except SendRefused as exc:
                assert exc.decision.rule in ("P2", "B5"), exc
                self.refusals += 1
        elif kind == "cancel":
            self.conv.cancel_open_calls("cancelled by the test")
            assert self.open_ids() == []
        elif kind == "restart":
            self.conv = open_conv(self.root)


@settings(max_examples=15, deadline=None)
@given(ops=st.lists(OPS, min_size=15, max_size=40))
def test_no_request_over_the_ceiling_no_open_call_sent_no_lasting_refusal(
        tmp_path_factory: Any, ops: list[tuple[Any, ...]]) -> None:
    loop = Loop(tmp_path_factory.mktemp("wedge"))
    for op in ops:
        loop.run(op)
    loop.run(("user", 20))  # whatever happened, the next user message gets a request
    event(f"rollovers: {min(loop.rollovers, 3)}{'+' if loop.rollovers >= 3 else ''}")
    event(f"refusals: {loop.refusals > 0}")


def test_reused_call_ids_over_many_rollovers_keep_the_carried_rows_flat(tmp_path: Path) -> None:
    """Case 3: a provider that calls every step's call ``call_0``. Every one of
    30 steps rolls over at its tool result; each carries only its own call, so a
    150-word result is never quarantined as too large.

    The sizes leave about 300 tokens either way (so a tool schema that grows or
    shrinks a little does not move where the rollover lands): the 260-word user
    message fits beside the previous step's carried call and result, and the
    result then does not. The first step's longer message puts the first
    rollover on a result too."""
    conv = Conversation.open(Store(tmp_path, durability="off"), "reuse", model="gpt-4o",
                             context_limit=2000, system="agent", tools={"bash": BASH})
    carried = []
    for step in range(30):
        asked = conv.send(user(f"step {step}: " + words(580 if step == 0 else 260, "q")))
        assert asked.ceiling - asked.tokens > 150, (step, asked.tokens)  # the user message fits
        conv.record({"role": "assistant", "parts": [
            {"type": "tool_call", "id": "call_0", "name": "bash", "input": {"cmd": "ls"}}]})
        req = conv.send(result("call_0", words(150, f"out{step}-")))
        assert req.tokens <= req.ceiling
        assert_paired(req.messages)
        if req.rolled_over:
            carried.append(req.carried)
    assert len(carried) == 30, carried
    assert set(carried) == {1}, carried  # the step's call row, never older ones
