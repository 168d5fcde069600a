"""Conventions every tledger command shares, driven through the real CLI."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from ledger.cli import build_parser
from tests.helpers import cli_proc
from tests.helpers import subprocess_env as cli_env

PYTHON_CLI = ["-m", "ledger.cli"]


def tl(root: Path | None, *args: str, stdin: bytes = b"",
       env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:

    base = ["--root", str(root)] if root else []
    return cli_proc.run([*base, *args], stdin=stdin, timeout=120, env=env or cli_env())


def commands() -> dict[str, object]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return dict(sub.choices)  # type: ignore[attr-defined]


def test_every_command_accepts_json() -> None:
    for name, command in commands().items():
        flags = [o for a in command._actions for o in a.option_strings]  # type: ignore[attr-defined]
        assert "--json" in flags, name


@pytest.mark.parametrize("position", ["after", "before"])
@pytest.mark.parametrize("command", ["stat", "rows", "context"])
def test_json_before_or_after_the_workspace(tmp_path: Path, command: str, position: str) -> None:
    root = tmp_path / "s"
    assert tl(root, "append", "ws", stdin=b'{"role":"user","parts":[]}\n').returncode == 0
    args = [command, "ws", "--json"] if position == "after" else [command, "--json", "ws"]
    p = tl(root, *args)
    assert p.returncode == 0, p.stderr
    for line in p.stdout.decode().splitlines():
        json.loads(line)
    if command == "stat":
        assert json.loads(p.stdout)["workspace"] == "ws"


def test_ls_json_is_a_list_and_plain_ls_one_id_a_line(tmp_path: Path) -> None:
    root = tmp_path / "s"
    for ws in ("b", "a"):
        tl(root, "append", ws, stdin=b'{"role":"user","parts":[]}\n')
    assert json.loads(tl(root, "ls", "--json").stdout) == ["a", "b"]
    assert tl(root, "ls").stdout.decode().split() == ["a", "b"]


@pytest.mark.parametrize("command", ["append", "clear", "rows", "stat", "check", "history"])
def test_an_invalid_workspace_is_reported_first(tmp_path: Path, command: str) -> None:
    args = [command, "../x"] + (["list"] if command == "history" else [])
    p = tl(tmp_path / "s", *args, stdin=b"")  # empty input: no "no rows" first
    assert p.returncode == 2, p.stderr
    err = p.stderr.decode()
    assert "'../x'" in err and "workspace id" in err
    assert "no rows" not in err
    assert not (tmp_path / "s").exists()


def test_demo_runs_in_the_root_it_is_given(tmp_path: Path) -> None:
    root = tmp_path / "demo-root"
    p = tl(root, "demo")
    assert p.returncode == 0, p.stderr
    assert str(root) in p.stdout.decode()
    assert (root / "demo").is_dir()
    again = tl(root, "demo")  # never mixes a second demo into existing data
    assert again.returncode == 1 and b"already holds" in again.stderr


def test_demo_uses_tledger_root_from_the_environment(tmp_path: Path) -> None:
    root = tmp_path / "env-root"
    p = tl(None, "demo", env={**cli_env(), "TLEDGER_ROOT": str(root)})
    assert p.returncode == 0, p.stderr
    assert (root / "demo").is_dir()


def at_terminal(root: Path, *args: str) -> tuple[int, str]:
    """Run tledger with stdout on a pseudo-terminal, as a person would."""
    import os
    import pty
    import sys

    leader, follower = pty.openpty()
    try:
        p = subprocess.run([sys.executable, *PYTHON_CLI, "--root", str(root), *args],
                           stdout=follower, stderr=subprocess.PIPE, timeout=120,
                           env={**cli_env(), "COLUMNS": "160"})
        os.close(follower)
        out = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(leader)
    return p.returncode, re.sub(r"\x1b\[[0-9;]*m", "", out.decode())  # styles aside


def test_stat_prints_for_people_at_a_terminal_and_json_when_piped(tmp_path: Path) -> None:
    root = tmp_path / "s"
    tl(root, "append", "ws", stdin=b'{"role":"user","parts":[]}\n')
    piped = tl(root, "stat", "ws")
    assert json.loads(piped.stdout)["rows"] == 1  # the DESIGN.md 12 document, unchanged
    code, text = at_terminal(root, "stat", "ws")
    assert code == 0
    assert "epoch" in text and "next seq" in text and "ws" in text
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    tty_json = tl(root, "stat", "ws", "--json")
    assert json.loads(tty_json.stdout)["workspace"] == "ws"


def test_ls_draws_a_table_at_a_terminal(tmp_path: Path) -> None:
    root = tmp_path / "s"
    tl(root, "append", "alpha", stdin=b'{"role":"user","parts":[]}\n' * 3)
    tl(root, "clear", "alpha")
    tl(root, "append", "beta", stdin=b'{"role":"user","parts":[]}\n')
    code, text = at_terminal(root, "ls")
    assert code == 0
    lines = [line.split() for line in text.splitlines() if line.strip()]
    assert lines[0][:2] == ["workspace", "last"]
    assert ["alpha", "4", "4", "4"] == lines[1][:4]  # the reset at 4: window and floor
    assert ["beta", "1", "0", "-"] == lines[2][:4]
    assert "2 workspaces" in text


def test_check_draws_its_findings_as_a_table_at_a_terminal(tmp_path: Path) -> None:
    root = tmp_path / "s"
    tl(root, "append", "ws", stdin=b'{"role":"user","parts":[{"type":"text","text":"hi"}]}\n')
    segment = next((root / "ws").glob("seg-*"))
    data = bytearray(segment.read_bytes())
    data[-5] ^= 0x01  # one flipped bit in the row: its checksum fails
    segment.write_bytes(bytes(data))
    piped = tl(root, "check", "ws")
    assert piped.returncode == 1 and b"damaged" in piped.stdout
    code, text = at_terminal(root, "check", "ws")
    assert code == 1
    header = text.splitlines()[0].split()
    assert header == ["severity", "where", "seq", "problem", "action"]
    assert "damage" in text and "tledger repair ws" in text
    assert "ws: damaged: 1 damage" in text


def test_show_and_delete_answer_json(tmp_path: Path) -> None:
    root = tmp_path / "s"
    tl(root, "append", "ws", stdin=b'{"role":"user","parts":[{"type":"text","text":"hi"}]}\n')
    shown = tl(root, "show", "ws", "--json")
    assert [json.loads(line)["seq"] for line in shown.stdout.decode().splitlines()] == [1]
    deleted = tl(root, "delete", "ws", "--yes", "--json")
    assert json.loads(deleted.stdout) == {"workspace": "ws", "deleted": True}


def test_every_command_is_declared_once_with_an_example() -> None:
    from ledger.cli import registry

    declared = registry.commands()
    assert [c.name for c in declared] == list(commands())
    assert all(c.example.startswith("tledger ") for c in declared)
    with pytest.raises(ValueError, match="declared twice"):
        registry.command("stat", help="h", description="d", example="tledger stat x")(
            lambda args, ctx: 0)
