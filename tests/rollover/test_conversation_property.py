"""Property: over random interleavings of user messages, model output, tool
calls (single and parallel), results answered out of order, results recorded
as they arrive, approvals granted late, denials and cancellations (error
results) and manual clears, the runtime object's decision and transaction
agree (no admission refusal, no split pair), every request stays within the
hard ceiling, counts what it sends (open calls left out of both) and pairs
every result with its call, a rollover commits only at a settled step with
the settling pair in the new window, and no stored tool result disappears
from what the model sees.

Real store, real tiktoken counts; the ``ci`` hypothesis profile keeps it fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from ledger import Store
from ledger.rollover.conversation import Conversation, Request, SendRefused
from ledger.rollover.engine import Action, is_settled, open_tool_calls
from tests.rollover.test_conversation import (
    BASH,
    assert_paired,
    assert_within,
    calls,
    result,
    says,
    user,
    words,
)

OPS = st.one_of(
    st.tuples(st.just("user"), st.integers(5, 120)),
    st.tuples(st.just("say"), st.integers(5, 80)),
    st.tuples(st.just("call"), st.integers(1, 3)),
    st.tuples(st.just("answer"), st.integers(0, 5), st.integers(5, 150),
              st.sampled_from(["send", "record", "error"])),
    st.tuples(st.just("step"), st.integers(1, 3), st.integers(5, 120)),
    st.tuples(st.just("clear")),
)


def visible_result_ids(view: list[dict[str, Any]]) -> set[str]:
    """Result ids the model can see: as results, or served as user text."""
    out: set[str] = set()
    for row in view:
        for part in row.get("parts", []):
            if part.get("type") == "tool_result":
                out.add(part["id"])
            elif part.get("type") == "text" and part["text"].startswith("[result of tool call "):
                out.add(part["text"][len("[result of tool call "):].split(" ")[0].rstrip(";]"))
    return out


class Loop:
    def __init__(self, root: Path, limit: int = 1500) -> None:
        self.conv = Conversation.open(Store(root, durability="off"), "prop", model="gpt-4o",
                                      context_limit=limit, system="agent", tools={"bash": BASH})
        self.open: list[str] = []
        self.n = 0
        self.rollovers = 0
        self.carried = 0
        self.refused = {"B5": 0, "P2": 0}

    def new_id(self) -> str:
        self.n += 1
        return f"c{self.n}"

    def check_window(self) -> None:
        h = self.conv.history
        rows = [r.to_dict() for r in h.window_rows()]
        stored = {p["id"] for r in rows for p in r.get("parts", [])
                  if p.get("type") == "tool_result" and r.get("kind", "message") == "message"
                  and r.get("parts")}
        view = [r.to_dict() for r in h.provider_view()]
        assert stored <= visible_result_ids(view), "a stored result vanished from the view"

    def send(self, rows: list[dict[str, Any]]) -> Request | None:
        h = self.conv.history
        before = h.next_seq
        answered = {p["id"] for r in rows for p in r["parts"] if p.get("type") == "tool_result"}
        try:
            req = self.conv.send(rows)
        except SendRefused as exc:
            d = exc.decision
            assert d.action is Action.REJECT
            assert d.rule in ("B5", "P2"), d.reason
            # only rejected records (B5), or the results of a running step (P2)
            assert h.next_seq == before + len(exc.quarantined) + len(exc.stored)
            assert bool(exc.quarantined) == (d.rule == "B5")
            if exc.stored:
                assert d.rule == "P2" and all(r["role"] == "tool" for r in rows)
                for rid in answered:
                    self.open.remove(rid)
            self.refused[d.rule] += 1
            self.check_window()
            return None
        assert not req.decision.reason.startswith("rollover refused"), req.decision.reason
        # within the ceiling, and its count is what it sends (an independent
        # recount), open calls left out of both
        assert_within(req, self.conv)
        assert_paired(req.messages)  # open calls are left out of the request
        if req.rolled_over:
            self.rollovers += 1
            self.carried += req.carried > 0
            view = [r.to_dict() for r in h.provider_view()]
            assert is_settled(view), "a rollover committed at an unsettled step"
        # the results this send carried reach the model (paired, or as user text)
        assert answered <= visible_result_ids(list(req.messages))
        open_now = open_tool_calls([r.to_dict() for r in h.provider_view()])
        assert open_now == {c for c in self.open if c in open_now}
        self.check_window()
        return req

    def run(self, op: tuple[Any, ...]) -> None:
        kind = op[0]
        if kind == "user":
            if self.send([user(words(op[1], "u"))]) is not None:
                self.open = []  # the user went on: the open calls are settled
        elif kind == "say":
            self.conv.record(says(words(op[1], "s")))
        elif kind == "call":
            ids = [self.new_id() for _ in range(op[1])]
            self.conv.record(calls(*ids))
            self.open.extend(ids)
        elif kind == "answer" and self.open:
            cid = self.open[op[1] % len(self.open)]
            row = result(cid, words(op[2], "r"), error=op[3] == "error")
            if op[3] == "record":
                self.conv.record(row)
                self.open.remove(cid)
            elif self.send([row]) is not None:
                self.open.remove(cid)  # (a refused send that stored it removed it)
        elif kind == "step":
            ids = [self.new_id() for _ in range(op[1])]
            rows = [calls(*ids), *[result(i, words(op[2], "t")) for i in reversed(ids)]]
            self.send(rows)
        elif kind == "clear":
            self.conv.clear()
            self.open = []  # their results, if any, arrive as user text


@settings(max_examples=25)
@given(ops=st.lists(OPS, min_size=10, max_size=40))
def test_decision_and_transaction_agree_on_random_tool_interleavings(
    tmp_path_factory: Any, ops: list[tuple[Any, ...]]
) -> None:
    loop = Loop(tmp_path_factory.mktemp("prop"))
    for op in ops:
        loop.run(op)
    # settle whatever is open and go on: the conversation always recovers
    for cid in list(loop.open)[:1]:
        if loop.send([result(cid, "cancelled by the user", error=True)]) is not None:
            loop.open.remove(cid)
    loop.conv.cancel_open_calls("cancelled by the user")
    assert loop.conv.open_calls() == []
    req = loop.send([user("and now?")])
    assert req is not None
    event(f"rollovers: {min(loop.rollovers, 3)}{'+' if loop.rollovers >= 3 else ''}")
    event(f"carried a tool step: {loop.carried > 0}")
    event(f"refused P2 (step running): {loop.refused['P2'] > 0}")


def test_long_random_run_rolls_over_several_times(tmp_path: Path) -> None:
    """A fixed long interleaving (a deterministic companion to the property):
    it must roll over several times, each at a settled step."""
    import random

    rng = random.Random(2)
    loop = Loop(tmp_path, limit=2500)
    for _ in range(160):
        mode = rng.choice(["send", "send", "record", "error"])
        loop.run(rng.choice([
            ("user", rng.randint(20, 120)),
            ("call", rng.randint(1, 3)),
            ("answer", rng.randint(0, 5), rng.randint(20, 150), mode),
            ("answer", rng.randint(0, 5), rng.randint(20, 150), mode),
            ("answer", rng.randint(0, 5), rng.randint(20, 150), "send"),
            ("step", rng.randint(1, 3), rng.randint(20, 90)),
            ("say", rng.randint(5, 40)),
        ]))
    assert loop.rollovers >= 3 and loop.carried >= 1
