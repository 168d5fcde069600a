"""Recovery on every engine: the legacy import, the agent-transcript import and
migrate give a ``memory://`` and a PostgreSQL workspace what they give a file
workspace (through the engine operations only), and an engine without an
operation says so with a ``LedgerError``."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from ledger import LedgerError, Store, Unsupported
from ledger.storage.files.bulk import bulk_load
from ledger.transcript.history import History
from recovery.check import check
from recovery.imports import import_file
from recovery.legacy import import_legacy
from recovery.migrate import migrate
from tests.helpers import msg
from tests.helpers.recovery import all_files

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures" / "legacy-histories"
LEGACY = sorted(p.name for p in FIXTURES.iterdir() if (p / "expected.json").is_file()
                and json.loads((p / "expected.json").read_text())["kind"] == "legacy")


@pytest.fixture(params=["memory", "postgres"])
def other_root(request: pytest.FixtureRequest) -> str:
    """A root of an engine that is not the file engine."""
    if request.param == "memory":
        return f"memory://neutral-{uuid.uuid4().hex[:12]}"
    return str(request.getfixturevalue("pg_root"))


def comparable(h: History) -> list[dict[str, Any]]:
    """The rows minus what differs between two imports of the same input on
    any engine: timestamps, batch ids, generated row ids and the quarantine
    entry's name (each engine names its own)."""
    out = []
    for r in h.rows():
        d = r.to_dict()
        d.pop("ts"), d.pop("batch")
        if str(d.get("id", "")).startswith("r_"):
            d.pop("id")
        if "recovered" in d["meta"]:
            d["meta"]["recovered"] = "<entry>"
        out.append(d)
    return out


def quarantined(report: Any) -> list[tuple[str, int, int, str, bool]]:
    return [(Path(q["source"]).name, q["offset"], q["length"], q["reason"], q["reset"])
            for q in report.quarantined]


@pytest.mark.parametrize("case", LEGACY)
def test_a_legacy_import_is_the_same_on_every_engine(case: str, other_root: str,
                                                      tmp_path: Path) -> None:
    src = FIXTURES / case
    store_opts = json.loads((src / "expected.json").read_text()).get("store", {})
    on_files = Store(tmp_path / "files", durability="off", **store_opts).history("ws")
    want = import_legacy(on_files, str(src))
    before = all_files(src)
    h = Store(other_root, **store_opts).history("ws")
    got = import_legacy(h, str(src))
    assert all_files(src) == before, "the source directory must not change"
    assert comparable(h) == comparable(on_files)
    assert quarantined(got) == quarantined(want)
    assert (got.records, got.imported_rows, got.batches, got.counts, got.resolution) == \
        (want.records, want.imported_rows, want.batches, want.counts, want.resolution)
    assert check(h).ok, check(h).text()
    if want.quarantined:  # the bytes set aside are in the workspace's quarantine
        assert h.stat().quarantine_bytes >= sum(q["length"] for q in want.quarantined)
    rows, held = comparable(h), h.stat().quarantine_bytes
    again = import_legacy(h, str(src))
    assert again.imported_rows == 0 and again.skipped + len(again.quarantined) == again.records
    assert comparable(h) == rows and h.stat().quarantine_bytes == held


def test_a_legacy_import_appends_after_existing_rows(other_root: str) -> None:
    h = Store(other_root).history("ws")
    h.append(msg("native"))
    report = import_legacy(h, str(FIXTURES / "rollover-complete"))
    rows = [r.to_dict() for r in h.rows()]
    assert report.imported_rows == 6 and [r["seq"] for r in rows] == list(range(1, 8))
    assert rows[0]["parts"][0]["text"] == "native" and check(h).ok
    with pytest.raises(LedgerError, match="not a directory"):
        import_legacy(h, str(FIXTURES / "rollover-complete" / "expected.json"))


CLAUDE = [
    {"type": "user", "uuid": "u1", "sessionId": "s", "timestamp": "2025-01-01T00:00:00Z",
     "message": {"role": "user", "content": "list the files"}},
    {"type": "assistant", "uuid": "a1", "parentUuid": "u1", "sessionId": "s",
     "timestamp": "2025-01-01T00:00:01Z",
     "message": {"role": "assistant", "content": [
         {"type": "tool_use", "id": "t1", "name": "ls", "input": {"path": "."}}]}},
    {"type": "user", "uuid": "u2", "parentUuid": "a1", "sessionId": "s",
     "timestamp": "2025-01-01T00:00:02Z",
     "message": {"role": "user", "content": [
         {"type": "tool_result", "tool_use_id": "t1", "content": "a.txt"}]}},
]


def test_an_agent_transcript_import_is_the_same_on_every_engine(other_root: str,
                                                                 tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    lines = [json.dumps(r).encode() for r in CLAUDE]
    path.write_bytes(lines[0] + b"\n" + b"\x00\xff not json\n" + b"\n".join(lines[1:])
                     + b"\n{\"type\": \"user\", \"torn")
    files = Store(tmp_path / "files", durability="off")
    want = import_file(files, "ws", path, "claude-code")
    other = Store(other_root)
    got = import_file(other, "ws", path, "claude-code")
    assert got.to_dict() | {"quarantine": None} == want.to_dict() | {"quarantine": None}
    assert got.quarantined == 2 and got.written == want.written > 0
    assert comparable(other.history("ws")) == comparable(files.history("ws"))
    assert check(other.history("ws")).ok
    again = import_file(other, "ws", path, "claude-code")
    assert again.written == 0
    assert comparable(other.history("ws")) == comparable(files.history("ws"))


def test_migrate_to_and_from_another_engine_keeps_the_bytes(other_root: str,
                                                            tmp_path: Path) -> None:
    files = Store(tmp_path / "files", durability="off")
    h = files.history("chat")
    for i in range(5):
        h.append_many([msg(f"question {i}"), msg(f"answer {i}", "assistant")])
    h.clear_soft()
    h.rollover([msg("go on")])
    other = Store(other_root)
    migrate(files, other)
    assert [r.line for r in other.history("chat").rows()] == [r.line for r in h.rows()]
    back = Store(tmp_path / "back", durability="off")
    migrate(other, back)
    assert [r.line for r in back.history("chat").rows()] == [r.line for r in h.rows()]
    with pytest.raises(LedgerError, match="already exists"):
        migrate(files, other)


def test_a_file_engine_operation_on_another_engine_is_refused(other_root: str) -> None:
    h = Store(other_root).history("ws")
    h.append(msg("kept"))
    with pytest.raises(Unsupported, match="not the file engine") as err:
        bulk_load(h, [[msg("never")]])
    assert type(h.engine).__name__ in str(err.value)
    assert [r.to_dict()["parts"][0]["text"] for r in h.rows()] == ["kept"]
