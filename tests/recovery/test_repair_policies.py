"""``repair``: policies, dry runs, resets in place of removed resets, receipts,
stray temp files and the CLI's exit codes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from msgspec.structs import replace

from ledger.cli import main
from ledger.core.format import files as ffmt
from ledger.storage.files import segments as segs
from ledger.storage.files.receipt import read_receipt, write_receipt
from ledger.storage.files.retention import read_manifest
from ledger.transcript.store import Store
from recovery.check import check
from recovery.repair import repair
from tests.helpers import msg
from tests.helpers.recovery import all_files, build, live_lines, quarantined, seg_files


def _segs(ws: Path) -> list[Path]:
    return [Path(segs.segment_path(str(ws), n)) for n in segs.list_segments(str(ws))]


def _flip_middle(ws: Path) -> Path:
    """Flip a byte in the first line of the second segment (mid-log damage)."""
    seg = _segs(ws)[1]
    data = bytearray(seg.read_bytes())
    data[20] ^= 0x01
    seg.write_bytes(bytes(data))
    return seg


def test_tail_cuts_a_torn_tail(tmp_path: Path) -> None:
    b = build(tmp_path / "s", segment_bytes=700)
    last = _segs(b.path)[-1]
    data = last.read_bytes()
    # The torn line still shows its kind: it cannot have been a reset.
    torn = b'{"seq":99,"id":"torn","kind":"message","ro'
    last.write_bytes(data + torn)
    rep = repair(b.history, policy="tail")
    assert rep.exit_code() == 0 and rep.changed and rep.after is not None and rep.after.ok
    assert last.read_bytes() == data
    assert [(s, d) for s, _, d in quarantined(b.path)] == [(last.name, torn)]


def test_tail_cut_before_the_kind_leaves_a_manual_reset(tmp_path: Path) -> None:
    """A line cut before its kind may have been a reset (fail closed): the
    cut goes to quarantine and a manual reset takes its place."""
    b = build(tmp_path / "s", segment_bytes=700)
    last = _segs(b.path)[-1]
    data = last.read_bytes()
    last.write_bytes(data + b'{"seq":99,"id":"torn')
    rep = repair(b.history, policy="tail")
    assert rep.exit_code() == 0 and rep.changed and rep.after is not None and rep.after.ok
    entry = quarantined(b.path)
    assert [(s, d) for s, _, d in entry] == [(last.name, b'{"seq":99,"id":"torn')]
    assert last.read_bytes().startswith(data)
    rows = [r.to_dict() for r in b.history.rows()]
    assert rows[-1]["kind"] == "reset" and rows[-1]["reset"] == {"reason": "manual"}
    assert rows[-1]["meta"]["recovered"].startswith("q")


def test_tail_refuses_damage_in_the_middle(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    b = build(tmp_path / "s", segment_bytes=700)
    _flip_middle(b.path)
    before = all_files(b.path)
    rep = repair(b.history, policy="tail")
    assert rep.refused and "not a torn tail" in rep.refused and rep.exit_code() == 1
    assert all_files(b.path) == before
    assert main(["--root", str(tmp_path / "s"), "repair", "ws", "--policy", "tail"]) == 1
    assert "refused" in capsys.readouterr().out


def test_strict_refuses_damage_and_accepts_clean(tmp_path: Path) -> None:
    b = build(tmp_path / "s", segment_bytes=700)
    clean = repair(b.history, policy="strict")
    assert clean.exit_code() == 0 and not clean.changed
    _flip_middle(b.path)
    before = all_files(b.path)
    rep = repair(b.history, policy="strict")
    assert rep.refused and rep.exit_code() == 1
    assert all_files(b.path) == before


def test_prefix_keeps_what_precedes_the_first_damage(tmp_path: Path) -> None:
    b = build(tmp_path / "s", segment_bytes=700)
    names = [p.name for p in _segs(b.path)]
    _flip_middle(b.path)
    damaged = seg_files(b.path)
    rep = repair(b.history, policy="prefix")
    assert rep.exit_code() == 0 and rep.after is not None and rep.after.ok
    after = seg_files(b.path)
    # Everything before the damaged segment is untouched; later segments are gone.
    assert after[names[0]] == damaged[names[0]]
    assert set(after) <= {names[0], names[1]}
    q = {(src, off): data for src, off, data in quarantined(b.path)}
    for name in names[2:]:
        assert q[(name, 0)] == damaged[name]
    # Later segments held resets (a manual clear, a rollover): a manual reset
    # seals the cut, naming every quarantine entry.
    rows = [row for _, row in live_lines(b.path)]
    assert rows[-1]["kind"] == "reset" and rows[-1]["reset"]["reason"] == "manual"
    rec = rows[-1]["meta"]["recovered"]
    assert set(rec) == {e.entry for e in read_manifest(str(b.path))}


def test_dry_run_writes_nothing_and_predicts_the_repair(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    b = build(tmp_path / "s", segment_bytes=700)
    _flip_middle(b.path)
    before = all_files(b.path)
    dry = repair(b.history, dry_run=True)
    assert dry.changed and dry.exit_code() == 1
    assert all_files(b.path) == before
    assert not (b.path / ffmt.QUARANTINE_DIR).exists()
    code = main(["--root", str(tmp_path / "s"), "repair", "ws", "--dry-run", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and doc["dry_run"] and doc["changed"]
    real = repair(b.history)
    assert [(r.segment, r.offset, r.length) for r in dry.removals] == [
        (r.segment, r.offset, r.length) for r in real.removals]
    assert repair(b.history, dry_run=True).exit_code() == 0


def test_half_written_rollover_is_removed_whole_and_sealed(tmp_path: Path) -> None:
    store = Store(tmp_path / "s", durability="off")
    h = store.history("ws")
    h.append_many([msg("before"), msg("answer", "assistant")])
    r = h.rollover([msg("queued trigger")], lead_in="new window")
    seg = _segs(Path(h.engine.path))[-1]
    data = seg.read_bytes()
    seg.write_bytes(data[: data.rindex(b"queued")])  # the trigger row is torn
    rep = repair(h)
    assert rep.exit_code() == 0
    rows = [row.to_dict() for row in h.rows()]
    assert [x["kind"] for x in rows] == ["message", "message", "reset"]
    reset = rows[-1]
    assert reset["reset"] == {"reason": "manual"} and reset["seq"] == r.seqs[0]
    entry = reset["meta"]["recovered"]
    (q,) = read_manifest(h.engine.path)
    assert q.entry == entry and "incomplete batch" in q.reason
    entry_path = Path(h.engine.path) / ffmt.QUARANTINE_DIR / f"{entry}.bin"
    assert b'"kind":"lead_in"' in entry_path.read_bytes()
    assert h.provider_view() == []  # the trigger is not resurrected, no lead-in
    assert h.snapshot().floor is not None and h.snapshot().floor.seq == r.seqs[0]
    nxt = h.append(msg("next"))
    assert nxt.seqs[0] > r.seqs[-1]


def test_unreadable_reset_candidate_is_replaced_by_a_manual_reset(tmp_path: Path) -> None:
    store = Store(tmp_path / "s", durability="off")
    h = store.history("ws")
    h.append(msg("secret"))
    c = h.clear_soft()
    h.append(msg("after"))
    seg = _segs(Path(h.engine.path))[-1]
    data = seg.read_bytes()
    at = data.index(b'"kind":"reset"')
    broken = data[:at] + b'"kind" : "\\u0072eset",' + data[at + len(b'"kind":"reset",'):]
    seg.write_bytes(broken)
    assert not check(h).ok
    rep = repair(h)
    assert rep.exit_code() == 0
    rows = [row.to_dict() for row in h.rows()]
    assert [x["kind"] for x in rows] == ["message", "reset", "message"]
    assert rows[1]["seq"] == c.seqs[0] and "recovered" in rows[1]["meta"]
    floor = h.snapshot().floor
    assert floor is not None and floor.seq == c.seqs[0]
    hits = json.loads(h.session_history().call({"action": "search", "query": "secret"}))
    assert hits["items"] == []


def test_pending_receipt_is_rebaselined_without_touching_segments(tmp_path: Path) -> None:
    b = build(tmp_path / "s", segment_bytes=700)
    receipt = read_receipt(b.history.engine.path)
    assert receipt is not None
    write_receipt(b.history.engine.path, replace(receipt, state=ffmt.PENDING))
    before = seg_files(b.path)
    rep = repair(b.history)
    assert rep.changed and rep.exit_code() == 0 and rep.receipt == "re-baselined"
    assert seg_files(b.path) == before
    after = read_receipt(b.history.engine.path)
    assert after is not None and after.stable and after.epoch != receipt.epoch
    assert check(b.history).findings == []


def test_stray_temp_files_go_to_quarantine(tmp_path: Path) -> None:
    b = build(tmp_path / "s")
    tmp = b.path / f"{ffmt.TEMP_PREFIX}4242-abcdef"
    tmp.write_bytes(b"uncommitted bytes")
    rep = repair(b.history)
    assert rep.temps == [tmp.name] and not tmp.exists()
    assert [(s, d) for s, _, d in quarantined(b.path)] == [(tmp.name, b"uncommitted bytes")]
    assert check(b.history).findings == []


def test_missing_format_is_written(tmp_path: Path) -> None:
    b = build(tmp_path / "s")
    os.unlink(b.path / ffmt.FORMAT_NAME)
    rep = repair(b.history)
    assert rep.format_written and (b.path / ffmt.FORMAT_NAME).read_bytes() == ffmt.FORMAT_TEXT


def test_cli_repair_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    b = build(tmp_path / "s", segment_bytes=700)
    root = str(tmp_path / "s")
    assert main(["--root", root, "repair", "ws", "--dry-run"]) == 0
    _flip_middle(b.path)
    capsys.readouterr()
    assert main(["--root", root, "repair", "ws", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["changed"] and doc["consistent"] and doc["removed_bytes"] > 0
    assert doc["check"]["ok"]
    assert main(["--root", root, "repair", "ws"]) == 0
    assert "nothing to repair" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["--root", root, "repair", "ws", "--policy", "bogus"])
    assert exc.value.code == 2
