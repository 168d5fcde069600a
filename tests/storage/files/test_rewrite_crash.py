"""A crash at every step of the rewrite transaction (truncate, purge, reject):
an injected error, and a real SIGKILL of a forked writer. Afterwards the
history is exactly the old one or exactly the new one -- rolled back before
the last segment is in place, committed after -- and checks clean once the
next writer (here ``repair``, and ``recover_if_marked`` as appends call it)
has settled the marker."""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ledger.core.errors import CommitFailed
from ledger.storage.files import rewrite
from ledger.transcript.history import History
from ledger.transcript.store import Store
from recovery.check import check
from recovery.repair import repair
from tests.helpers.recovery import build, seg_files

Op = Callable[[History], Any]


def _truncate(h: History) -> Any:
    rows = [r.to_dict() for r in h.rows()]
    return rewrite.truncate_after(h, rows[6]["seq"])  # rows[6]: the newest floor


def _purge(h: History) -> Any:
    return rewrite.purge_before_floor(h)


def _reject(h: History) -> Any:
    rows = [r.to_dict() for r in h.rows()]
    targets = [x["seq"] for x in rows if x["kind"] == "message" and x["role"] == "user"]
    return rewrite.reject(h, [targets[0], targets[-1]])


OPS = {"truncate_after": _truncate, "purge_before_floor": _purge, "reject": _reject}


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("base")
    build(root, segment_bytes=700)
    return root


def _fresh(base: Path, dest: Path) -> History:
    shutil.copytree(base, dest)
    h = Store(dest, segment_bytes=700, durability="off").history("ws")
    repair(h)  # re-baseline the copy's receipt, so the op starts verified
    return h


def _steps(base: Path, tmp: Path, op: Op) -> tuple[list[str], dict[str, bytes], dict[str, bytes]]:
    h = _fresh(base, tmp / "probe")
    old = seg_files(Path(h.engine.path))
    steps: list[str] = []
    rewrite.FAULT_HOOK = steps.append
    try:
        op(h)
    finally:
        rewrite.FAULT_HOOK = None
    return steps, old, seg_files(Path(h.engine.path))


def _expect_new(step: str, steps: list[str]) -> bool:
    segments = [s for s in steps if s.startswith("segment-")]
    return steps.index(step) >= steps.index(segments[-1])


def _settled_state(h: History) -> dict[str, bytes]:
    rep = repair(h)
    assert rep.exit_code() == 0, rep.text()
    assert rep.after is not None and rep.after.ok
    assert not list(Path(h.engine.path).glob("*.truncate"))
    assert not (Path(h.engine.path) / rewrite.MARKER_NAME).exists()
    return seg_files(Path(h.engine.path))


@pytest.mark.parametrize("name", sorted(OPS))
def test_injected_error_at_every_step(base: Path, tmp_path: Path, name: str) -> None:
    op = OPS[name]
    steps, old, new = _steps(base, tmp_path, op)
    assert old != new
    assert "marker" in steps and any(s.startswith("segment-") for s in steps)
    inside = steps[: steps.index("marker-removed") + 1]
    for k, step in enumerate(inside):
        h = _fresh(base, tmp_path / f"e{k}")

        def boom(s: str, step: str = step) -> None:
            if s == step:
                raise OSError(f"injected at {step}")

        rewrite.FAULT_HOOK = boom
        state_new = _expect_new(step, steps)
        try:
            if state_new:
                op(h)  # every segment is in place: the rewrite has committed
            else:
                with pytest.raises(CommitFailed):
                    op(h)
        finally:
            rewrite.FAULT_HOOK = None
        # The failing writer settled its own marker already.
        assert not (Path(h.engine.path) / rewrite.MARKER_NAME).exists()
        after = seg_files(Path(h.engine.path))
        assert after == (new if state_new else old), step
        assert _settled_state(h) == after


@pytest.mark.parametrize("name", sorted(OPS))
def test_sigkill_at_every_step(base: Path, tmp_path: Path, name: str) -> None:
    op = OPS[name]
    steps, old, new = _steps(base, tmp_path, op)
    for k, step in enumerate(steps):
        h = _fresh(base, tmp_path / f"k{k}")
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child dies by SIGKILL
            def die(s: str, step: str = step) -> None:
                if s == step:
                    os.kill(os.getpid(), signal.SIGKILL)

            rewrite.FAULT_HOOK = die
            try:
                op(Store(h.store.root, segment_bytes=700, durability="off").history("ws"))
            finally:
                os._exit(3)
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, step
        if step in ("tombstones", "marker") or step.startswith("segment-"):
            res = rewrite.plan_recovery(h.engine.path)
            assert res is not None
        # What the next append does first (ledger.transcript.history calls it under the lock):
        rewrite.recover_if_marked(h.engine.path, "off")
        if step in ("pending", "quarantined", "tombstones", "marker"):
            expect = old
        elif step.startswith("segment-"):
            expect = new if _expect_new(step, steps) else old
        else:
            expect = new
        assert _settled_state(h) == expect, step
        assert check(h).ok
