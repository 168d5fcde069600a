"""Realistic row content for the benchmarks, derived at run time.

The rows come from ``../shared/real-transcripts`` (Claude Code, Codex and mux
session logs that other people published), converted to canonical caller rows:
text, reasoning, tool calls and tool results with their real sizes and
characters. Nothing is copied into the repository; when the directory is absent
the corpus falls back to synthetic text (seeded, so runs compare) and says so
in ``Corpus.source``.
"""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

REPO = Path(__file__).resolve().parents[1]
# ``TLEDGER_BENCH_TRANSCRIPTS`` names the folder for a tree that has no
# ``../shared`` beside it (a ``git archive`` of an older commit for an A/B).
REAL_TRANSCRIPTS = Path(os.environ.get("TLEDGER_BENCH_TRANSCRIPTS")
                        or REPO.parent / "shared" / "real-transcripts")

# Bytes a stored line adds to the caller row: seq, id, kind, partial, meta,
# ts, batch and the checksum. Used only to size what the generators emit.
STORED_OVERHEAD = 190

# A query that occurs nowhere in the corpus, so a search scans everything.
MISSING_QUERY = "quokka-zebrafish-7781"

_encoder = msgspec.json.Encoder()


@dataclass
class Corpus:
    """Caller rows (templates) and a pool of plain text, with their origin."""

    rows: list[dict[str, Any]]
    sizes: list[int]  # approximate stored bytes of each template
    text: str  # every text part joined, for sized text rows and token counts
    source: str  # "real-transcripts (N files)" or "synthetic (…)"

    def batches(
        self, total_bytes: int, seed: int, start: int = 0
    ) -> Iterator[list[dict[str, Any]]]:
        """Batches of 1 to 4 consecutive template rows (as real turns come)
        until about ``total_bytes`` of stored lines; deterministic per seed."""
        rnd = random.Random(seed)
        i = start % len(self.rows)
        written = 0
        while written < total_bytes:
            n = rnd.choice((1, 1, 2, 2, 3, 4))
            batch = []
            for _ in range(n):
                batch.append(self.rows[i])
                written += self.sizes[i]
                i = (i + 1) % len(self.rows)
                if written >= total_bytes:
                    break
            yield batch

    def window_rows(self, count: int, seed: int, *, calls: bool = True) -> list[dict[str, Any]]:
        """``count`` template rows picked by seed (the fixed active window).
        ``calls=False`` leaves out rows with tool calls or results: random
        picks would leave calls open or results without their call, and
        ``History.rollover`` refuses to seal either."""
        rnd = random.Random(seed)
        tool = ("tool_call", "tool_result")
        picks = [r for r, s in zip(self.rows, self.sizes, strict=True) if s < 64 << 10
                 and (calls or not any(isinstance(p, dict) and p.get("type") in tool
                                       for p in r.get("parts", ())))]
        return [rnd.choice(picks) for _ in range(count)]

    def window_of_bytes(self, total_bytes: int, seed: int) -> list[dict[str, Any]]:
        """Template rows, picked by seed, that fill about ``total_bytes``."""
        rnd = random.Random(seed)
        out = []
        size = 0
        while size < total_bytes:
            k = rnd.randrange(len(self.rows))
            if self.sizes[k] > total_bytes - size + 4096:
                continue
            out.append(self.rows[k])
            size += self.sizes[k]
        return out

    def text_of_bytes(self, n_bytes: int, offset: int) -> str:
        """A slice of real text whose UTF-8 encoding is at most ``n_bytes``."""
        start = offset % max(1, len(self.text) - n_bytes)
        piece = self.text[start : start + n_bytes]
        while len(piece.encode("utf-8")) > n_bytes:
            piece = piece[: -max(1, (len(piece.encode("utf-8")) - n_bytes) // 3)]
        return piece

    def sized_batch(self, rows: int, row_bytes: int, k: int) -> list[dict[str, Any]]:
        """The append benchmark's batch: ``rows`` rows of about ``row_bytes``
        stored bytes each, text from the corpus, roles of a real turn."""
        roles = ("user", "assistant", "assistant", "tool")
        text_bytes = row_bytes - STORED_OVERHEAD - 50  # the part's keys and the row's own
        return [
            {
                "kind": "message",
                "role": roles[j % len(roles)],
                "parts": [_text(self.text_of_bytes(text_bytes, 7919 * (k * rows + j)))],
            }
            for j in range(rows)
        ]


def load_corpus() -> Corpus:
    """The real-transcript corpus, or a synthetic one when it is absent."""
    if REAL_TRANSCRIPTS.is_dir():
        files = sorted(REAL_TRANSCRIPTS.rglob("*.jsonl"))
        rows: list[dict[str, Any]] = []
        for path in files:
            rows.extend(_convert_file(path))
        if rows:
            return _finish(rows, f"real-transcripts ({len(files)} files, {len(rows)} rows)")
    # Said on stderr, not only in the run's header: an A/B whose two sides ran on
    # different corpora compares the corpora, not the trees.
    print(f"bench: no real transcripts at {REAL_TRANSCRIPTS}: synthetic rows instead; "
          "numbers are not comparable with a run on the real ones (set "
          "TLEDGER_BENCH_TRANSCRIPTS to the folder)", file=sys.stderr)
    return _finish(_synthetic_rows(), f"synthetic (no {REAL_TRANSCRIPTS})")


def _finish(rows: list[dict[str, Any]], source: str) -> Corpus:
    sizes = [len(_encoder.encode(r)) + STORED_OVERHEAD for r in rows]
    texts = []
    for r in rows:
        for p in r["parts"]:
            if p.get("type") == "text":
                texts.append(p["text"])
            elif p.get("type") == "tool_result" and isinstance(p.get("output"), str):
                texts.append(p["output"])
    return Corpus(rows, sizes, "\n".join(texts), source)


# --- conversion of the three real formats -----------------------------------


def _text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def _row(role: str, parts: list[dict[str, Any]], source: str) -> dict[str, Any]:
    return {"kind": "message", "role": role, "parts": parts, "meta": {"source": source}}


def _convert_file(path: Path) -> Iterator[dict[str, Any]]:
    kind = path.parent.name
    with open(path, "rb") as f:
        for line in f:
            try:
                obj = msgspec.json.decode(line)
            except msgspec.DecodeError:
                continue
            if not isinstance(obj, dict):
                continue
            if kind == "codex":
                yield from _codex(obj)
            elif kind == "mux":
                yield from _mux(obj)
            else:
                yield from _claude(obj)


def _claude(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if obj.get("type") not in ("user", "assistant"):
        return
    msg = obj.get("message")
    if not isinstance(msg, dict):
        return
    role = "assistant" if obj["type"] == "assistant" else "user"
    content = msg.get("content")
    if isinstance(content, str):
        yield _row(role, [_text(content)], "claude-code")
        return
    if not isinstance(content, list):
        return
    parts: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for p in content:
        if not isinstance(p, dict):
            continue
        t = p.get("type")
        if t == "text" and isinstance(p.get("text"), str):
            parts.append(_text(p["text"]))
        elif t == "thinking" and isinstance(p.get("thinking"), str):
            parts.append({"type": "reasoning", "text": p["thinking"]})
        elif t == "tool_use":
            parts.append({"type": "tool_call", "id": str(p.get("id")), "name": str(p.get("name")),
                          "input": p.get("input")})
        elif t == "tool_result":
            results.append({"type": "tool_result", "id": str(p.get("tool_use_id")),
                            "output": p.get("content"), "error": bool(p.get("is_error", False))})
    if parts:
        yield _row(role, parts, "claude-code")
    if results:
        yield _row("tool", results, "claude-code")


def _codex(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if obj.get("type") != "response_item" or not isinstance(obj.get("payload"), dict):
        return
    p = obj["payload"]
    t = p.get("type")
    if t == "message":
        role = {"user": "user", "assistant": "assistant"}.get(p.get("role"), "system")
        parts = [_text(c["text"]) for c in p.get("content") or []
                 if isinstance(c, dict) and isinstance(c.get("text"), str)]
        if parts:
            yield _row(role, parts, "codex")
    elif t == "function_call":
        call = {"type": "tool_call", "id": str(p.get("call_id")), "name": str(p.get("name")),
                "input": p.get("arguments")}
        yield _row("assistant", [call], "codex")
    elif t == "function_call_output":
        yield _row("tool", [{"type": "tool_result", "id": str(p.get("call_id")),
                             "output": p.get("output"), "error": False}], "codex")
    elif t == "reasoning":
        texts = [s["text"] for s in p.get("summary") or []
                 if isinstance(s, dict) and isinstance(s.get("text"), str)]
        if texts:
            yield _row("assistant", [{"type": "reasoning", "text": "\n".join(texts)}], "codex")


def _mux(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    role = obj.get("role")
    if role not in ("user", "assistant") or not isinstance(obj.get("parts"), list):
        return
    parts: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    reasoning: list[str] = []
    for p in obj["parts"]:
        if not isinstance(p, dict):
            continue
        t = p.get("type")
        if t == "reasoning" and isinstance(p.get("text"), str):
            reasoning.append(p["text"])  # streamed deltas: one part, as a store keeps it
            continue
        if reasoning:
            parts.append({"type": "reasoning", "text": "".join(reasoning)})
            reasoning = []
        if t == "text" and isinstance(p.get("text"), str):
            parts.append(_text(p["text"]))
        elif t == "dynamic-tool":
            cid = str(p.get("toolCallId"))
            parts.append({"type": "tool_call", "id": cid, "name": str(p.get("toolName")),
                          "input": p.get("input")})
            results.append({"type": "tool_result", "id": cid, "output": p.get("output"),
                            "error": False})
    if reasoning:
        parts.append({"type": "reasoning", "text": "".join(reasoning)})
    if parts:
        yield _row(role, parts, "mux")
    if results:
        yield _row("tool", results, "mux")


# --- synthetic fallback ------------------------------------------------------

_WORDS = (
    "the of and to in is for that with on as it by this file function test error value "
    "return import class def self path line write read commit segment batch window token "
    "cursor receipt history agent model tool call result user assistant python rust json "
    "größe naïve café → … — 日本語 테스트 emoji 🙂"
).split()


def _synthetic_rows(n: int = 3000, seed: int = 8) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    rows = []
    for i in range(n):
        words = rnd.choices(_WORDS, k=int(rnd.lognormvariate(5.5, 1.0)) + 5)
        text = " ".join(words)
        if i % 3 == 2:
            rows.append(_row("assistant", [{"type": "tool_call", "id": f"c{i}", "name": "bash",
                                            "input": {"command": text[:200]}}], "synthetic"))
            rows.append(_row("tool", [{"type": "tool_result", "id": f"c{i}", "output": text,
                                       "error": False}], "synthetic"))
        else:
            rows.append(_row("user" if i % 3 == 0 else "assistant", [_text(text)], "synthetic"))
    return rows
