"""Terminal-safe output (issue 20, item 5): stored text is untrusted, so every
human-facing output writes its control characters out instead of sending them to
the terminal; JSON and JSONL output stay byte-faithful."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.core.terminal import visible, visible_line
from ledger.transcript.store import Store
from tests.helpers import subprocess_env

# What an attacker plants in tool output or a web page: an OSC 8 link to another
# target, cursor-up + erase-line, a status query (DSR), an OSC 52 clipboard write,
# a C1 CSI, DEL, a bell, a carriage return that overwrites the line, a bidi override.
HOSTILE = ("\x1b]8;;https://evil.example\x07click\x1b]8;;\x07 \x1b[1A\x1b[2K"
           "\x1b[6n \x1b]52;c;cm0gLXJmIH4=\x07 \x9b31m \x7f\x08 spoof\rOK \u202eTXT.EXE")
# Bytes a terminal would act on (UTF-8): ESC, BEL, BS, CR, DEL, C1 CSI, RLO.
ACTIVE = [b"\x1b", b"\x07", b"\x08", b"\r", b"\x7f", b"\xc2\x9b", "\u202e".encode()]
SGR = re.compile(rb"\x1b\[[0-9;]*m")  # the styles rich itself draws


def test_visible_writes_out_every_control_but_tab_and_newline() -> None:
    for code in [*range(0x20), 0x7F, *range(0x80, 0xA0)]:
        ch = chr(code)
        if ch in "\t\n":
            assert visible(ch) == ch
        else:
            assert visible(ch) == f"\\x{code:02x}"
    assert visible("\x1b[31mred") == "\\x1b[31mred"
    assert visible("a\u202eb\u2066c") == "a\\u202eb\\u2066c"
    kept = "tab\there\nnew line é 中 🙂 \u00a0 \u200d"
    assert visible(kept) == kept
    assert visible_line("one\ntwo\x1b[2K  three") == "one two\\x1b[2K three"


@given(st.text())
def test_visible_leaves_no_control_and_changes_nothing_else(text: str) -> None:
    out = visible(text)
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", out)
    assert visible(out) == out
    plain = re.sub("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", "", text)
    if plain == text:
        assert out == text


def _hostile_store(root: Path) -> None:
    h = Store(root, durability="off").history("ws")
    h.append_many([
        {"role": "user", "parts": [{"type": "text", "text": "read " + HOSTILE}]},
        {"role": "assistant", "parts": [
            {"type": "reasoning", "text": "think " + HOSTILE},
            {"type": "tool_call", "id": "c\x1b[2J1", "name": "fetch\x1b]0;title\x07",
             "input": {"url": HOSTILE}}]},
        {"role": "tool", "parts": [{"type": "tool_result", "id": "c\x1b[2J1",
                                    "output": "page " + HOSTILE}]},
    ])


def _at_terminal(root: Path, *args: str) -> tuple[int, bytes, bytes]:
    """tledger with stdout on a pseudo-terminal; the raw bytes it wrote."""
    leader, follower = pty.openpty()
    try:
        p = subprocess.run([sys.executable, "-m", "ledger.cli", "--root", str(root), *args],
                           stdout=follower, stderr=subprocess.PIPE, timeout=120,
                           env={**subprocess_env(), "COLUMNS": "200", "TERM": "xterm"})
        os.close(follower)
        out = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(leader)
    return p.returncode, out, p.stderr


@pytest.mark.parametrize("color", ["auto", "never"])
def test_show_at_a_terminal_sends_no_control_from_stored_text(
    tmp_path: Path, color: str
) -> None:
    root = tmp_path / "s"
    _hostile_store(root)
    code, out, err = _at_terminal(root, "show", "ws", "--no-pager", "--color", color)
    assert code == 0, err
    text = SGR.sub(b"", out).replace(b"\r\n", b"\n")  # the pty turns \n into \r\n
    for active in ACTIVE:
        assert active not in text, (active, text)
    shown = text.decode()
    assert "\\x1b]8;;https://evil.example\\x07click" in shown  # written out, readable
    assert "\\x1b]52;c;cm0gLXJmIH4=\\x07" in shown
    assert "\\x9b31m" in shown and "\\u202eTXT.EXE" in shown
    assert "fetch\\x1b]0;title\\x07" in shown  # a tool name in a title line too


def test_piped_show_and_markdown_export_are_safe_too(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _hostile_store(root)
    for args in (["show", "ws"], ["export", "ws", "--format", "markdown"]):
        p = subprocess.run([sys.executable, "-m", "ledger.cli", "--root", str(root), *args],
                           capture_output=True, timeout=120, env=subprocess_env())
        assert p.returncode == 0, p.stderr
        for active in ACTIVE:
            assert active not in p.stdout, (args, active)
        assert b"\\x1b[1A\\x1b[2K" in p.stdout


def test_json_and_jsonl_output_stay_byte_faithful(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _hostile_store(root)
    stored = [r.line for r in Store(root).history("ws").rows()]
    for args in (["rows", "ws"], ["show", "ws", "--json"], ["export", "ws", "--format",
                                                             "jsonl"]):
        p = subprocess.run([sys.executable, "-m", "ledger.cli", "--root", str(root), *args],
                           capture_output=True, timeout=120, env=subprocess_env())
        assert p.returncode == 0, p.stderr
        got = [json.loads(line) for line in p.stdout.splitlines()]
        assert got[0]["parts"][0]["text"] == "read " + HOSTILE  # every control kept
        assert got == [r.to_dict() for r in Store(root).history("ws").rows()]
        assert [r.encode() for r in p.stdout.decode().splitlines()] == [
            line[: line.rindex(b',"_c"')] + b"}" for line in stored]  # the same bytes


def test_error_lines_write_controls_out(tmp_path: Path) -> None:
    missing = str(tmp_path / "rows\x1b]52;c;eA==\x07.jsonl")
    p = subprocess.run([sys.executable, "-m", "ledger.cli", "--root", str(tmp_path / "s"),
                        "append", "ws", missing], capture_output=True, timeout=120,
                       env=subprocess_env())
    assert p.returncode == 1
    assert b"\x1b" not in p.stderr and b"\x07" not in p.stderr
    assert b"rows\\x1b]52;c;eA==\\x07.jsonl" in p.stderr
    assert p.stderr.count(b"\n") == 1  # one line


def test_tables_write_controls_out(tmp_path: Path) -> None:
    root = tmp_path / "root\x1b[2Jhere"
    Store(root, durability="off").history("ws").append(
        {"role": "user", "parts": [{"type": "text", "text": "hi"}]})
    code, out, err = _at_terminal(root, "ls")
    assert code == 0, err
    text = SGR.sub(b"", out)
    assert b"\x1b" not in text
    assert b"root\\x1b[2Jhere" in text and b"1 workspace " in text
