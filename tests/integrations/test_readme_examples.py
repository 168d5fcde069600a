"""The README's "Agent frameworks" examples run offline, as written."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.helpers import PYTHON, REPO, subprocess_env

SECTION = "## Agent frameworks"
EXTRAS = {"agents": "agents", "langchain_core": "langchain", "langchain": "langchain",
          "langgraph": "langgraph", "claude_agent_sdk": "claude", "mcp": "mcp"}
NAMES = ["agents", "langchain", "middleware", "langgraph", "claude", "mcp"]
# What proves an extra installed: langgraph-checkpoint (which the test extra
# brings) also provides the `langgraph` namespace, without the graph.
PROBES = {"langgraph": "langgraph.graph"}


def _blocks(lang: str) -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    section = text[start:end if end >= 0 else None]
    return re.findall(rf"```{lang}\n(.*?)```", section, flags=re.S)


PYTHON_BLOCKS = _blocks("python")


def test_the_section_has_one_example_per_framework() -> None:
    assert len(PYTHON_BLOCKS) == len(NAMES)
    for framework in EXTRAS:
        assert any(f"from {framework}" in block for block in PYTHON_BLOCKS), framework
    assert "RolloverMiddleware" in PYTHON_BLOCKS[2] and "LedgerSaver" in PYTHON_BLOCKS[3]
    assert "LedgerSessionStore" in PYTHON_BLOCKS[4]


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=NAMES)
def test_readme_example_runs_offline(block: str, tmp_path: Path) -> None:
    for module, extra in EXTRAS.items():
        if re.search(rf"from {module}[. ]", block) and \
                importlib.util.find_spec(PROBES.get(module, module)) is None:
            pytest.skip(f"the {extra} extra is not installed "
                        f"(pip install 'transcript-ledger[{extra}]')")
    done = subprocess.run([PYTHON, "-c", block], cwd=tmp_path, env=subprocess_env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
    assert (tmp_path / ".tledger").is_dir()


def test_readme_mcp_config_names_the_command() -> None:
    (config,) = _blocks("json")
    server = json.loads(config)["mcpServers"]["transcript"]
    assert server["command"] == "tledger" and server["args"][0] == "mcp"
