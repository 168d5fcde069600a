"""Power loss, explored: every crash state of each store operation under the
persistence model of tests/helpers/crashfs.py, each checked as a new process would
open it.

For every scenario: build a history, record the file-system calls of one
operation (the code path users run, with ``os`` wrapped), then materialize
every crash state the model allows (deduplicated) and check:

- the history reads as gap-free whole batches: at ``full`` exactly the
  history before the operation or after it (after it once the operation had
  returned: acknowledged); at ``normal`` a whole-batch prefix of the history
  after it, at least the history before it minus the active segment's newest
  batches (docs/explanation/durability.md); at ``off`` nothing before repair;
- no row at or before the newest surviving manual reset is in the provider
  view or found by ``session_history``;
- a cursor taken before the crash expires or returns exactly the rows of the
  crash-free run;
- ``check`` runs, ``repair`` keeps every row that was readable, leaves a
  consistent history, and a second repair changes nothing;
- the next append works and takes the seq after the last surviving row;
- ranked search answers from any recall index what a fresh index answers:
  the one of the state (built before the operation: behind) and the one of
  the run's end (ahead of a state that lost rows); checked in every fourth
  distinct state of every scenario (three ranked searches in every state
  about tripled the explorer's time), and in every state of the ``ranked-*``
  scenarios, whose steps write the index itself (SQLite's writes, recorded
  as opaque files: ``tests/helpers/crashfs.py``), so a crash leaves it torn.

The figures (states explored, time) are printed with ``-s`` and recorded in
docs/explanation/durability.md ("Reliability").
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ledger import CursorExpired, HistoryDamaged, Store
from ledger.core.errors import DeletePending
from ledger.core.format import files as ffmt
from ledger.core.windows import classify_reset
from ledger.storage.files import merge
from recovery.check import check
from recovery.legacy import import_legacy
from recovery.repair import repair
from tests.helpers import msg
from tests.helpers.crashfs import Plan, Tree, build, crash_states, record
from tests.helpers.recovery import fast_scratch

WS = "ws"
RECALL_EVERY = 4  # check the recall index in every fourth distinct crash state
REPO = Path(__file__).resolve().parents[3]
TOTALS: dict[str, int] = {"states": 0, "plans": 0, "scenarios": 0}


Step = Callable[[Store], Any]


@dataclass
class Scenario:
    name: str
    durability: str
    setup: Callable[[Store], None]
    steps: list[Step]
    segment_bytes: int = 4096
    rewrite: bool = False  # a rewrite: the log is the old one or the new one, whole
    deletes: bool = False
    damaged: bool = False  # the history is damaged before the steps run
    recall: bool = False  # the steps write the recall index: every state checks it


def grow(store: Store, batches: int, *, start: int = 0, clear_at: int | None = None) -> None:
    h = store.history(WS)
    for i in range(start, start + batches):
        if i == clear_at:
            h.clear_soft()
        h.append_many([msg(f"needle {i} question"), msg(f"answer {i} " + "x" * 40, "assistant")])


def _rolled(store: Store) -> None:
    grow(store, 4)
    store.history(WS).rollover([msg("needle after the rollover")])
    grow(store, 2, start=4)


def _legacy(store: Store) -> Any:
    return import_legacy(store.history(WS), str(REPO / "fixtures/legacy-histories/basic"))


def _damaged(store: Store) -> None:
    grow(store, 6, clear_at=2)
    h = store.history(WS)
    seg = sorted(p for p in os.listdir(h.engine.path) if p.startswith("seg-"))[-1]
    with open(os.path.join(h.engine.path, seg), "ab") as f:
        f.write(b'{"seq":99,"torn')  # a torn tail


def append(text: str, n: int = 2, pad: int = 0) -> Step:
    return lambda s: s.history(WS).append_many(
        [msg(f"needle {text} {i} " + "p" * pad) for i in range(n)])


def clear(s: Store) -> Any:
    return s.history(WS).clear_soft()


def rollover(s: Store) -> Any:
    return s.history(WS).rollover([msg("needle go on")])


def _ranked(s: Store) -> Any:
    return ranked_search(s)


def _scenarios() -> list[Scenario]:
    out = []
    for d in ("full", "normal", "off"):
        out += [
            Scenario(f"append-fresh-{d}", d, lambda s: None, [append("a"), append("b", 1)]),
            Scenario(f"appends-{d}", d, lambda s: grow(s, 5, clear_at=2),
                     [append("c"), append("d", 3), append("e", 1, 300)]),
            Scenario(f"append-at-cap-{d}", d, lambda s: grow(s, 6),
                     [append("big", 1, 300), append("next", 2)], segment_bytes=700),
            Scenario(f"clear-rollover-{d}", d, lambda s: grow(s, 4),
                     [clear, append("f"), rollover, append("g")]),
            Scenario(f"auto-merge-{d}", d, lambda s: grow(s, merge.AUTO_MIN_SEALED - 1),
                     [append("seals", 1, 200), append("after", 1)], segment_bytes=150),
            Scenario(f"five-appends-{d}", d, lambda s: grow(s, 3),
                     [append(f"t{i}", 1 + i % 3, 150 * i) for i in range(5)],
                     segment_bytes=1200),
            Scenario(f"small-segments-{d}", d, lambda s: grow(s, 2),
                     [append("s1", 2, 100), clear, append("s2", 1, 400), rollover],
                     segment_bytes=300),
        ]
        for seg in (500, 2400):
            out.append(Scenario(
                f"mixed-{seg}-{d}", d, lambda s: grow(s, 2),
                [append("m1"), clear, append("m2", 3, 200), rollover, append("m3", 1, 600),
                 append("m4")], segment_bytes=seg))
    out += [
        # The recall index's own writes (SQLite's, seen as opaque files): catch-ups
        # after appends, a rebuild after a new floor, and one after a rewrite.
        Scenario("ranked-catch-up-normal", "normal", lambda s: grow(s, 3),
                 [append("r1", 2, 100), _ranked, append("r2", 1), _ranked],
                 recall=True),
        Scenario("ranked-new-floor-off", "off", lambda s: grow(s, 3),
                 [clear, append("r3", 2, 50), _ranked], recall=True),
        Scenario("ranked-after-reject-full", "full", lambda s: grow(s, 4),
                 [lambda s: s.history(WS).reject(3), _ranked], rewrite=True,
                 recall=True),
        Scenario("reject-off", "off", lambda s: grow(s, 5, clear_at=1),
                 [lambda s: s.history(WS).reject(s.history(WS).snapshot().next_seq - 2)],
                 rewrite=True),
        Scenario("truncate-normal", "normal", lambda s: grow(s, 6, clear_at=1),
                 [lambda s: s.history(WS).truncate_after(9)], rewrite=True),
        Scenario("reject-full", "full", lambda s: grow(s, 5, clear_at=1),
                 [lambda s: s.history(WS).reject(s.history(WS).snapshot().next_seq - 2)],
                 rewrite=True),
        Scenario("truncate-full", "full", lambda s: grow(s, 6, clear_at=1),
                 [lambda s: s.history(WS).truncate_after(9)], rewrite=True),
        Scenario("truncate-early-full", "full", lambda s: grow(s, 8, clear_at=1),
                 [lambda s: s.history(WS).truncate_after(3)], rewrite=True,
                 segment_bytes=600),
        Scenario("reject-two-full", "full", lambda s: grow(s, 8, clear_at=1),
                 [lambda s: s.history(WS).reject([4, 12])], rewrite=True, segment_bytes=600),
        Scenario("purge-many-full", "full", lambda s: grow(s, 8, clear_at=6),
                 [lambda s: s.history(WS).purge_before_floor()], rewrite=True,
                 segment_bytes=600),
        Scenario("rewind-full", "full", lambda s: grow(s, 6, clear_at=1),
                 [lambda s: s.history(WS).rewind(to=9)], rewrite=True, segment_bytes=600),
        Scenario("rewind-rollover-off", "off", _rolled,
                 [lambda s: s.history(WS).rewind(to=8)], rewrite=True, segment_bytes=600),
        Scenario("purge-full", "full", lambda s: grow(s, 6, clear_at=3),
                 [lambda s: s.history(WS).purge_before_floor()], rewrite=True),
        Scenario("repair-full", "full", _damaged, [lambda s: repair(s.history(WS))],
                 rewrite=True, damaged=True),
        Scenario("import-legacy-full", "full", lambda s: None, [_legacy], rewrite=True),
        Scenario("delete-full", "full", lambda s: grow(s, 3), [lambda s: s.delete(WS)],
                 rewrite=True, deletes=True),
    ]
    return out


SCENARIOS = _scenarios()


def lines(store: Store) -> list[bytes] | None:
    h = store.history(WS)
    try:
        if not h.exists():
            return []
    except DeletePending:  # a delete the crash interrupted: reads say so until it is finished
        return []
    return [r.line for r in h.rows()]


def floor_of(rows: list[dict[str, Any]]) -> int:
    floor = 0
    for i, row in enumerate(rows):
        if row.get("kind") == "reset":
            nxt = rows[i + 1] if i + 1 < len(rows) else None
            if classify_reset(row, nxt) == "manual":
                floor = row["seq"]
    return floor


def whole_batches(rows: list[dict[str, Any]]) -> bool:
    i = 0
    while i < len(rows):
        b = rows[i].get("batch") or {}
        n = b.get("n", 1)
        run = rows[i : i + n]
        if len(run) != n or any((r.get("batch") or {}).get("i") != k for k, r in enumerate(run)):
            return False
        i += n
    seqs = [r["seq"] for r in rows]
    return seqs == list(range(seqs[0], seqs[0] + len(seqs))) if seqs else True


WORKERS = 2
_CURRENT: Explorer | None = None


def _check_indexes(indexes: list[int]) -> list[str]:
    assert _CURRENT is not None
    return [f for f in (_CURRENT.check_one(i) for i in indexes) if f is not None]


class Explorer:
    def __init__(self, base: Path, sc: Scenario) -> None:
        self.base = base
        self.sc = sc
        live = base / "live"
        live.mkdir(parents=True)
        setup_store = Store(live, durability="off", segment_bytes=sc.segment_bytes)
        sc.setup(setup_store)
        self.cursor = None
        if not sc.damaged and setup_store.history(WS).exists():
            page = setup_store.history(WS).session_history().search("needle", limit=2)
            self.cursor = page["cursor"]
        if setup_store.history(WS).exists():
            ranked_search(setup_store)  # the states start with this (older) recall index
        self.conts = {self._continue(setup_store)}
        self.sealed_before: set[bytes] = set()  # rows of the segments below the active one
        if not sc.damaged and setup_store.history(WS).exists():
            newest = max(r.segment for r in setup_store.history(WS).rows())
            self.sealed_before = {r.line for r in setup_store.history(WS).rows()
                                  if r.segment < newest}
        self.states = [None if sc.damaged else lines(setup_store)]
        store = Store(live, durability=sc.durability, segment_bytes=sc.segment_bytes)
        steps = [lambda st=st: st(store) for st in sc.steps]

        def step_and_keep(i: int) -> Callable[[], Any]:
            def run() -> None:
                steps[i]()
                self.states.append(lines(Store(live, durability="off")))
            return run

        self.snapshot, self.ops, self.ends = record(
            str(live), [step_and_keep(i) for i in range(len(steps))],
            opaque=(ffmt.RECALL_NAME,) if sc.recall else ())
        self.conts.add(self._continue(Store(live, durability="off")))
        self.ahead: dict[str, bytes] = {}
        if Store(live, durability="off").history(WS).exists():
            ranked_search(Store(live, durability="off"))  # the index of the run's end
            wsdir = live / WS
            self.ahead = {n: (wsdir / n).read_bytes() for n in os.listdir(wsdir)
                          if n.startswith(ffmt.RECALL_NAME)}

    def _continue(self, store: Store) -> Any:
        if self.cursor is None or not store.history(WS).exists():
            return None
        try:
            page = store.history(WS).session_history().search("needle", cursor=self.cursor,
                                                                limit=2)
        except CursorExpired:
            return "expired"
        return tuple(item["seq"] for item in page["items"])

    def run(self) -> tuple[int, int]:
        """Build every plan's state, keep the distinct ones, and check them on
        two forked workers (each state in its own directory)."""
        unique: dict[str, tuple[Plan, Tree]] = {}
        plans = 0
        for plan in crash_states(self.ops):
            plans += 1
            tree = build(self.snapshot, self.ops, plan)
            unique.setdefault(tree.digest, (plan, tree))
        self.todo = list(unique.values())
        global _CURRENT
        _CURRENT = self
        chunks = [list(range(i, len(self.todo), WORKERS)) for i in range(WORKERS)]
        with multiprocessing.get_context("fork").Pool(WORKERS) as pool:
            failures = [f for part in pool.map(_check_indexes, chunks) for f in part]
        assert not failures, f"{len(failures)} of {len(self.todo)} states fail; first: " \
            + failures[0]
        return len(self.todo), plans

    def check_one(self, i: int) -> str | None:
        plan, tree = self.todo[i]
        root = self.base / f"state-{i}"
        tree.write(str(root))
        done = sum(1 for e in self.ends if e <= plan.k)  # steps that had returned
        try:
            self.check_state(root, done, plan.label(),
                             recall=self.sc.recall or i % RECALL_EVERY == 0)
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
        finally:
            shutil.rmtree(root)
        return None

    def allowed(self, done: int) -> list[list[bytes]]:
        """What the log may hold when ``done`` steps had returned (docs/
        explanation/durability.md): full keeps every returned step; normal may lose the
        newest batches of the active segment, whole; a rewrite is atomic."""
        acked, next_ = self.states[done], self.states[min(done + 1, len(self.states) - 1)]
        if self.sc.durability == "full" or self.sc.rewrite:
            return [x for x in (acked, next_) if x is not None]
        return [x for x in self.states if x is not None]

    def check_state(self, root: Path, done: int, where: str, recall: bool = True) -> None:
        sc = self.sc
        where = f"{sc.name} {where} (steps returned: {done})"
        store = Store(root, durability="off", segment_bytes=sc.segment_bytes)
        h = store.history(WS)
        try:
            got = lines(store)
        except HistoryDamaged as exc:
            assert sc.durability == "off" or sc.damaged, \
                f"{where}: unreadable after power loss: {exc}"
            got = None
        if got is not None and sc.durability != "off" and not sc.damaged:
            allowed = self.allowed(done)
            if sc.durability == "normal" and not sc.rewrite:
                final = self.states[-1] or []
                ok = got == final[: len(got)] and len(got) >= len(self.states[0] or []) \
                    - (len(self.states[0] or []) - len(got))
            else:
                ok = got in allowed
            assert ok, f"{where}: {len(got)} rows, expected one of {[len(a) for a in allowed]}"
        blocked = False
        if got:
            rows = [r.to_dict() for r in h.rows()]
            # At "off" a lost active segment may leave a gap (docs/explanation/durability.md).
            assert sc.durability == "off" or whole_batches(rows), f"{where}: torn batch or gap"
            floor = floor_of(rows)
            try:
                view = h.provider_view()
            except HistoryDamaged as exc:
                # A clear whose batch the power took while its receipt survived
                # (normal, off): the receipt records a floor the log lost, so
                # reads fail closed until repair puts a manual reset there.
                assert sc.durability != "full" and "privacy floor" in str(exc), \
                    f"{where}: view refused: {exc}"
                blocked = True
                view = []
            assert all(r.seq > floor for r in view), f"{where}: floor in view"
            found = h.session_history().search("needle", limit=25)
            if blocked:
                assert found.get("error", {}).get("code") == "history_unavailable", \
                    f"{where}: search served a history whose floor was lost: {found}"
                found = {"items": []}
            assert "items" in found, f"{where}: search failed: {found}"
            assert all(item["seq"] > floor for item in found["items"]), f"{where}: floor found"
            if self.cursor is not None and not blocked:
                cont = self._continue(store)
                assert cont == "expired" or cont in self.conts, f"{where}: cursor gave {cont}"
            if recall:
                self.check_recall(store, root / WS, where)
        if sc.deletes and os.path.exists(root / f".{WS}.deleting"):
            assert store.delete(WS) in (True, False)  # finishing it is the documented recovery
            assert h.append(msg("again")).seqs == [1], f"{where}: recreate after delete"
            return
        if not h.exists():
            assert sc.deletes or not (self.states[done] or []), f"{where}: history vanished"
            return
        report = check(h)
        fixed = repair(h)
        assert fixed.consistent, f"{where}: repair left damage: {fixed.text()}"
        after_repair = lines(store)
        assert after_repair is not None
        if got is not None and report.ok:
            assert after_repair == got, f"{where}: repair changed a consistent history"
        elif got is not None:
            assert set(got) <= set(after_repair), f"{where}: repair lost readable rows"
        if blocked:  # repair put the lost floor back: reads work and hold it
            repaired = [r.to_dict() for r in h.rows()]
            floor = max(floor_of(repaired), floor)
            assert all(r.seq > floor for r in h.provider_view()), f"{where}: floor in view"
            found = h.session_history().search("needle", limit=25)
            assert all(item["seq"] > floor for item in found["items"]), f"{where}: floor found"
        if fixed.changed:  # an unchanged first repair would only be repeated
            again = repair(h)
            assert not again.changed, f"{where}: a second repair changed something"
        if not sc.rewrite:  # rows of sealed segments survive any append at any level
            assert self.sealed_before <= set(after_repair), f"{where}: lost a sealed row"
        last = max((r.seq for r in h.rows()), default=0)
        r = h.append(msg("after the crash"))
        # next_seq never decreases (DESIGN.md 2): seqs that a lost, unsynced batch
        # held are skipped, across the new epoch the writer takes.
        assert r.seqs[0] > last, f"{where}: next append got {r.seqs} after seq {last}"


def ranked_search(store: Store) -> Any:
    tool = store.history(WS).session_history()
    try:
        return json.loads(tool.call({"action": "search", "query": "needle question answer",
                                     "mode": "ranked", "current": True, "limit": 25}))
    finally:
        if tool.reader._recall is not None:
            tool.reader._recall.close()


def _drop_recall(wsdir: Path) -> None:
    for name in os.listdir(wsdir):
        if name.startswith(ffmt.RECALL_NAME):
            os.unlink(wsdir / name)


def _check_recall(self: Explorer, store: Store, wsdir: Path, where: str) -> None:
    """The state's own recall index (behind) and the run's last one (ahead)
    answer as a fresh one does."""
    own = ranked_search(store)
    _drop_recall(wsdir)
    fresh = ranked_search(store)
    assert own == fresh, f"{where}: a stale recall index answered {own}, a fresh one {fresh}"
    if self.ahead:
        _drop_recall(wsdir)
        for name, data in self.ahead.items():
            (wsdir / name).write_bytes(data)
        ahead = ranked_search(store)
        assert ahead == fresh, f"{where}: the run's last recall index answered {ahead}, " \
            f"a fresh one {fresh}"


Explorer.check_recall = _check_recall  # type: ignore[attr-defined]


@pytest.mark.slow
@pytest.mark.parametrize("sc", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_every_crash_state(sc: Scenario, tmp_path: Path) -> None:
    t0 = time.monotonic()
    # The states on a tmpfs when there is one: each is written, opened, repaired
    # and appended to (fsyncs, SQLite's among them), and what a state holds is the
    # model's (tests/helpers/crashfs.py), not the device's.
    base = fast_scratch(tmp_path)
    try:
        states, plans = Explorer(base, sc).run()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    TOTALS["states"] += states
    TOTALS["plans"] += plans
    TOTALS["scenarios"] += 1
    print(f"\n{sc.name}: {states} distinct crash states of {plans} plans in "
          f"{time.monotonic() - t0:.1f}s; running total {TOTALS}")
    assert states > 1
