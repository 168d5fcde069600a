"""Hypothesis property over whole runtimes: no sequence of sends, tool steps,
queued continuations, cancellations, crashes (including 1- and 2-row partial
prefixes), restarts, policy changes and manual clears yields

* two boundaries for one rollover (a trigger twice, a batch with two resets,
  or a rollover boundary that seals a window with nothing in it -- which is
  what re-running a rollover after a persisted prefix would write),
* a provider request above the hard ceiling,
* a rollover appended while history access is denied, or
* a queued continuation resurrected after a restart.

The runtime is simulated with the real engine (``ledger.rollover.engine``) over two
backends: the in-memory fake and the real ``ledger.transcript.store.Store`` on disk.
"""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.core.errors import CommitFailed, LedgerError, WindowChanged
from ledger.core.format import files as ffmt
from ledger.core.format import rows as fmt
from ledger.core.rows import stored_row
from ledger.policy import advertised_schemas
from ledger.rollover.engine import (
    Action,
    BudgetConfig,
    PinnedModel,
    ProviderRequest,
    RolloverHooks,
    RolloverState,
    StepBudgetExceeded,
    check_step,
    has_sealable_context,
    lead_in_message,
    run_rollover,
    send_inputs,
    step,
    warning_row,
)
from ledger.transcript.store import Store
from tests.helpers import msg
from tests.helpers.rollover import (
    ALL,
    NO_HISTORY,
    TOOLS,
    Crash,
    FakeHistory,
    Runtime,
    count,
    tool_call,
    tool_result,
)

# The gap between the rollover threshold and the ceiling is wider than the
# lead-in, so a nearly empty window can be "due" and still fit a fresh one:
# only the rules (not the arithmetic) keep such a window from being sealed.
SIM = BudgetConfig(context_limit=4000, warn_fraction=0.5, rollover_fraction=0.6,
                   hard_ceiling=3600)
PINNED = PinnedModel.pin("m1", SIM)
WS = "sim"
INJECTIONS = [
    "crash:prepare", "crash:cleanup", "crash:before_append", "crash:prefix1", "crash:prefix2",
    "crash:after_append", "crash:post", "cancel:before_cleanup", "cancel:after_cleanup",
    "cancel:after_append", "revoke_access:after_cleanup", "fail:append",
]


def _prefix_rows(seq: int, trigger: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    reset = {"kind": "reset", "role": "system", "parts": [], "reset": {"reason": "rollover"}}
    lead = {**lead_in_message(), "meta": {"window": seq, "session_history": True}}
    return [reset, lead, *trigger]


class FakeBackend:
    def __init__(self) -> None:
        self.h = FakeHistory()

    def open(self) -> Any:
        return self.h

    def write_prefix(self, trigger: Sequence[dict[str, Any]], keep: int) -> None:
        self.h._write(_prefix_rows(self.h.next_seq, trigger), keep=keep)

    def rows(self) -> list[dict[str, Any]]:
        return self.h.rows()


class StoreBackend:
    def __init__(self, root: Path) -> None:
        self.root = root

    def open(self) -> Any:
        return Store(self.root, durability="off").history(WS)

    def write_prefix(self, trigger: Sequence[dict[str, Any]], keep: int) -> None:
        seq = self.open().snapshot().next_seq
        rows = _prefix_rows(seq, trigger)
        lines = b"".join(
            fmt.encode_line(stored_row(rows[i], seq + i, f"b_prefix{seq}", len(rows), i, 1))
            for i in range(keep)
        )
        names = sorted(n for n in os.listdir(self.root / WS) if ffmt.segment_number(n))
        with open(self.root / WS / names[-1], "ab") as f:
            f.write(lines)

    def rows(self) -> list[dict[str, Any]]:
        return [r.to_dict() for r in self.open().rows()]


class Proxy:
    """The history as the runtime sees it, with faults around the append."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.inner = sim.backend.open()

    @property
    def window(self) -> int:
        return int(self.inner.window)

    def provider_view(self) -> list[Any]:
        return list(self.inner.provider_view())

    @property
    def next_seq(self) -> int:
        return int(self.inner.next_seq)

    def append_many(self, rows: Sequence[dict[str, Any]], **kw: Any) -> Any:
        return self.inner.append_many(rows, **kw)

    def rollover(self, trigger_rows: Sequence[dict[str, Any]], lead_in: str | None = None,
                 tool_available: bool = True, *, expect_window: int | None = None,
                 expect_next_seq: int | None = None) -> Any:
        sim = self.sim
        if not sim.access:
            sim.violations.append("rollover appended while history access is denied")
        fault = sim.fault
        if fault == "crash:before_append":
            raise Crash(fault)
        if fault == "fail:append":
            raise CommitFailed("injected", "b_x")
        if fault in ("crash:prefix1", "crash:prefix2"):
            if expect_window != self.window:
                raise WindowChanged("moved")
            sim.backend.write_prefix(list(trigger_rows), 1 if fault.endswith("1") else 2)
            raise Crash(fault)
        result = self.inner.rollover(trigger_rows, lead_in=lead_in, tool_available=tool_available,
                                     expect_window=expect_window, expect_next_seq=expect_next_seq)
        if fault == "crash:after_append":
            raise Crash(fault)
        return result


class Sim:
    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.access = True
        self.fault: str | None = None
        self.cancel = False
        self.requests: list[int] = []
        self.violations: list[str] = []
        self.lost: set[str] = set()
        self.ids = itertools.count(1)
        self.rt = Runtime(config=SIM, workspace=WS)
        self.rt.parts.policy = lambda: ALL if self.access else NO_HISTORY
        loader = self.rt.parts.memory

        def memory() -> Any:
            if self.fault == "crash:prepare":
                raise Crash("prepare")
            return loader()

        self.rt.parts.memory = memory
        self.h = Proxy(self)
        self.h.append_many([msg("hello", "user", id=self.new_id("t"))])
        self.state = RolloverState.after_restart(self.h.window)

    def new_id(self, prefix: str) -> str:
        return f"{prefix}-{next(self.ids)}"

    # --- runtime parts
    def request_for(self, messages: Sequence[Any]) -> ProviderRequest:
        return ProviderRequest("m1", "BASE+ctx", advertised_schemas(TOOLS, ALL),
                               tuple(messages), "MEM1")

    def provide(self, request: ProviderRequest, origin: str = "rollover") -> str:
        try:
            tokens = check_step(request, PINNED, count).tokens  # every step is checked
        except StepBudgetExceeded:
            # only the warning row may push a fitting request over the ceiling;
            # a plain send or a committed rollover must have been refused earlier
            if origin != "warn":
                self.violations.append(f"{origin} request reached the step check over the ceiling")
            raise
        self.requests.append(tokens)
        return "ok"

    def _cleanup(self, name: str) -> Any:
        def run() -> None:
            if name == "sandbox":
                if self.fault == "crash:cleanup":
                    raise Crash("cleanup")
                if self.fault == "cancel:after_cleanup":
                    self.cancel = True
                if self.fault == "revoke_access:after_cleanup":
                    self.access = False

        return run

    def _notify(self, window: int) -> None:
        if self.fault == "crash:post":
            raise Crash("post")
        if self.fault == "cancel:after_append":
            self.cancel = True

    def hooks(self) -> RolloverHooks:
        return RolloverHooks(
            cleanup=[(n, self._cleanup(n)) for n in ("cache", "carryover", "sandbox")],
            notify_window=self._notify,
        )

    # --- actions
    def restart(self) -> None:
        if self.state.continuation:
            self.lost |= {str(r.get("id")) for r in self.state.continuation}
        self.h = Proxy(self)
        self.state = RolloverState.after_restart(self.h.window)
        self.fault = None
        self.cancel = False

    def turn(self, trigger: list[dict[str, Any]], reply: int) -> None:
        window, inputs = send_inputs(self.h, trigger, request_for=self.request_for, count=count,
                                     history_access=self.access, notes_writable=True)
        self.state = self.state.observe(window)
        decision, self.state = step(self.state, inputs, SIM)
        if decision.action is Action.REJECT:
            return
        if decision.action is Action.ROLLOVER:
            self.cancel = self.fault == "cancel:before_cleanup"
            try:
                out = run_rollover(self.h, trigger, self.rt.parts, self.hooks(),
                                   send=self.provide, cancelled=lambda: self.cancel)
            except Crash:
                self.restart()
                return
            except LedgerError:
                return
            finally:
                self.fault = None
                self.cancel = False
            self.state = self.state.observe(out.window)
            if out.discarded:
                return
        else:
            rows = [warning_row(decision), *trigger] if decision.action is Action.WARN else trigger
            view = self.h.provider_view()
            try:
                origin = "warn" if decision.action is Action.WARN else "send"
                self.provide(self.request_for([*[_d(r) for r in view], *rows]), origin)
            except StepBudgetExceeded:
                return
            self.h.append_many(rows, expect_window=self.state.window)
        self.h.append_many([msg("r" * reply, "assistant")], expect_window=self.state.window)

    def act(self, action: tuple[Any, ...]) -> None:
        try:
            self._act(action)
        except WindowChanged:
            # another writer (a manual clear) moved the window: this send's
            # conditional append is refused; the runtime re-reads and goes on
            self.state = self.state.observe(self.h.window)

    def _act(self, action: tuple[Any, ...]) -> None:
        kind = action[0]
        if kind == "send":
            self.turn([msg("u" * action[1], "user", id=self.new_id("t"))], action[2])
        elif kind == "tool_step":
            call = self.new_id("c")
            self.h.append_many([tool_call(call), tool_result(call, "o" * action[1])],
                               expect_window=self.state.window)
        elif kind == "queue":
            self.state = self.state.queue([msg("continue", "user", id=self.new_id("cont"))])
        elif kind == "continue":
            cont, self.state = self.state.take_continuation()
            if cont:
                self.turn([dict(r) for r in cont], 10)
        elif kind == "inject":
            self.fault = action[1]
        elif kind == "restart":
            self.restart()
        elif kind == "access":
            self.access = action[1]
        elif kind == "clear":
            self.h.inner.clear_soft()

    # --- the invariants
    def check(self) -> None:
        assert self.violations == []
        assert all(t <= SIM.ceiling for t in self.requests), self.requests
        rows = self.backend.rows()
        ids = [r["id"] for r in rows if str(r.get("id", "")).startswith(("t-", "cont-"))]
        assert len(ids) == len(set(ids)), "a trigger was written twice"
        assert not (self.lost & set(ids)), "a queued continuation was resurrected"
        per_batch: dict[str, int] = {}
        since: list[dict[str, Any]] = []
        for row in rows:
            if row["kind"] == "reset":
                per_batch[row["batch"]["id"]] = per_batch.get(row["batch"]["id"], 0) + 1
                if row["reset"]["reason"] == "rollover":
                    assert has_sealable_context(since), f"rollover at {row['seq']} sealed nothing"
                since = []
            else:
                since.append(row)
        assert all(n == 1 for n in per_batch.values())


def _d(row: Any) -> Any:
    return row if isinstance(row, dict) else row.to_dict()


SEND = st.tuples(st.just("send"), st.integers(100, 900), st.integers(50, 700))
# Big enough to be due for rollover even in an empty window, mostly small
# enough to fit a fresh one; sometimes too big for any window.
HUGE = st.tuples(
    st.just("send"), st.one_of(st.integers(2250, 3050), st.integers(3050, 3900)),
    st.integers(0, 700),
)
OTHER = st.one_of(
    st.tuples(st.just("tool_step"), st.integers(0, 900)),
    st.tuples(st.just("queue")),
    st.tuples(st.just("continue")),
    st.tuples(st.just("restart")),
    st.tuples(st.just("access"), st.booleans()),
    st.tuples(st.just("clear")),
    HUGE,
)
# A round arms at most one fault, then sends until the window fills, with
# other events mixed in; rounds keep scenarios dense in rollovers.
ROUND = st.tuples(
    st.one_of(st.none(), st.sampled_from(INJECTIONS)),
    st.lists(SEND, min_size=2, max_size=6),
    st.lists(OTHER, max_size=2),
    st.lists(st.one_of(SEND, HUGE), max_size=3),
)


def _flatten(rounds: list[Any]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for fault, sends, others, more in rounds:
        if fault is not None:
            out.append(("inject", fault))
        out.extend(sends)
        out.extend(others)
        out.extend(more)
    return out


ACTIONS = st.lists(ROUND, min_size=2, max_size=8).map(_flatten)


@given(ACTIONS)
def test_no_double_boundary_no_oversize_no_denied_rollover_fake(actions: list[Any]) -> None:
    sim = Sim(FakeBackend())
    for action in actions:
        sim.act(action)
        sim.check()


@settings(max_examples=40)
@given(ACTIONS)
def test_no_double_boundary_no_oversize_no_denied_rollover_store(actions: list[Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        sim = Sim(StoreBackend(Path(tmp)))
        for action in actions:
            sim.act(action)
        sim.check()


def test_simulation_reaches_every_outcome() -> None:
    """The property is not vacuous: a scripted run rolls over, crashes with
    both prefix shapes (and the next send then stays in the prefix's window),
    and blocks rollover while access is denied."""
    sim = Sim(FakeBackend())
    big = ("send", 1000, 1000)

    def resets() -> list[int]:
        return [r["seq"] for r in sim.backend.rows() if r["kind"] == "reset"]

    for action in (big, big):
        sim.act(action)
    assert len(resets()) == 1
    for shape in ("crash:prefix1", "crash:prefix2"):
        for action in (big, big, ("inject", shape)):
            sim.act(action)
        before = resets()
        sim.act(big)  # the rollover crashes mid-append, leaving a prefix; restart
        assert len(resets()) == len(before) + 1 and sim.h.window == resets()[-1]
        sent = len(sim.requests)
        sim.act(big)  # the next message: a plain send in the prefix's window
        assert len(resets()) == len(before) + 1 and len(sim.requests) == sent + 1
        sim.check()
    sim.act(("access", False))
    before = resets()
    for action in (big, big, big):
        sim.act(action)
    assert resets() == before  # blocked, not rolled over, not summarised
    sim.act(("access", True))
    sim.act(big)
    assert len(resets()) == len(before) + 1
    sim.check()
    batches: dict[str, list[dict[str, Any]]] = {}
    for r in sim.backend.rows():
        batches.setdefault(r["batch"]["id"], []).append(r)
    partial = [b for b in batches.values() if len(b) < b[0]["batch"]["n"]]
    assert sorted(len(b) for b in partial) == [1, 2]
    assert sim.requests and max(sim.requests) <= SIM.ceiling
