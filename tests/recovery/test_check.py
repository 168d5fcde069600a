"""``check``: every kind of finding, where it is, its severity, and that check
never writes."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest
from msgspec.structs import replace

from ledger.cli import main
from ledger.core.checks import DAMAGE, NOTICE
from ledger.core.errors import WorkspaceNotFound
from ledger.core.format import files as ffmt
from ledger.core.format import rows as fmt
from ledger.storage.files import rewrite
from ledger.storage.files import segments as segs
from ledger.storage.files.receipt import read_receipt, write_receipt
from ledger.transcript.store import Store
from recovery.check import check
from tests.helpers import msg
from tests.helpers.recovery import all_files, build


def _seg(ws: Path, k: int = -1) -> Path:
    return Path(segs.segment_path(str(ws), segs.list_segments(str(ws))[k]))


def _codes(report: Any) -> dict[str, str]:
    return {f.code: f.severity for f in report.findings}


def _framed(row: dict[str, Any]) -> bytes:
    return fmt.encode_line(row)


def _row(seq: int, bid: str, n: int = 1, i: int = 0, **extra: Any) -> dict[str, Any]:
    r: dict[str, Any] = {"seq": seq, "id": f"r_{seq}", "kind": "message", "role": "user",
                         "parts": [{"type": "text", "text": "x"}], "partial": False, "meta": {},
                         "ts": 1, "batch": {"id": bid, "n": n, "i": i}}
    r.update(extra)
    return r


def run_cli(root: Path, *argv: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["--root", str(root), *argv])
    return code, capsys.readouterr().out


def test_clean_history_has_no_findings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    b = build(tmp_path / "s", segment_bytes=700)
    r = check(b.history)
    assert r.findings == [] and r.ok
    assert r.rows == sum(len(x) for x in b.batches)
    code, out = run_cli(tmp_path / "s", "check", "ws", "--json", capsys=capsys)
    doc = json.loads(out)
    assert code == 0 and doc["ok"] and doc["damage"] == 0 and doc["findings"] == []


def test_missing_workspace_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceNotFound):
        check(Store(tmp_path).history("nope"))
    assert main(["--root", str(tmp_path), "check", "nope"]) == 1


def test_torn_tail_is_damage_with_location(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    b = build(tmp_path / "s")
    seg = _seg(b.path)
    data = seg.read_bytes()
    seg.write_bytes(data[:-10])
    r = check(b.history)
    torn = [f for f in r.findings if f.code == "torn_line"]
    assert len(torn) == 1
    f = torn[0]
    start = data.rindex(b"\n", 0, len(data) - 1) + 1
    assert (f.severity, f.segment, f.offset, f.length) == (DAMAGE, seg.name, start,
                                                           len(data) - 10 - start)
    assert "repair" in f.action
    code, out = run_cli(tmp_path / "s", "check", "ws", capsys=capsys)
    assert code == 1 and "torn line" in out and f"{seg.name}@{start}" in out


def test_checksum_mismatch_and_seq_of_neighbours(tmp_path: Path) -> None:
    b = build(tmp_path / "s")
    seg = _seg(b.path, 0)
    data = bytearray(seg.read_bytes())
    at = data.index(b"q0")
    data[at] = ord("Q")
    seg.write_bytes(bytes(data))
    r = check(b.history)
    assert _codes(r)["checksum_mismatch"] == DAMAGE
    # The row's batch partner is now an incomplete batch, named with its seq.
    inc = [f for f in r.findings if f.code == "incomplete_batch"]
    assert inc and inc[0].seq == 2
    assert not r.ok


def test_each_unreadable_kind(tmp_path: Path) -> None:
    b = build(tmp_path / "s")
    seg = _seg(b.path)
    st = b.history.snapshot()
    n = st.next_seq
    bad_utf8 = fmt.frame(fmt.encode_json(_row(n, "b_u")).replace(b'"x"', b'"\xff\xfe"'))
    lines = [
        b'{"seq":1,"note":"no checksum"}\n',  # unframed
        fmt.frame(b'{"no":"seq"}'),  # verifies, not a row
        bad_utf8,
        b"\x00" * 40 + b"\n",  # NUL block
        b'{"seq":99, "kind" : "\\u0072eset", garbage\n',  # reset candidate
    ]
    seg.write_bytes(seg.read_bytes() + b"".join(lines))
    r = check(b.history)
    codes = _codes(r)
    assert codes["unframed_line"] == DAMAGE
    assert codes["malformed_row"] == DAMAGE
    assert codes["invalid_utf8"] == DAMAGE
    assert codes["unreadable_line"] == DAMAGE
    cand = [f for f in r.findings if "may be a reset" in f.message]
    # The candidate, and damage that shows no intact kind (the NUL block): a
    # reset's marker may be what it lost. The bad UTF-8 row still shows
    # "kind":"message", the unframed line parses and has neither kind nor reset;
    # a verified non-row is no damage.
    ends = [seg.stat().st_size - sum(len(x) for x in lines[i:]) for i in range(len(lines))]
    assert sorted(f.offset for f in cand) == [ends[3], ends[4]]


def test_incomplete_duplicate_and_reused(tmp_path: Path) -> None:
    b = build(tmp_path / "s")
    seg = _seg(b.path, 0)
    lines = seg.read_bytes().split(b"\n")[:-1]
    # lines[0..1]: batch of 2; duplicate line 1 right after it inside the run
    lines.insert(1, lines[0])
    seg.write_bytes(b"\n".join(lines) + b"\n")
    r = check(b.history)
    dup = [f for f in r.findings if f.code == "duplicate_line"]
    assert dup and dup[0].severity == DAMAGE and dup[0].seq == 1

    b2 = build(tmp_path / "t")
    seg = _seg(b2.path)
    data = seg.read_bytes()
    last = data.split(b"\n")[-2] + b"\n"
    seg.write_bytes(data + last)  # a whole one-row batch, twice
    r = check(b2.history)
    assert _codes(r)["duplicate_batch"] == DAMAGE

    b3 = build(tmp_path / "u")
    seg = _seg(b3.path)
    seg.write_bytes(seg.read_bytes() + _framed(_row(1, "b_reused")))
    r = check(b3.history)
    assert r.ok and _codes(r)["reused_seq"] == NOTICE


def test_notices_do_not_fail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    b = build(tmp_path / "s")
    ws = b.path
    receipt = read_receipt(str(ws))
    assert receipt is not None
    write_receipt(str(ws), replace(receipt, state=ffmt.PENDING))
    (ws / f"{ffmt.TEMP_PREFIX}123-abc").write_bytes(b"partial")
    r = check(b.history)
    assert r.ok
    assert _codes(r) == {"receipt_pending": NOTICE, "stray_temp_file": NOTICE}
    code, _ = run_cli(tmp_path / "s", "check", "ws", capsys=capsys)
    assert code == 0

    write_receipt(str(ws), receipt)
    seg = _seg(ws)
    os.utime(seg, ns=(1, 1))
    r = check(b.history)
    assert r.ok and _codes(r)["receipt_stale"] == NOTICE


def test_receipt_that_disagrees_with_matching_stamps(tmp_path: Path) -> None:
    b = build(tmp_path / "s")
    receipt = read_receipt(b.history.engine.path)
    assert receipt is not None and receipt.has_floor
    write_receipt(b.history.engine.path, replace(receipt, floor_segment=0, floor_offset=0,
                                          floor_seq=ffmt.NO_FLOOR))
    r = check(b.history)
    assert _codes(r)["receipt_disagrees"] == DAMAGE
    assert "privacy floor" in next(f for f in r.findings if f.code == "receipt_disagrees").message


def test_interrupted_rewrite_is_reported(tmp_path: Path) -> None:
    b = build(tmp_path / "s")
    (b.path / rewrite.MARKER_NAME).write_bytes(b'{"finalArchiveHash": null}')
    r = check(b.history)
    assert _codes(r)["rewrite_interrupted"] == DAMAGE


def test_check_writes_nothing_and_works_read_only(tmp_path: Path) -> None:
    b = build(tmp_path / "s", segment_bytes=700)
    seg = _seg(b.path)
    seg.write_bytes(seg.read_bytes()[:-3])
    copy = tmp_path / "ro" / "ws"
    shutil.copytree(b.path, copy)
    (copy / ffmt.LOCK_NAME).unlink()
    before = all_files(copy.parent)
    for dirpath, _dirs, files in os.walk(copy.parent):
        for name in files:
            os.chmod(os.path.join(dirpath, name), stat.S_IRUSR)
        os.chmod(dirpath, stat.S_IRUSR | stat.S_IXUSR)
    try:
        r = check(Store(copy.parent).history("ws"))
        assert not r.ok and "torn_line" in _codes(r)
        assert all_files(copy.parent) == before
        assert sorted(os.listdir(copy)) == sorted(n[3:] for n in before if n.count("/") == 1)
    finally:
        for dirpath, _, _ in os.walk(copy.parent):
            os.chmod(dirpath, 0o700)


def test_progress_is_reported_and_cli_prints_no_bar_off_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    b = build(tmp_path / "s", segment_bytes=500)
    calls: list[tuple[int, int]] = []
    check(b.history, progress=lambda done, total: calls.append((done, total)))
    total = sum(p.stat().st_size for p in b.path.glob("seg-*.jsonl"))
    assert calls and calls[-1] == (total, total)
    assert all(d1 <= d2 for (d1, _), (d2, _) in itertools.pairwise(calls))
    main(["--root", str(tmp_path / "s"), "check", "ws"])
    assert capsys.readouterr().err == ""


def test_append_after_damage_still_checks_as_damaged(tmp_path: Path) -> None:
    b = build(tmp_path / "s")
    seg = _seg(b.path)
    seg.write_bytes(seg.read_bytes()[:-5])
    b.history.append(msg("after"))
    r = check(b.history)
    assert [f.code for f in r.findings if f.severity == DAMAGE] == ["torn_line"]


def _split_model(wsdir: Path) -> list[tuple[str, int, int, str]]:
    """(segment, offset, seq, call id) of every result whose call is in an
    earlier window, computed from the decoded rows (the notice's meaning)."""
    calls: set[str] = set()
    earlier: set[str] = set()
    out = []
    for n in segs.list_segments(str(wsdir)):
        for line in segs.iter_lines(segs.segment_path(str(wsdir), n)):
            row = fmt.decode_unframed(line.data)
            assert row is not None
            if row["kind"] == "reset":
                earlier |= calls
                calls = set()
                continue
            for p in row.get("parts") or ():
                if not isinstance(p, dict):
                    continue
                if p.get("type") == "tool_call":
                    calls.add(str(p["id"]))
                elif p.get("type") == "tool_result":
                    cid = str(p["id"])
                    if cid not in calls and cid in earlier:
                        out.append((ffmt.segment_name(n), line.offset, row["seq"], cid))
    return out


def test_split_tool_pairs_are_found_in_the_scan_on_both_paths(tmp_path: Path) -> None:
    # The notice is gathered by check's one pass over the segments: chunks of
    # well-formed rows on the fast path, and a chunk that holds a part that is
    # no object (hand-written, checksum valid) line by line; both find the same.
    h = Store(tmp_path, segment_bytes=600, durability="off").history("ws")
    for k in range(4):
        h.append_many([msg(f"q{k}"), {"kind": "message", "role": "assistant", "parts": [
            {"type": "tool_call", "id": f"c{k}", "name": "bash", "input": {"k": k}},
            {"type": "tool_call", "id": f"d{k}", "name": "bash", "input": {}}]}])
        h.append_many([{"kind": "message", "role": "tool", "parts": [
            {"type": "tool_result", "id": f"d{k}", "output": "same window"}]}])
        h.clear_soft()
        h.append_many([{"kind": "message", "role": "tool", "parts": [
            {"type": "tool_result", "id": f"c{k}", "output": "late"},
            {"type": "tool_result", "id": "never-called", "output": "x"}]}])
    wsdir = Path(h.engine.path)
    seg = _seg(wsdir)
    seq = h.snapshot().next_seq
    odd = _row(seq, "b_" + "9" * 28, parts=["not a part", {"type": "tool_result", "id": "c0",
                                                            "output": "odd row"}])
    seg.write_bytes(seg.read_bytes() + _framed(odd))
    expected = _split_model(wsdir)
    assert [e[3] for e in expected] == ["c0", "c1", "c2", "c3", "c0"]
    r = check(h)
    got = [(f.segment, f.offset, f.seq, f.message.split("'")[1])
           for f in r.findings if f.code == "tool_pair_split"]
    assert not [f for f in r.findings if f.severity == DAMAGE]
    assert got == expected
