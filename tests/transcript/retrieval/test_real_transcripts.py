"""``session_history`` over the real agent transcripts in ../shared/real-transcripts.

Each JSONL record's human-readable text becomes one text row (Claude Code
message text and tool results, Codex message text and function outputs, mux
text parts), with a rollover every 150 rows and a manual clear part-way, in
small segments. Searches for strings taken from the rows find exactly the
rows whose text contains them (case-folded, after the floor), over every
page; every result fits 16 KiB; ``read`` re-assembles rows exactly.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ledger import History, Store

_CACHE: dict[Path, tuple[History, list[tuple[int, str]], int]] = {}


def _text_of(record: dict[str, Any]) -> tuple[str, str]:
    """(role, text) of one transcript record; text "" when it has none."""
    pieces: list[str] = []
    role = "user"
    message = record.get("message")
    if isinstance(message, dict):  # Claude Code
        role = "assistant" if message.get("role") == "assistant" else "user"
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for b in blocks if isinstance(blocks, list) else []:
            if not isinstance(b, dict):
                continue
            if b.get("type") == "text" and isinstance(b.get("text"), str):
                pieces.append(b["text"])
            elif b.get("type") == "tool_result":
                inner = b.get("content")
                if isinstance(inner, str):
                    pieces.append(inner)
                elif isinstance(inner, list):
                    pieces += [x["text"] for x in inner
                               if isinstance(x, dict) and isinstance(x.get("text"), str)]
    payload = record.get("payload")
    if isinstance(payload, dict):  # Codex
        if payload.get("type") == "message":
            role = "assistant" if payload.get("role") == "assistant" else "user"
            pieces += [c["text"] for c in payload.get("content") or []
                       if isinstance(c, dict) and isinstance(c.get("text"), str)]
        elif payload.get("type") == "function_call_output" and isinstance(
            payload.get("output"), str
        ):
            role = "user"
            pieces.append(payload["output"])
    if isinstance(record.get("parts"), list):  # mux
        role = "assistant" if record.get("role") == "assistant" else "user"
        pieces += [p["text"] for p in record["parts"]
                   if isinstance(p, dict) and p.get("type") == "text"
                   and isinstance(p.get("text"), str)]
    return role, "\n".join(p for p in pieces if p)


@pytest.fixture
def corpus(
    real_transcripts: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[History, list[tuple[int, str]], int]:
    """(history, [(seq, text)] of every message row, seq of the manual floor)."""
    if real_transcripts in _CACHE:
        return _CACHE[real_transcripts]
    root = tmp_path_factory.mktemp("real")
    h = Store(root, durability="off", segment_bytes=8 << 10).history("real")
    converted: list[tuple[str, str]] = []
    for path in sorted(real_transcripts.rglob("*.jsonl")):
        for line in path.read_bytes().splitlines():
            role, text = _text_of(json.loads(line))
            if text:
                converted.append((role, text))
    assert len(converted) > 500
    rows: list[tuple[int, str]] = []
    floor = 0
    for start in range(0, len(converted), 10):
        chunk = converted[start : start + 10]
        batch = [{"kind": "message", "role": role, "parts": [{"type": "text", "text": text}]}
                 for role, text in chunk]
        if start and start % 150 == 0:
            seqs = h.rollover(batch).seqs[2:]
        else:
            seqs = h.append_many(batch).seqs
        rows += zip(seqs, (t for _, t in chunk), strict=True)
        if start == 100:
            floor = h.clear_soft().seqs[0]
    _CACHE[real_transcripts] = (h, rows, floor)
    return h, rows, floor


def call(tool: Any, args: dict[str, Any]) -> dict[str, Any]:
    out = tool.call(args)
    assert len(out.encode("utf-8")) <= 16 * 1024, args
    res = json.loads(out)
    assert "error" not in res, res
    return res


def follow(tool: Any, args: dict[str, Any]) -> list[Any]:
    items: list[Any] = []
    cursor = None
    for _ in range(5000):
        res = call(tool, args if cursor is None else {**args, "cursor": cursor})
        items += res["items"]
        cursor = res["cursor"]
        if cursor is None:
            return items
    raise AssertionError("cursor never ended")


def _queries(rows: list[tuple[int, str]]) -> list[str]:
    rng = random.Random(20251202)
    out = ["→", "—", "✓", "TODO", "Error:", '"type"', "\n\n##", "\\"]
    common = Counter(ch for _, t in rows for ch in t if not ch.isascii())
    out += [ch for ch, _ in common.most_common(4)]
    for _ in range(25):
        _, text = rng.choice(rows)
        if len(text) < 40:
            continue
        at = rng.randrange(0, len(text) - 30)
        q = text[at : at + rng.randrange(8, 30)]
        out.append(q.upper() if rng.random() < 0.3 else q)
    return out


def test_search_finds_exactly_the_rows_that_hold_the_text(
    corpus: tuple[History, list[tuple[int, str]], int],
) -> None:
    h, rows, floor = corpus
    tool = h.session_history()
    eligible = [(s, t) for s, t in rows if s > floor]
    hits = 0
    for q in _queries(eligible):
        folded = q.casefold()
        want = [s for s, t in eligible if folded in t.casefold()]
        items = follow(tool, {"action": "search", "query": q, "limit": 25})
        got = [i["seq"] for i in items]
        assert got == want, q
        hits += len(got)
        for it in items:
            assert len(it["text"]) <= 300 + len(q)
    assert hits > 100


def test_nothing_before_the_floor(corpus: tuple[History, list[tuple[int, str]], int]) -> None:
    h, rows, floor = corpus
    tool = h.session_history()
    before = [(s, t) for s, t in rows if s < floor]
    assert before
    for _, text in before[:: max(1, len(before) // 8)]:
        q = text[:20]
        got = [i["seq"] for i in follow(tool, {"action": "search", "query": q, "limit": 25})]
        assert all(s > floor for s in got), q


def test_read_and_list_windows_over_real_rows(
    corpus: tuple[History, list[tuple[int, str]], int],
) -> None:
    h, rows, floor = corpus
    tool = h.session_history()
    eligible = [(s, t) for s, t in rows if s > floor]
    longest = sorted(eligible, key=lambda r: len(r[1].encode("utf-8")))[-3:]
    nonascii = [r for r in eligible if not r[1].isascii()][:3]
    for seq, text in [*longest, *nonascii]:
        got = "".join(i["text"] for i in follow(tool, {"action": "read", "seq": seq}))
        assert got == text, seq
    windows = follow(tool, {"action": "list", "limit": 7})
    assert windows[0] == {**windows[0], "window": floor, "reason": "manual"}
    assert all(w["reason"] == "rollover" for w in windows[1:])
    # every row after the floor is counted once (plus a lead-in per rollover)
    assert sum(w["rows"] for w in windows) == len(eligible) + len(windows) - 1
