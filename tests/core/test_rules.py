"""The transcript rules every engine applies (``ledger.core.rules``), as pure
functions: the boundary fold, epochs, and what reject, truncate and purge
touch and refuse. Fast: no engine, no file."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.core import rules
from ledger.core.errors import RewriteRefused
from ledger.core.format import files as ffmt
from ledger.core.format import rows as fmt
from ledger.core.rows import prepare_batch
from ledger.core.windows import Boundary


def batch(rows: list[dict[str, Any]], first_seq: int, bid: str) -> list[dict[str, Any]]:
    """Rows as an engine stores them: seqs, batch fields, checksum."""
    stored, _ = prepare_batch(rows, first_seq, bid, 1 << 20, internal=True)
    return stored


def text(t: str, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "parts": [{"type": "text", "text": t}], **extra}


def reset(reason: str) -> dict[str, Any]:
    return {"kind": "reset", "role": "system", "parts": [], "reset": {"reason": reason}}


LEAD_IN = {"kind": "lead_in", "role": "system", "parts": [{"type": "text", "text": "go"}],
           "meta": {}}


# --- the boundary fold ------------------------------------------------------------


def test_batch_bounds_classify_each_reset_at_its_position() -> None:
    rows = batch([reset("rollover"), LEAD_IN, text("carried")], 7, "b1")
    bounds = rules.batch_bounds(rows, [(3, 100 * i) for i in range(len(rows))])
    assert bounds == [Boundary(7, 3, 0, "rollover")]
    lone = batch([reset("rollover")], 1, "b2")  # no lead-in behind it: a manual reset
    assert rules.batch_bounds(lone, [(1, 0)]) == [Boundary(1, 1, 0, "manual")]
    assert rules.batch_bounds(batch([text("x")], 1, "b3"), [(1, 0)]) == []


reasons = st.sampled_from(["manual", "rollover", "compaction"])


@given(st.lists(st.tuples(st.integers(1, 10**6), reasons), max_size=20),
       st.booleans(), st.booleans())
def test_the_fold_keeps_the_newest_boundary_and_the_newest_manual_one(
    spec: list[tuple[int, str]], had_window: bool, had_floor: bool
) -> None:
    bounds = [Boundary(seq, seq, 0, reason) for seq, reason in spec]
    window0 = Boundary(0, 0, 0, "rollover") if had_window else None
    floor0 = Boundary(0, 0, 0, "manual") if had_floor else None
    window, floor = rules.fold(window0, floor0, bounds)
    assert window == (bounds[-1] if bounds else window0)
    manual = [b for b in bounds if b.reason == "manual"]
    assert floor == (manual[-1] if manual else floor0)


# --- epochs ----------------------------------------------------------------------------


def test_a_new_epoch_is_never_zero_nor_the_old_one(monkeypatch: pytest.MonkeyPatch) -> None:
    draws = iter([0, 42, 42, 7])
    monkeypatch.setattr(rules.secrets, "randbits", lambda bits: next(draws))
    assert rules.new_epoch(42) == 7  # 0 and the old epoch are drawn again


@given(st.integers(0, 2**53 - 1))
def test_epochs_fit_in_53_bits(old: int) -> None:
    epoch = rules.new_epoch(old)
    assert 0 < epoch < 2**53 and epoch != old


# --- reject -------------------------------------------------------------------------------


def test_a_request_takes_the_synthetic_rows_it_owns_and_no_others() -> None:
    rows: list[dict[str, Any] | None] = [
        *batch([text("earlier batch", meta={"synthetic": True})], 1, "a"),
        *batch([text("not owned"), text("synthetic", meta={"synthetic": True}),
                text("owned", meta={"owner": "req"}), text("request", id="req")], 2, "b"),
    ]
    assert rules.owned_prelude(rows, 4) == [2, 3]
    assert rules.reject_targets(rows, [4, 1]) == [2, 3, 4, 1]
    assert rules.reject_targets(rows, [4, 4]) == [2, 3, 4]  # each row once
    rows[2] = None  # an unreadable line ends the run
    assert rules.owned_prelude(rows, 4) == [3]


def test_rejectable_refuses_resets_and_other_kinds_and_skips_husks() -> None:
    req = batch([text("question")], 5, "b")[0]
    line = fmt.encode_line(req)
    assert rules.rejectable("ws", line, req) is True
    r = batch([reset("manual")], 6, "c")[0]
    with pytest.raises(RewriteRefused, match="seq 6 at the end is a reset row"):
        rules.rejectable("ws", fmt.encode_line(r), r, " at the end")
    # a duplicate "kind" key that a last-wins decoder hides is a reset too
    sneaky = fmt.encode_line(req).replace(b'{"seq"', b'{"kind":"reset","seq"', 1)
    with pytest.raises(RewriteRefused, match="reset row"):
        rules.rejectable("ws", sneaky, req)
    warning = {**req, "kind": "warning"}
    with pytest.raises(RewriteRefused, match="'warning' row"):
        rules.rejectable("ws", fmt.encode_line(warning), warning)
    husk = {**req, "role": "assistant", "parts": [], "partial": False,
            "meta": {"quarantine": {"v": 1, "row": {"role": "user"}}}}
    assert rules.rejectable("ws", fmt.encode_line(husk), husk) is False


@pytest.mark.parametrize("bad", [[], [True], ["3"], [1.0], set()])
def test_reject_needs_integer_seqs(bad: Any) -> None:
    with pytest.raises(RewriteRefused, match="integer seqs"):
        rules.reject_seqs(bad)
    assert rules.reject_seqs(3) == {3} and rules.reject_seqs([1, 2, 2]) == {1, 2}


# --- truncate -------------------------------------------------------------------------------


def test_truncate_never_splits_a_batch_nor_drops_the_floor() -> None:
    rows = batch([text("a"), text("b"), text("c")], 10, "b3")
    with pytest.raises(RewriteRefused, match=r"row 2 of 3 .* after seq 12 .* after seq 9"):
        rules.check_truncate("ws", 11, rows[1], (11, 0), None)
    rules.check_truncate("ws", 12, rows[2], (12, 0), None)
    floor = Boundary(13, 13, 0, "manual")
    with pytest.raises(RewriteRefused, match=r"privacy floor .* seq 13"):
        rules.check_truncate("ws", 12, rows[2], (12, 0), floor)
    rules.check_truncate("ws", 12, rows[2], (12, 0), Boundary(9, 9, 0, "manual"))
    # positions, not seqs, decide: the file engine's (segment, offset)
    rules.check_truncate("ws", 12, rows[2], (4, 500), Boundary(13, 4, 200, "manual"))
    unreadable = Boundary(ffmt.FLOOR_UNREADABLE, 5, 0, "manual", readable=False)
    rules.check_truncate("ws", 12, rows[2], (4, 500), unreadable)  # kept in the log anyway
    with pytest.raises(RewriteRefused, match="integer seq"):
        rules.truncate_seq(True)


# --- purge -------------------------------------------------------------------------------------


@given(st.lists(st.integers(1, 4), min_size=1, max_size=8), st.data())
def test_purge_keeps_the_floors_batch_unless_the_floor_is_alone(
    sizes: list[int], data: st.DataObject
) -> None:
    rows: list[dict[str, Any] | None] = []
    starts = []
    for k, n in enumerate(sizes):
        starts.append(len(rows))
        rows += batch([text(f"r{k}.{i}") for i in range(n)], len(rows) + 1, f"b{k}")
    floor_index = data.draw(st.integers(0, len(rows) - 1))
    k = max(i for i, s in enumerate(starts) if s <= floor_index)
    cut = rules.purge_cut(rows[: floor_index + 1], floor_index)
    assert cut == (floor_index + 1 if sizes[k] == 1 else starts[k])
    rows[floor_index] = None  # an unreadable floor is kept: it may be a reset
    assert rules.purge_cut(rows[: floor_index + 1], floor_index) == floor_index


def test_results_have_one_shape_on_every_engine() -> None:
    assert rules.reject_result([3, 1], [2, 2], 9).to_dict() == {
        "op": "reject", "rejected": [1, 3], "already": [2], "epoch": 9, "recovered": None}
    assert list(rules.TruncateResult(4, 1, 10, 0, [], 9).to_dict()) == [
        "op", "seq", "removed_rows", "removed_bytes", "kept_reset_candidates", "quarantine",
        "epoch", "recovered"]
    assert rules.PurgeResult(0, 0, 0, None, 9).to_dict() == {
        "op": "purge_before_floor", "purged_rows": 0, "purged_bytes": 0,
        "kept_reset_candidates": 0, "floor": None, "epoch": 9, "recovered": None}
    where = rules.FloorAt(3, "seg-00000001.jsonl", 0)
    assert where.to_dict() == {"seq": 3, "segment": "seg-00000001.jsonl", "offset": 0}
    assert rules.FloorAt(3, None, None, False).to_dict()["damaged"] is False
    assert "nothing was rejected" in str(rules.no_row("ws", [4], "rejected"))


def test_results_still_read_by_key_as_0_1_returned_them() -> None:
    r = rules.reject_result([3, 1], [2, 2], 9)
    assert r.rejected == [1, 3] and r["rejected"] == [1, 3] and r["op"] == "reject"
    with pytest.raises(KeyError):
        r["no such key"]
    with pytest.raises(AttributeError):  # still frozen: reading by key is no way to write
        r.rejected = [5]  # type: ignore[misc]
