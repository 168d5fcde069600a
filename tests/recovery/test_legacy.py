"""Legacy import and damaged-history fixtures (fixtures/legacy-histories/*),
each with its expected outcome beside it, plus the real mux transcript."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from ledger.cli import main
from ledger.core.format import files as ffmt
from ledger.storage.files import rewrite
from ledger.transcript.store import Store
from recovery.check import check
from recovery.legacy import import_legacy
from recovery.repair import repair
from tests.helpers.recovery import all_files

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures" / "legacy-histories"
CASES = sorted(p.name for p in FIXTURES.iterdir() if (p / "expected.json").is_file())
MUX = REPO.parent / "shared" / "real-transcripts" / "mux"


def _text(row: dict[str, Any]) -> str:
    for p in row.get("parts") or []:
        if isinstance(p, dict) and p.get("type") == "text":
            return str(p.get("text"))
    return ""


def summarize(row: dict[str, Any]) -> str:
    if row["kind"] == "reset":
        s = f"reset {row['reset']['reason']}"
        return s + (" (recovered)" if "recovered" in row["meta"] else "")
    if rewrite.is_husk(row):
        inner = row["meta"]["quarantine"]["row"]
        return f"rejected {inner['role']}: {_text(inner)}"
    s = f"{row['kind']} {row['role']}"
    if row.get("partial"):
        s += " partial"
    types = [p.get("type") for p in row["parts"]]
    if types not in ([], ["text"]):
        s += " [" + ",".join(types) + "]"
    t = _text(row)
    return s + (f": {t}" if t else "")


def test_there_are_enough_cases() -> None:
    assert len(CASES) >= 15
    kinds = {json.loads((FIXTURES / c / "expected.json").read_text())["kind"] for c in CASES}
    assert kinds == {"legacy", "native"}


@pytest.mark.parametrize("case", CASES)
def test_fixture(case: str, tmp_path: Path) -> None:
    src = FIXTURES / case
    exp = json.loads((src / "expected.json").read_text())
    store = Store(tmp_path / "root", durability="off", **exp.get("store", {}))
    h = store.history("ws")
    if exp["kind"] == "legacy":
        before = all_files(src)
        report = import_legacy(h, str(src))
        assert all_files(src) == before, "the source directory must not change"
        got_q = [{"source": Path(q["source"]).name, "reason": q["reason"], "reset": q["reset"]}
                 for q in report.quarantined]
        marker = report.resolution["action"] if report.resolution else None
        assert marker == exp.get("marker")
        for key, value in exp.get("counts", {}).items():
            assert report.counts.get(key, 0) == value, key
    else:
        shutil.copytree(src / "ws", tmp_path / "root" / "ws")
        rep = repair(h, policy=exp.get("policy", "salvage"))
        assert rep.exit_code() == 0, rep.text()
        got_q = [{"source": ffmt.segment_name(r.segment), "reason": "; ".join(r.reasons),
                  "reset": r.reset_seq is not None} for r in rep.removals]
    assert len(got_q) == len(exp["quarantined"]), got_q
    for got, want in zip(got_q, exp["quarantined"], strict=True):
        assert got["source"] == want["source"] and got["reset"] == want["reset"], got
        assert want["reason"] in got["reason"], got
    rows = [r.to_dict() for r in h.rows()]
    assert [summarize(r) for r in rows] == exp["rows"]
    assert [r["seq"] for r in rows] == list(range(1, len(rows) + 1)) or exp["kind"] == "native"
    if "legacy_sequences" in exp:
        assert [r["meta"]["legacy"].get("sequence") for r in rows] == exp["legacy_sequences"]
    if "provider_view" in exp:
        assert [summarize(r.to_dict()) for r in h.provider_view()] == exp["provider_view"]
    if "floor_after_seq" in exp:
        floor = h.snapshot().floor
        assert floor is not None and floor.seq == exp["floor_after_seq"]
    if "window_reason" in exp:
        st = h.snapshot()
        bounds = h.engine.index.all_bounds(st.sealed, (st.active, st.active_stamp), None)
        assert bounds[-1].reason == exp["window_reason"]
    report_after = check(h)
    assert report_after.ok, report_after.text()
    assert [f for f in report_after.findings if f.code != "reused_seq"] == []
    if exp["kind"] == "legacy":
        snapshot = all_files(Path(h.engine.path))
        again = import_legacy(h, str(src))
        assert again.imported_rows == 0
        assert again.skipped + len(again.quarantined) == again.records
        assert all_files(Path(h.engine.path)) == snapshot, "importing twice must add nothing"


def test_import_appends_after_existing_rows_and_cli(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    store = Store(tmp_path / "root", durability="off")
    h = store.history("ws")
    h.append({"kind": "message", "role": "user", "parts": [{"type": "text", "text": "native"}]})
    code = main(["--root", str(tmp_path / "root"), "import-legacy",
                 str(FIXTURES / "rollover-complete"), "ws", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["imported_rows"] == 6 and doc["check_ok"]
    rows = [r.to_dict() for r in h.rows()]
    assert [r["seq"] for r in rows] == list(range(1, 8))
    assert _text(rows[0]) == "native"
    assert main(["--root", str(tmp_path / "root"), "import-legacy", str(tmp_path), "ws"]) == 1


def test_real_mux_transcript(tmp_path: Path) -> None:
    if not MUX.is_dir():
        pytest.skip(f"real transcripts not present at {MUX} (shared/ is absent)")
    src = MUX / "coder-mux__openai-reasoning-error-repro.chat.jsonl"
    session = tmp_path / "session"
    session.mkdir()
    shutil.copyfile(src, session / "chat.jsonl")  # a scratch copy, outside the project
    store = Store(tmp_path / "root", durability="off")
    h = store.history("mux")
    report = import_legacy(h, str(session))
    assert report.records == 6 and report.imported_rows == 6 and not report.quarantined
    rows = [r.to_dict() for r in h.rows()]
    assert [r["role"] for r in rows] == ["user", "assistant"] * 3
    assert [r["meta"]["legacy"]["sequence"] for r in rows] == [0, 1, 2, 3, 4, 5]
    assert [r["seq"] for r in rows] == [1, 2, 3, 4, 5, 6]
    big = rows[1]
    legacy_lines = src.read_bytes().split(b"\n")
    original = json.loads(legacy_lines[1])
    assert big["id"] == original["id"]
    types = [p["type"] for p in big["parts"]]
    n_tool = sum(1 for p in original["parts"] if p["type"] == "dynamic-tool")
    assert types.count("tool_call") == n_tool == 17
    assert types.count("reasoning") == sum(1 for p in original["parts"]
                                           if p["type"] == "reasoning")
    assert big["meta"]["legacy"]["metadata"] == original["metadata"]
    assert check(h).findings == []
    again = import_legacy(h, str(session))
    assert again.imported_rows == 0 and again.skipped == 6
