"""Import of Claude Code and Codex transcripts, with salvage of damaged files."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import pytest

from ledger.cli import main as cli_main
from ledger.storage.files.retention import ENTRY_SUFFIX, quarantine_dir, read_manifest
from ledger.transcript.store import Store
from recovery import claude_code, codex
from recovery.imports import import_file, plan_bytes, write_quarantine
from recovery.salvage import Quarantined, Salvage, salvage_jsonl

CLAUDE_FILES = [
    "drmaciver-claude-reliability__coverage-test-fix.jsonl",
    "drmaciver-claude-reliability__python-to-rust-port.jsonl",
    "jnarowski-agentcmd__full-session-four.jsonl",
    "jnarowski-agentcmd__full-session-five.jsonl",
    "marot-spotter__4d5611e5-241a-462a-8d15-5122611a9569.jsonl",
    "marot-spotter__4d5611e5__subagents__agent-a2898e3.jsonl",
    "marot-spotter__4d5611e5__subagents__agent-acompact-e1f845.jsonl",
]
CODEX_FILES = [
    "jnarowski-agentcmd__rollout-2025-09-24T19-22-20-01997e76-d124-7592-9cac-2ec05abbca08.jsonl",
    "jnarowski-agentcmd__rollout-2025-09-24T20-12-23-01997ea4-a70d-7da3-8c20-c736db82a7c5.jsonl",
]
REAL = [("claude-code", f"claude-code/{n}") for n in CLAUDE_FILES] + [
    ("codex", f"codex/{n}") for n in CODEX_FILES
]
BIG = "claude-code/marot-spotter__4d5611e5-241a-462a-8d15-5122611a9569.jsonl"
KNOWN = {
    CLAUDE_FILES[0]: ["multiply_numbers", "I'll start by exploring the codebase"],
    CLAUDE_FILES[1]: ["Port this Python project to Rust", "Let me create a todo list"],
    CLAUDE_FILES[2]: ["first two initials", "NavUser"],
    CLAUDE_FILES[3]: ["search the web for the claude code response types",
                      "Web search results for query"],
    CLAUDE_FILES[4]: ["Unified transcript visualization", "bd show spotter-dov",
                      "This session is being continued from a previous conversation"],
    CLAUDE_FILES[5]: ["defmodule SpotterWeb.SessionLive", "SubagentLive"],
    CLAUDE_FILES[6]: ["PostToolUse:Edit hook additional context", "chronologically analyze"],
    CODEX_FILES[0]: ["Updating a team to assign a lead", "TeamSheet", "environment_context"],
    CODEX_FILES[1]: ["useTeamLeads", "syntax error near unexpected token"],
}
WHITESPACE = b" \t\r\n"


def searchable(row: dict[str, Any]) -> str:
    """The text session_history searches (DESIGN.md 8): text, calls, results, media."""
    out = []
    for part in row.get("parts", []):
        kind = part.get("type")
        if kind == "text":
            out.append(part["text"])
        elif kind == "tool_call":
            out.append(part["name"] + " " + json.dumps(part.get("input"), ensure_ascii=False))
        elif kind == "tool_result":
            output = part.get("output")
            out.append(output if isinstance(output, str)
                       else json.dumps(output, ensure_ascii=False))
        elif kind == "media":
            out.append("[media]")
    return "\n".join(out)


def search(rows: list[dict[str, Any]], needle: str) -> list[int]:
    folded = needle.casefold()
    return [r["seq"] for r in rows if folded in searchable(r).casefold()]


def kept_records(rows: list[dict[str, Any]]) -> list[Any]:
    """Every source object the history holds: row sources, bookkeeping, boundaries."""
    out: list[Any] = []
    for row in rows:
        meta = row.get("meta", {})
        out.extend(meta.get("bookkeeping", []))
        if "compact_boundary" in meta:
            out.append(meta["compact_boundary"])
        if "source" in meta:
            out.append(meta["source"])
        out.extend(meta.get("bookkeeping_after", []))
    return out


def canon(value: Any) -> bytes:
    return msgspec.json.encode(value)


# --- real transcripts -------------------------------------------------------------


@pytest.mark.parametrize(("fmt", "name"), REAL, ids=[n.split("/")[1][:40] for _, n in REAL])
def test_real_transcript_imports_losslessly(
    real_transcripts: Path, tmp_path: Path, fmt: str, name: str
) -> None:
    path = real_transcripts / name
    data = path.read_bytes()
    store = Store(tmp_path / "store", durability="off")
    report = import_file(store, "ws", path, fmt)
    assert report.quarantined == 0 and report.quarantined_bytes == 0
    lines = [json.loads(line) for line in data.split(b"\n") if line]
    assert report.records == report.imported == len(lines)
    rows = [r.to_dict() for r in store.history("ws").rows()]
    # Every line of the file is kept, in file order, exactly once.
    assert [canon(v) for v in kept_records(rows)] == [canon(v) for v in lines]
    # Every tool call keeps its result, after it.
    calls: dict[str, int] = {}
    for row in rows:
        for part in row["parts"]:
            if part["type"] == "tool_call":
                calls[part["id"]] = row["seq"]
    results = {p["id"]: row["seq"] for row in rows for p in row["parts"]
               if p["type"] == "tool_result"}
    assert set(calls) <= set(results)
    assert calls or name.endswith("agent-acompact-e1f845.jsonl")
    assert all(results[c] > seq for c, seq in calls.items())
    for needle in KNOWN[path.name]:
        assert search(rows, needle), f"{needle!r} not found in {name}"
    # The second import adds nothing.
    again = import_file(store, "ws", path, fmt)
    assert again.written == 0 and again.already_present == report.rows
    assert len(list(store.history("ws").rows())) == len(rows)


def test_claude_code_compaction_becomes_a_compaction_boundary(
    real_transcripts: Path, tmp_path: Path
) -> None:
    store = Store(tmp_path / "store", durability="off")
    report = import_file(store, "big", real_transcripts / BIG, "claude-code")
    assert report.compactions == 1
    h = store.history("big")
    rows = [r.to_dict() for r in h.rows()]
    resets = [r for r in rows if r["kind"] == "reset"]
    assert len(resets) == 1 and resets[0]["reset"] == {"reason": "compaction"}
    reset = resets[0]
    assert reset["batch"]["i"] == 0 and h.window == reset["seq"]
    summary = rows[rows.index(reset) + 1]
    assert summary["meta"]["source"]["isCompactSummary"] is True
    assert summary["meta"]["compact_boundary"]["subtype"] == "compact_boundary"
    view = [r.to_dict() for r in h.provider_view()]
    assert view[0]["seq"] == summary["seq"]
    assert view[0]["parts"][0]["text"].startswith("This session is being continued")
    # Summary rows (session titles) of other files stay bookkeeping, not compactions.
    titles = import_file(store, "five", real_transcripts / "claude-code" / CLAUDE_FILES[3],
                         "claude-code")
    assert titles.compactions == 0 and titles.bookkeeping == 17


# --- seeded damage ----------------------------------------------------------------


def line_spans(data: bytes) -> list[tuple[int, int]]:
    spans, pos = [], 0
    while pos < len(data):
        end = data.find(b"\n", pos)
        end = len(data) if end == -1 else end
        if data[pos:end].strip():
            spans.append((pos, end))
        pos = end + 1
    return spans


def damage(data: bytes, recipe: str, rng: random.Random) -> tuple[bytes, set[int], int, int]:
    """(damaged bytes, indexes of damaged lines, start of the change, byte shift after it)."""
    spans = line_spans(data)
    if recipe == "torn-tail":
        start, end = spans[-1]
        cut = rng.randrange(start + 1, end)
        return data[:cut], {len(spans) - 1}, cut, 0
    if recipe == "truncate":
        cut = rng.randrange(1, len(data))
        hit = {i for i, (s, e) in enumerate(spans) if e >= cut}
        return data[:cut], hit, cut, 0
    if recipe == "glued":
        i = rng.randrange(0, len(spans) - 1)
        start, end = spans[i]
        cut = rng.randrange(start + 1, end)
        # Line i loses its tail and its newline: line i+1 is glued onto the torn head.
        return data[:cut] + data[end + 1 :], {i}, cut, -(end + 1 - cut)
    if recipe == "nul-run":
        a = rng.randrange(0, len(data) - 1)
        b = min(len(data), a + rng.randrange(1, 5000))
        hit = {i for i, (s, e) in enumerate(spans) if s <= b and e >= a}
        if b < len(data) and data[b - 1 : b] == b"\n":
            hit |= {i for i, (s, _e) in enumerate(spans) if s == b}
        return data[:a] + b"\x00" * (b - a) + data[b:], hit, a, 0
    if recipe == "nul-insert":
        # A crash that extended the file: NULs before a line, nothing overwritten.
        at = spans[rng.randrange(0, len(spans))][0]
        run = rng.randrange(1, 5000)
        return data[:at] + b"\x00" * run + data[at:], set(), at, run
    if recipe == "nul-mid":
        # NULs inside one line: that line is lost, nothing around it is invented.
        i = rng.randrange(0, len(spans))
        at = rng.randrange(spans[i][0] + 1, spans[i][1])
        run = rng.randrange(1, 5000)
        return data[:at] + b"\x00" * run + data[at:], {i}, at, run
    if recipe == "u2028":
        at = rng.randrange(0, len(data))
        hit = {i for i, (s, e) in enumerate(spans) if s <= at <= e}
        return data[:at] + "\u2028".encode() + data[at:], hit, at, 3
    raise AssertionError(recipe)


def check_accounting(damaged: bytes, result: Salvage) -> None:
    """Every byte is in a record span, a quarantine entry or whitespace; quarantine
    entries are the file's bytes at their offsets; nothing overlaps (but strays)."""
    covered = bytearray(len(damaged))
    for q in result.quarantine:
        assert damaged[q.offset : q.offset + q.length] == q.data
        if q.reason != "stray-line-separator":
            assert not any(covered[q.offset : q.offset + q.length])
        covered[q.offset : q.offset + q.length] = b"\x01" * q.length
    for r in result.records:
        strays = [q for q in result.quarantine if q.reason == "stray-line-separator"
                  and r.offset <= q.offset < r.offset + r.length]
        inside = bytes(covered[r.offset : r.offset + r.length])
        assert inside.count(1) == sum(q.length for q in strays)
        covered[r.offset : r.offset + r.length] = b"\x01" * r.length
    loose = bytes(b for b, c in zip(damaged, covered, strict=True) if not c)
    assert loose.strip(WHITESPACE) == b""


RECIPES = ["torn-tail", "glued", "nul-run", "nul-insert", "nul-mid", "u2028", "truncate"]


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize(("fmt", "name"), REAL, ids=[n.split("/")[1][:40] for _, n in REAL])
def test_damaged_real_transcripts_salvage_exactly(
    real_transcripts: Path, fmt: str, name: str, recipe: str
) -> None:
    data = (real_transcripts / name).read_bytes()
    spans = line_spans(data)
    originals = [msgspec.json.decode(data[s:e]) for s, e in spans]
    looks = claude_code.looks_like_record if fmt == "claude-code" else codex.looks_like_record
    for seed in range(3):
        rng = random.Random(f"{name}:{recipe}:{seed}")
        damaged, hit, at, shift = damage(data, recipe, rng)
        result = salvage_jsonl(damaged, looks)
        check_accounting(damaged, result)
        by_offset = {r.offset: r for r in result.records}
        for i, (s, _e) in enumerate(spans):
            if i in hit:
                continue
            offset = s if s < at else s + shift
            if recipe in ("torn-tail", "truncate") and s >= len(damaged):
                continue
            assert offset in by_offset, (recipe, seed, i)
            assert canon(by_offset[offset].value) == canon(originals[i])
        known = Counter(canon(v) for v in originals)
        for r in result.records:
            got = canon(r.value)
            if got in known:
                continue
            # Only a separator inserted inside a string may change a record.
            assert recipe == "u2028", (recipe, seed, r.offset)
            sep = "\u2028".encode()
            assert any(got.replace(sep, b"", 1) == canon(originals[i]) or
                       _drop_one(got, sep) == canon(originals[i]) for i in hit)
        if recipe == "glued":
            (i,) = hit
            assert by_offset.get(spans[i + 1][0] + shift) is not None  # the glued record
            assert by_offset[spans[i + 1][0] + shift].salvaged
        if hit and recipe in ("torn-tail", "glued", "nul-run", "truncate"):
            assert result.quarantine
        if recipe == "nul-insert":
            assert [q.reason for q in result.quarantine] == ["nul-run"]
            assert result.salvaged == 1
        if recipe == "nul-mid":
            assert result.quarantine


def _drop_one(data: bytes, sep: bytes) -> set[bytes]:
    out = set()
    pos = data.find(sep)
    while pos != -1:
        out.add(data[:pos] + data[pos + len(sep) :])
        pos = data.find(sep, pos + 1)
    return out


@pytest.mark.parametrize("recipe", ["glued", "nul-run", "torn-tail"])
def test_damaged_import_writes_quarantine_once(
    real_transcripts: Path, tmp_path: Path, recipe: str
) -> None:
    data = (real_transcripts / "codex" / CODEX_FILES[1]).read_bytes()
    damaged, _hit, _at, _shift = damage(data, recipe, random.Random(recipe))
    src = tmp_path / "rollout.jsonl"
    src.write_bytes(damaged)
    store = Store(tmp_path / "store", durability="off")
    report = import_file(store, "ws", src, "codex")
    assert report.quarantined >= 1
    h = store.history("ws")
    manifest = read_manifest(h.engine.path)
    assert len(manifest) == report.quarantined
    for entry, listed in zip(manifest, report.quarantine, strict=True):
        blob = Path(quarantine_dir(h.engine.path)) / f"{entry.entry}{ENTRY_SUFFIX}"
        assert blob.read_bytes() == damaged[entry.offset : entry.offset + entry.length]
        assert (entry.source, entry.reason, entry.digest) == (
            str(src), listed["reason"], listed["digest"])
        assert listed["entry"] == entry.entry
    rows = len(list(h.rows()))
    again = import_file(store, "ws", src, "codex")
    assert again.written == 0
    assert len(list(h.rows())) == rows
    assert read_manifest(h.engine.path) == manifest


# --- salvage on small, exact inputs ------------------------------------------------

L2028 = "\u2028".encode()


def test_salvage_cases() -> None:
    glued = b'{"a":1}\n{"type":"x","m":{"b":1},"pr{"type":"user","c":1}\n'
    r = salvage_jsonl(glued)
    assert [x.value for x in r.records] == [{"a": 1}, {"type": "user", "c": 1}]
    assert [(q.offset, q.reason) for q in r.quarantine] == [(8, "torn-record")]
    r = salvage_jsonl(b'{"a":1}\n\x00\x00\x00\n\x00{"b":2}\n{"c":3}{"d":4}\n')
    assert [x.value for x in r.records] == [{"a": 1}, {"b": 2}, {"c": 3}, {"d": 4}]
    assert [q.reason for q in r.quarantine] == ["nul-run", "nul-run"]
    r = salvage_jsonl(b'{"s":"x' + L2028 + b'y"}\n{"a":' + L2028 + b"1}\n")
    assert [x.value for x in r.records] == [{"s": "x\u2028y"}, {"a": 1}]
    assert [(q.offset, q.length, q.reason) for q in r.quarantine] == [
        (19, 3, "stray-line-separator")]
    r = salvage_jsonl(b'{"a":"\xc3' + L2028 + b'\xa9"}\n[1]\n{"a":"\xff"}\n{"b":')
    assert [x.value for x in r.records] == [{"a": "é"}]
    assert [q.reason for q in r.quarantine] == [
        "stray-line-separator", "not-an-object", "invalid-utf8", "torn-tail"]


def test_a_record_between_damaged_bytes_is_salvaged() -> None:
    good = (b'{"parentUuid":null,"sessionId":"s","uuid":"u2","type":"user",'
            b'"message":{"role":"user","content":"kept"}}')
    data = b'{"parentUuid":null,"sessionId":"s","uu' + good + b"\x00" * 50 + b"\n"
    r = salvage_jsonl(data, claude_code.looks_like_record)
    assert [x.value["uuid"] for x in r.records] == ["u2"]
    assert [q.reason for q in r.quarantine] == ["torn-record", "nul-run"]
    # Without a format check, a record must reach the end of its line.
    assert salvage_jsonl(data).records == []


def test_a_nested_object_of_a_torn_record_is_not_a_record() -> None:
    torn = (b'{"parentUuid":"p","sessionId":"s","uuid":"u","type":"progress","data":'
            b'{"message":{"type":"user","message":{"role":"user","content":"x"},"uuid":"n"}}')
    r = salvage_jsonl(torn, claude_code.looks_like_record)
    assert r.records == [] and [q.reason for q in r.quarantine] == ["torn-tail"]
    torn = b'{"timestamp":"t","type":"response_item","payload":{"type":"message","role":"user"}'
    assert salvage_jsonl(torn, codex.looks_like_record).records == []


# --- synthetic transcripts (no shared/ needed) ---------------------------------------


def _cc(kind: str, uuid: str, **fields: Any) -> dict[str, Any]:
    return {"parentUuid": None, "isSidechain": False, "sessionId": "s", "type": kind,
            "uuid": uuid, "timestamp": "2026-01-01T00:00:00.000Z", **fields}


def test_claude_code_mapping(tmp_path: Path) -> None:
    records = [
        {"type": "summary", "summary": "A title", "leafUuid": "x"},
        _cc("user", "u1", message={"role": "user", "content": "hi"}),
        _cc("assistant", "a1", message={"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "sig"}]}),
        _cc("assistant", "a2", message={"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "Read", "input": {"f": "a"}}]}),
        _cc("progress", "p1", data={"type": "hook_progress"}),
        _cc("user", "u2", message={"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "is_error": True, "content": [
                {"type": "text", "text": "nope"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                             "data": "aGk="}}]}]}),
        _cc("user", "side", isSidechain=True, message={"role": "user", "content": "sub"}),
        _cc("system", "b", subtype="compact_boundary", content="Conversation compacted"),
        _cc("user", "u3", isCompactSummary=True,
            message={"role": "user", "content": "Summary of before"}),
        _cc("assistant", "a3", message={"role": "assistant", "content": [
            {"type": "server_tool_use", "id": "s", "name": "web", "input": {}}]}),
        {"type": "file-history-snapshot", "messageId": "m", "snapshot": {}},
    ]
    src = tmp_path / "s.jsonl"
    src.write_bytes(b"".join(msgspec.json.encode(r) + b"\n" for r in records))
    store = Store(tmp_path / "store", durability="off")
    report = import_file(store, "ws", src, "claude-code")
    assert (report.rows, report.bookkeeping, report.compactions) == (6, 4, 1)
    rows = [r.to_dict() for r in store.history("ws").rows()]
    assert [(r["kind"], r["role"]) for r in rows] == [
        ("message", "user"), ("message", "assistant"), ("message", "assistant"),
        ("message", "tool"), ("reset", "system"), ("message", "user"), ("message", "assistant")]
    assert rows[0]["meta"]["bookkeeping"] == [records[0]]
    assert rows[0]["ts"] == 1767225600000
    assert rows[1]["parts"] == [{"type": "reasoning", "text": "hmm", "signature": "sig"}]
    assert rows[3]["parts"] == [{"type": "tool_result", "id": "t1", "error": True, "output": [
        {"type": "text", "text": "nope"}, {"type": "media", "mime": "image/png", "data": "aGk="}]}]
    assert rows[3]["meta"]["bookkeeping"] == [records[4]]
    assert rows[5]["meta"]["bookkeeping"] == [records[6]]  # the sidechain row
    assert rows[5]["meta"]["compact_boundary"] == records[7]
    assert rows[6]["parts"][0]["type"] == "anthropic:server_tool_use"
    assert rows[6]["meta"]["bookkeeping_after"] == [records[10]]
    assert [canon(v) for v in kept_records(rows)] == [canon(v) for v in records]


def test_codex_mapping(tmp_path: Path) -> None:
    def line(kind: str, payload: dict[str, Any]) -> dict[str, Any]:
        return {"timestamp": "2025-09-25T01:22:20.083Z", "type": kind, "payload": payload}

    records = [
        line("session_meta", {"id": "x", "cwd": "/"}),
        line("response_item", {"type": "message", "role": "developer",
                               "content": [{"type": "input_text", "text": "rules"}]}),
        line("response_item", {"type": "message", "role": "user",
                               "content": [{"type": "input_text", "text": "go"}]}),
        line("event_msg", {"type": "user_message", "message": "go"}),
        line("response_item", {"type": "reasoning", "summary": [
            {"type": "summary_text", "text": "plan"}], "content": None,
            "encrypted_content": "enc"}),
        line("response_item", {"type": "function_call", "name": "shell",
                               "arguments": '{"command":["ls"]}', "call_id": "c1"}),
        line("response_item", {"type": "function_call_output", "call_id": "c1",
                               "output": {"content": "denied", "success": False}}),
        line("response_item", {"type": "custom_tool_call", "name": "apply_patch",
                               "input": "*** Begin Patch", "call_id": "c2"}),
        line("response_item", {"type": "custom_tool_call_output", "call_id": "c2",
                               "output": "ok"}),
        line("compacted", {"message": "what happened so far"}),
        line("response_item", {"type": "message", "role": "assistant",
                               "content": [{"type": "output_text", "text": "done"}]}),
    ]
    src = tmp_path / "r.jsonl"
    src.write_bytes(b"".join(msgspec.json.encode(r) + b"\n" for r in records))
    store = Store(tmp_path / "store", durability="off")
    report = import_file(store, "ws", src, "codex")
    assert (report.bookkeeping, report.compactions) == (2, 1)
    rows = [r.to_dict() for r in store.history("ws").rows()]
    assert [r["role"] for r in rows] == ["system", "user", "assistant", "assistant", "tool",
                                         "assistant", "tool", "system", "user", "assistant"]
    assert rows[2]["parts"] == [{"type": "reasoning", "text": "plan", "summary": [
        {"type": "summary_text", "text": "plan"}], "encrypted_content": "enc"}]
    assert rows[3]["parts"][0]["input"] == {"command": ["ls"]}
    assert rows[4]["parts"] == [{"type": "tool_result", "id": "c1", "output": "denied",
                                 "error": True}]
    assert rows[5]["parts"][0]["input"] == "*** Begin Patch"
    assert rows[7]["reset"] == {"reason": "compaction"}
    assert rows[8]["parts"] == [{"type": "text", "text": "what happened so far"}]
    assert [canon(v) for v in kept_records(rows)] == [canon(v) for v in records]


def test_a_grown_session_imports_only_its_new_records(tmp_path: Path) -> None:
    first = [_cc("user", f"u{i}", message={"role": "user", "content": f"m{i}"})
             for i in range(5)]
    src = tmp_path / "s.jsonl"
    src.write_bytes(b"".join(msgspec.json.encode(r) + b"\n" for r in first))
    store = Store(tmp_path / "store", durability="off")
    import_file(store, "ws", src, "claude-code")
    more = [_cc("user", "u9", message={"role": "user", "content": "m9"})]
    src.write_bytes(src.read_bytes() + msgspec.json.encode(more[0]) + b"\n")
    report = import_file(store, "ws", src, "claude-code")
    assert (report.written, report.already_present) == (1, 5)
    texts = [r.to_dict()["parts"][0]["text"] for r in store.history("ws").rows()]
    assert texts == ["m0", "m1", "m2", "m3", "m4", "m9"]


def test_a_compaction_whose_summary_was_lost_is_written_once(tmp_path: Path) -> None:
    records = [_cc("user", "u1", message={"role": "user", "content": "before"}),
               _cc("system", "b", subtype="compact_boundary"),
               _cc("user", "u2", message={"role": "user", "content": "after"})]
    src = tmp_path / "s.jsonl"
    src.write_bytes(b"".join(msgspec.json.encode(r) + b"\n" for r in records))
    store = Store(tmp_path / "store", durability="off")
    assert import_file(store, "ws", src, "claude-code").compactions == 1
    src.write_bytes(src.read_bytes() + msgspec.json.encode(
        _cc("user", "u3", message={"role": "user", "content": "later"})) + b"\n")
    again = import_file(store, "ws", src, "claude-code")
    assert (again.compactions, again.written) == (0, 1)
    rows = [r.to_dict() for r in store.history("ws").rows()]
    assert [r["kind"] for r in rows] == ["message", "reset", "message", "message"]
    assert rows[2]["meta"]["bookkeeping"] == [records[1]]


def test_write_quarantine_is_idempotent(tmp_path: Path) -> None:
    h = Store(tmp_path, durability="off").history("ws")
    h.append({"kind": "message", "role": "user", "parts": []})
    entry = Quarantined(5, 3, "nul-run", b"\x00\x00\x00")
    names = write_quarantine(h, "src.jsonl", [entry])
    assert write_quarantine(h, "src.jsonl", [entry]) == names
    (listed,) = read_manifest(h.engine.path)
    assert (listed.offset, listed.length, listed.reason) == (5, 3, "nul-run")
    blob = Path(quarantine_dir(h.engine.path)) / f"{names[0]}{ENTRY_SUFFIX}"
    assert blob.read_bytes() == b"\x00" * 3
    assert write_quarantine(h, "src.jsonl", []) == []


def test_plan_is_deterministic() -> None:
    data = b"".join(msgspec.json.encode(_cc("user", f"u{i}", message={
        "role": "user", "content": "x"})) + b"\n" for i in range(600))
    a, b = plan_bytes(data, "claude-code"), plan_bytes(data, "claude-code")
    assert [s.batch_id for s in a.steps] == [s.batch_id for s in b.steps]
    assert len(a.steps) == 3 and len({s.batch_id for s in a.steps}) == 3


# --- the command line ---------------------------------------------------------------


def test_cli_import_and_strict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = _cc("user", "u1", message={"role": "user", "content": "hello"})
    src = tmp_path / "s.jsonl"
    src.write_bytes(msgspec.json.encode(good) + b"\n" + b'{"type":"user","mess')
    root = str(tmp_path / "store")
    assert cli_main(["--root", root, "import-claude-code", str(src), "ws", "--strict"]) == 1
    assert "torn-tail" in capsys.readouterr().err
    assert not (tmp_path / "store" / "ws").exists()
    assert cli_main(["--root", root, "import-claude-code", str(src), "ws",
                     "--durability", "off"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["records"], report["quarantined"], report["written"]) == (1, 1, 1)
    assert report["quarantine"][0]["reason"] == "torn-tail"
    assert cli_main(["--root", root, "import-codex", str(tmp_path / "missing"), "ws"]) == 1
    assert "cannot read" in capsys.readouterr().err


# --- salvage per record (issue 20, item 9) --------------------------------------------


def _deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


@pytest.mark.parametrize("fmt", ["claude-code", "codex"])
def test_a_bad_record_is_quarantined_with_its_line_and_the_rest_imported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    """Among 300 good records: one nested 3000 deep, one holding an integer >= 2^64, one
    tool call with a numeric id (codex: with a huge integer in its arguments). Each is
    quarantined naming its source line; the 300 others are imported, through the CLI."""
    if fmt == "claude-code":
        def good(i: int) -> bytes:
            return msgspec.json.encode(_cc("user", f"u{i}", message={
                "role": "user", "content": f"message {i}"}))
        deep = (b'{"parentUuid":null,"isSidechain":false,"sessionId":"s","type":"user",'
                b'"uuid":"deep","message":{"role":"user","content":"x"},"x":'
                + _deep(3000) + b"}")
        huge = msgspec.json.encode(_cc("user", "huge", message={
            "role": "user", "content": "big"})).replace(b'"big"', b'"big","n":1', 1)
        huge = huge[:-1] + b',"count":18446744073709551616}'
        numeric = msgspec.json.encode(_cc("assistant", "num", message={
            "role": "assistant", "content": [
                {"type": "tool_use", "id": 7, "name": "Read", "input": {}}]}))
    else:
        def line(payload: dict[str, Any]) -> bytes:
            return msgspec.json.encode({"timestamp": "2025-09-25T01:22:20.083Z",
                                        "type": "response_item", "payload": payload})

        def good(i: int) -> bytes:
            return line({"type": "message", "role": "user",
                         "content": [{"type": "input_text", "text": f"message {i}"}]})
        deep = (b'{"timestamp":"2025-09-25T01:22:20.083Z","type":"response_item","payload":'
                b'{"type":"message","role":"user","content":' + _deep(3000) + b"}}")
        huge = line({"type": "message", "role": "user",
                     "content": [{"type": "input_text", "text": "big"}]})
        huge = huge[:-1] + b',"count":18446744073709551616}'
        # (a numeric call_id is bookkeeping for codex; a call whose parsed
        # arguments hold a huge integer is a row the store refuses)
        numeric = line({"type": "function_call", "name": "shell", "call_id": "c7",
                        "arguments": '{"n": 18446744073709551616}'})
    lines = [good(i) for i in range(300)]
    lines[10:10] = [deep]  # line 11
    lines[100:100] = [huge]  # line 101
    lines[200:200] = [numeric]  # line 201
    src = tmp_path / "session.jsonl"
    src.write_bytes(b"\n".join(lines) + b"\n")
    root = str(tmp_path / "store")
    command = "import-claude-code" if fmt == "claude-code" else "import-codex"
    code = cli_main(["--root", root, command, str(src), "ws", "--durability", "off"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "Traceback" not in err
    report = json.loads(out)
    assert [q["line"] for q in report["quarantine"]] == [11, 101, 201]
    reasons = [q["reason"] for q in report["quarantine"]]
    assert reasons[0] == "nested-too-deeply"
    assert "64-bit" in reasons[1] and "line 101" in reasons[1]
    assert ("'id'" in reasons[2] or "64-bit" in reasons[2]) and "line 201" in reasons[2]
    data = src.read_bytes()
    for q in report["quarantine"]:  # the quarantine names the record's own bytes
        assert data.count(b"\n", 0, q["offset"]) + 1 == q["line"]
    texts = [r.to_dict()["parts"][0]["text"] for r in Store(root).history("ws").rows()]
    assert texts == [f"message {i}" for i in range(300)]
    # Importing again adds nothing and still names the same lines.
    assert cli_main(["--root", root, command, str(src), "ws", "--durability", "off"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert (again["written"], again["already_present"]) == (0, 300)
    # --strict refuses and names the first refused line.
    assert cli_main(["--root", str(tmp_path / "strict"), command, str(src), "ws",
                     "--strict"]) == 1
    assert "line 11" in capsys.readouterr().err


def test_a_record_the_converter_cannot_handle_is_quarantined_alone() -> None:
    good = [_cc("user", f"u{i}", message={"role": "user", "content": f"m{i}"})
            for i in range(3)]
    data = b"\n".join(msgspec.json.encode(r) for r in good) + b"\n"

    def convert(records: list[Any]) -> list[Any]:
        if any(r.value["uuid"] == "u1" for r in records):
            raise KeyError("boom")
        return claude_code.convert(records)

    from recovery.imports import plan_file

    result = plan_file(data, "claude-code", convert, claude_code.looks_like_record)
    assert [q.line for q in result.salvage.quarantine] == [2]
    assert "cannot convert (KeyError" in result.salvage.quarantine[0].reason
    assert [s.rows[0]["parts"][0]["text"] for s in result.steps for _ in s.rows][:1] == ["m0"]
    assert result.rows == 2


def test_a_write_the_store_still_refuses_names_the_source_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Should a row pass the per-record check and still be refused at append (here: a
    store whose row limit is below the record), the error names the source line."""
    import recovery.imports as imports
    from ledger.core.errors import InvalidRow

    records = [_cc("user", f"u{i}", message={"role": "user", "content": f"m{i}"})
               for i in range(3)]
    src = tmp_path / "s.jsonl"
    src.write_bytes(b"".join(msgspec.json.encode(r) + b"\n" for r in records))
    store = Store(tmp_path / "store", durability="off", max_row_bytes=64)
    real = imports.plan_bytes  # plan for the default limit, so only the write can refuse
    monkeypatch.setattr(imports, "plan_bytes", lambda data, fmt, max_row_bytes=0: real(data, fmt))
    with pytest.raises(InvalidRow, match=r"line 1 of the source"):
        import_file(store, "ws", src, "claude-code")
