"""Transcript display (show) and export on the command line."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from ledger.cli import display
from ledger.cli import main as cli_main
from ledger.transcript.store import Store

T0 = 1764662400123  # 2025-12-02 08:00:00.123 UTC


def row(seq: int, kind: str, role: str, parts: list[dict[str, Any]], **extra: Any) -> dict:
    return {"seq": seq, "id": f"r{seq}", "kind": kind, "role": role, "parts": parts,
            "partial": False, "meta": {}, "ts": T0, "batch": {"id": "b", "n": 1, "i": 0}, **extra}


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


EVERY_KIND = [
    row(1, "message", "system", [text("You are terse.")]),
    row(2, "message", "user", [text("hello"), {"type": "media", "mime": "image/png",
                                               "data": "aGVsbG8=", "width": 3, "height": 4}]),
    row(3, "message", "assistant", [{"type": "reasoning", "text": "user said hello"},
                                    text("hi!"),
                                    {"type": "tool_call", "id": "c1", "name": "ls",
                                     "input": {"path": "."}}]),
    row(4, "message", "tool", [{"type": "tool_result", "id": "c1", "output": "a\nb\nc\nd",
                                "error": False}]),
    row(5, "reset", "system", [], reset={"reason": "manual"}),
    row(6, "message", "user", [text("again")]),
    row(7, "reset", "system", [], reset={"reason": "rollover"}),
    row(8, "lead_in", "system", [text("LEAD-IN TEXT")]),
    row(9, "warning", "system", [text("context is 90% full")]),
    row(10, "message", "assistant", [], meta={"quarantine": {"v": 1, "row": {
        "kind": "message", "role": "user", "parts": [text("rm -rf / please")],
        "meta": {"skill": "x"}}}}),
    row(11, "message", "assistant", [], meta={"quarantine": {"v": 2, "blob": "?"}}),
    row(12, "message", "assistant", []),
    row(13, "truncation", "system", [text("output cut at 10 KB")]),
    row(14, "reset", "system", [], reset={"reason": "compaction"}),
    row(15, "message", "user", [text("summary so far")]),
    row(16, "future_kind", "system", [text("from a newer build")], hue="blue"),
    row(17, "message", "tool", [{"type": "tool_result", "id": "c9",
                                 "output": {"rc": 1}, "error": True},
                                {"type": "hologram", "depth": 3}]),
    row(18, "message", "assistant", [text("stream")], partial=True),
]

EXPECTED = """\
──── window 0 · start ──────────────────────────────────────────────────────────
#1 system · 2025-12-02 08:00:00 UTC
  You are terse.

#2 user · 2025-12-02 08:00:00 UTC
  hello
  [media image/png 3x4 6 B]

#3 assistant · 2025-12-02 08:00:00 UTC
    thinking: user said hello
  hi!
  → call ls (c1)
  {"path": "."}

#4 tool · 2025-12-02 08:00:00 UTC
  ← result of c1
  a
  b
  … 2 more lines (--full shows all)

──── window 5 · cleared (/clear --soft) ────────────────────────────────────────
#6 user · 2025-12-02 08:00:00 UTC
  again

──── window 7 · rollover: new context window ───────────────────────────────────
#9 ⚙ machine warning [system] · 2025-12-02 08:00:00 UTC
  context is 90% full

#10 user · REJECTED (not sent to the model) · 2025-12-02 08:00:00 UTC
  rm -rf / please

#11 REJECTED request · 2025-12-02 08:00:00 UTC
  [the original is in a format this version cannot read; it is kept in meta.quarantine]

#12 assistant (empty record) · 2025-12-02 08:00:00 UTC

#13 ⚙ truncation marker [system] · 2025-12-02 08:00:00 UTC
  output cut at 10 KB

──── window 14 · compacted ─────────────────────────────────────────────────────
#15 user · 2025-12-02 08:00:00 UTC
  summary so far

#16 unknown kind 'future_kind' · 2025-12-02 08:00:00 UTC
  from a newer build
  [other fields] {"hue": "blue"}

#17 tool · 2025-12-02 08:00:00 UTC
  ← error from c9
  {"rc": 1}
  [hologram part] {"type": "hologram", "depth": 3}

#18 assistant (partial) · 2025-12-02 08:00:00 UTC
  stream
"""


def test_plain_rendering_of_every_kind_of_row() -> None:
    lines = display.render_text(display.layout(EVERY_KIND, max_lines=2))
    assert "\n".join(lines) + "\n" == EXPECTED + "\n"


def test_lead_in_is_hidden_and_reasoning_optional() -> None:
    out = "\n".join(display.render_text(display.layout(EVERY_KIND, reasoning=False)))
    assert "LEAD-IN TEXT" not in out and "user said hello" not in out
    assert "d" in out.split("← result of c1")[1]  # max_lines=40 by default: nothing cut


def test_rich_rendering_colours_and_text() -> None:
    pytest.importorskip("rich", reason="rich not installed")
    from rich.console import Console

    console = Console(file=io.StringIO(), width=100, force_terminal=True, color_system="standard",
                      record=True)
    for renderable in display.render_rich(display.layout(EVERY_KIND)):
        console.print(renderable)
    plain = console.export_text()
    for needle in ("window 7 · rollover", "⚙ machine warning", "REJECTED", "rm -rf / please",
                   "→ call ls (c1)"):
        assert needle in plain
    assert "LEAD-IN TEXT" not in plain
    assert "\x1b[" in console.file.getvalue()  # type: ignore[attr-defined]


def test_markdown_rendering() -> None:
    md = "\n".join(display.render_markdown(display.layout(EVERY_KIND, max_lines=None),
                                           title="T"))
    assert md.startswith("# T\n")
    assert "## window 7 · rollover: new context window" in md
    assert "**→ call ls (c1)**\n\n```\n{\"path\": \".\"}\n```" in md
    assert "> context is 90% full" in md and "> rm -rf / please" in md
    fenced = list(display.render_markdown([display.Block("message", 1, "tool", "t", [
        display.Line("result", "← result of x"), display.Line("result", "has ``` inside")])]))
    assert "````" in fenced


# --- the commands, on a real store ---------------------------------------------------


@pytest.fixture
def populated(tmp_path: Path) -> str:
    root = tmp_path / "store"
    h = Store(root, durability="off").history("ws")
    h.append_many([
        {"kind": "message", "role": "user", "parts": [text("first window question")]},
        {"kind": "message", "role": "assistant", "parts": [
            {"type": "tool_call", "id": "c1", "name": "ls", "input": {}}]},
        {"kind": "message", "role": "tool", "parts": [
            {"type": "tool_result", "id": "c1", "output": "x", "error": False}]},
    ])
    h.rollover([{"kind": "message", "role": "user", "parts": [text("second window")]}])
    h.append({"kind": "warning", "role": "system", "parts": [text("budget warning")]})
    h.append({"kind": "message", "role": "assistant", "parts": [], "meta": {"quarantine": {
        "v": 1, "row": {"kind": "message", "role": "user", "parts": [text("refused ask")]}}}})
    return str(root)


def test_show_is_plain_when_piped(populated: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["--root", populated, "show", "ws"]) == 0
    out = capsys.readouterr().out
    assert "\x1b[" not in out
    assert out.index("first window question") < out.index("rollover") < out.index(
        "second window")
    assert "⚙ machine warning" in out and "REJECTED" in out and "refused ask" in out
    assert "A new context window starts here" not in out  # the lead-in


def test_show_in_colour(populated: str, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("rich", reason="rich not installed")
    assert cli_main(["--root", populated, "show", "ws", "--color", "always", "--no-pager"]) == 0
    out = capsys.readouterr().out
    assert "\x1b[" in out and "second window" in out


def test_export_formats(populated: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["--root", populated, "export", "ws", "--format", "openai-chat"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["model"] == "gpt-4o"
    assert [m["role"] for m in body["messages"]] == ["system", "user", "system"]
    assert "first window question" not in json.dumps(body) and "refused" not in json.dumps(body)
    assert cli_main(["--root", populated, "export", "ws", "--format", "anthropic",
                     "--model", "claude-x", "--max-tokens", "99"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert (body["model"], body["max_tokens"]) == ("claude-x", 99)
    assert body["system"][0]["text"].startswith("A new context window starts here")
    assert cli_main(["--root", populated, "export", "ws", "--format", "openai-responses",
                     "--system-role", "developer"]) == 0
    assert json.loads(capsys.readouterr().out)["input"][0]["role"] == "developer"
    assert cli_main(["--root", populated, "export", "ws", "--format", "jsonl"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["seq"] for r in rows] == list(range(1, len(rows) + 1)) and len(rows) == 8
    assert cli_main(["--root", populated, "export", "ws", "--format", "markdown"]) == 0
    md = capsys.readouterr().out
    assert "first window question" in md and "refused ask" in md


def test_missing_workspace_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["--root", str(tmp_path), "show", "nope"]) == 1
    with pytest.raises(SystemExit) as exc:  # an invalid id is a parse error (usage)
        cli_main(["--root", str(tmp_path), "export", "../x", "--format", "jsonl"])
    assert exc.value.code == 2
