"""Power loss during a fork, explored (the persistence model of
tests/helpers/crashfs.py; rewinds are scenarios of test_crash_states.py).

For every distinct crash state of ``History.fork`` -- at a segment's end (every
segment hard-linked, the event a segment of its own) and inside a segment
(its prefix copied), at each durability level of the store -- a new process
opening the root finds:

- the source exactly as before, byte for byte, readable, writable, checking
  clean;
- the fork either absent (not listed, not readable) or whole: the source's
  rows up to the fork point byte for byte, then its origin event, its origin
  reported, ``check`` clean, and an append taking the seq after the event.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ledger import Store
from recovery.check import check
from tests.helpers import msg
from tests.helpers.crashfs import build, crash_states, record

SRC, NEW = "src", "fork"
SEGMENT = 600


def _lines(store: Store, ws: str) -> list[bytes]:
    return [r.line for r in store.history(ws).rows()]


@pytest.mark.slow
@pytest.mark.parametrize("durability", ["full", "off"])
@pytest.mark.parametrize("where", ["segment-end", "inside"])
def test_every_crash_state_of_a_fork(tmp_path: Path, durability: str, where: str) -> None:
    live = tmp_path / "live"
    setup = Store(live, durability="off", segment_bytes=SEGMENT)
    h = setup.history(SRC)
    h.append(msg("secret"))
    h.clear_soft()
    for i in range(6):
        h.append_many([msg(f"q{i} " + "x" * 40), msg(f"a{i}", "assistant")])
    rows = list(h.rows())
    seg_ends = {r.seq for r in rows if r.seq == max(x.seq for x in rows
                                                    if x.segment == r.segment)}
    batch_ends = {r.seq for r in rows if r.batch["i"] == r.batch["n"] - 1 and r.seq > 2}
    pick = sorted(batch_ends & seg_ends if where == "segment-end" else batch_ends - seg_ends)
    assert pick, f"no fork point at a {where} in this history"
    at = pick[len(pick) // 2]
    source_before = _lines(setup, SRC)
    store = Store(live, durability=durability, segment_bytes=SEGMENT)
    snapshot, ops, _ = record(str(live), [lambda: store.history(SRC).fork(NEW, at=at)])
    assert any(op.kind == "link" for op in ops)  # shared, not copied
    assert [op.kind for op in ops].count("sync") == 1  # one flush (syncfs), seen by the model
    expected = _lines(Store(live, durability="off"), NEW)
    assert expected[:at] == source_before[:at] and len(expected) == at + 1
    seen: set[str] = set()
    states = 0
    for i, plan in enumerate(crash_states(ops)):
        tree = build(snapshot, ops, plan)
        if tree.digest in seen:
            continue
        seen.add(tree.digest)
        states += 1
        root = tmp_path / f"state-{i}"
        tree.write(str(root))
        where = f"fork at {at} ({durability}) {plan.label()}"
        s = Store(root, durability="off", segment_bytes=SEGMENT)
        assert _lines(s, SRC) == source_before, f"{where}: the source changed"
        assert check(s.history(SRC)).ok, f"{where}: the source does not check clean"
        if NEW in s.workspaces():
            got = _lines(s, NEW)
            assert got == expected, f"{where}: a partial fork ({len(got)} rows)"
            fork = s.history(NEW)
            assert fork.origin is not None and fork.origin.seq == at, where
            assert check(fork).ok, f"{where}: the fork does not check clean"
            assert fork.append(msg("on the fork")).seqs == [at + 2], where
        else:
            assert not s.history(NEW).exists(), f"{where}: an unlisted fork directory"
            assert s.branches(SRC) == [], where
        assert s.history(SRC).append(msg("on the source")).seqs == [len(source_before) + 1]
        assert _lines(s, NEW)[:at] == source_before[:at] if NEW in s.workspaces() else True
        shutil.rmtree(root)
    assert states > 2
