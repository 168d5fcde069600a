"""Without its framework, each integration says which extra to install (and
``tledger mcp`` exits 1 with that message), while the core keeps working."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.helpers import PYTHON, subprocess_env

HIDE = "import sys; sys.modules[{name!r}] = None; "


@pytest.mark.parametrize(("module", "framework", "extra"), [
    ("ledger.integrations.openai_agents", "agents", "agents"),
    ("ledger.integrations.langchain", "langchain_core", "langchain"),
    ("ledger.integrations.mcp_server", "mcp", "mcp"),
    ("ledger.integrations.langgraph", "langgraph", "langgraph"),
    ("ledger.integrations.claude", "claude_agent_sdk", "claude"),
])
def test_a_missing_framework_names_its_extra(module: str, framework: str, extra: str) -> None:
    code = HIDE.format(name=framework) + (
        "import ledger.integrations as i\n"
        f"try:\n    import {module}\nexcept i.MissingExtra as e:\n    print(e)\n"
        "    assert isinstance(e, ImportError) and isinstance(e, i.LedgerError)\n"
        "else:\n    raise SystemExit('imported without its framework')\n")
    done = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True,
                          env=subprocess_env(), timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"pip install 'transcript-ledger[{extra}]'" in done.stdout


def test_tledger_mcp_without_the_extra_exits_1_naming_it(tmp_path: Path) -> None:
    code = HIDE.format(name="mcp") + (
        "from ledger.cli import main\n"
        f"sys.exit(main(['mcp', '--root', {str(tmp_path)!r}, '--workspace', 'ws']))\n")
    done = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True,
                          env=subprocess_env(), timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 1, done.stderr
    assert "transcript-ledger[mcp]" in done.stderr


def test_importing_the_package_imports_no_framework() -> None:
    code = ("import sys, ledger.integrations, ledger.cli\n"
            "ledger.cli.build_parser()\n"
            "print(sorted(m for m in ('agents', 'langchain_core', 'mcp') if m in sys.modules))")
    done = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True,
                          env=subprocess_env(), timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
