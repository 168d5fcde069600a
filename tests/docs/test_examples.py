"""Every fenced Python block of docs/ and the README runs, each in a new
temporary directory, in a fresh interpreter, and exits 0 (markers:
docsgen/examples.py). Some blocks also print what their page promises; the
checks below hold them to it."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from docsgen.examples import Block, all_blocks, blocks_of
from tests.helpers import PYTHON, REPO, subprocess_env

BLOCKS = [b for b in all_blocks() if not b.continued]


def _tutorial(out: str, cwd: Path) -> None:
    windows, found = re.fullmatch(r"(\d+) windows; the model's search found: (.*)\n",
                                  out, flags=re.S).groups()  # type: ignore[union-attr]
    # a manual clear and 3+ automatic rollovers
    assert int(windows) >= 5
    # the approved deploy's result was carried with its call into a new window, and
    # the model's session_history search finds it there after later rollovers
    assert '"text":"deployed v42 to prod"' in found
    assert (cwd / ".tledger" / "demo").is_dir()


def _session_history(out: str, cwd: Path) -> None:
    listed, literal, ranked, fused, missing = (json.loads(line) for line in out.splitlines())
    assert [w["window"] for w in listed["items"]] == [0, 3]
    assert [i["seq"] for i in literal["items"]] == [1]
    assert ranked["items"][0]["seq"] == 1 and ranked["items"][0]["score"] > 0
    assert fused["items"][0]["seq"] == 1  # two phrasings, one call
    assert missing["error"]["code"] == "not_found"


def _recall(out: str, cwd: Path) -> None:
    result = json.loads(out)
    assert "Business Administration" in result["items"][0]["text"]


def _stored(out: str, cwd: Path) -> None:
    assert out.strip(), "the example printed nothing"
    assert (cwd / ".tledger").is_dir()


CHECKS: dict[str, Callable[[str, Path], None]] = {
    "docs/tutorial.md": _tutorial,
    "docs/reference/session-history.md": _session_history,
    "docs/explanation/recall.md": _recall,
}


def _check_of(block: Block) -> Callable[[str, Path], None] | None:
    if block.page in CHECKS:
        return CHECKS[block.page]
    return _stored if block.page.startswith("docs/how-to/") else None


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_the_example_runs(block: Block, tmp_path: Path) -> None:
    why = block.missing()
    if why:
        pytest.skip(why)
    done = subprocess.run([PYTHON, "-c", block.code], cwd=tmp_path, env=subprocess_env(),
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"{block.id} failed:\n{done.stderr}"
    check = _check_of(block)
    if check is not None:
        check(done.stdout, tmp_path)


def test_the_tutorial_is_about_forty_lines_and_does_what_it_says() -> None:
    (loop,) = blocks_of(REPO / "docs" / "tutorial.md")
    assert 30 <= len(loop.code.splitlines()) <= 50
    for needle in ("Conversation.open", "conv.clear()", "session_history", "conv.record",
                   "tool_call"):
        assert needle in loop.code, needle


def test_every_how_to_guide_of_a_framework_has_a_runnable_example() -> None:
    guides = {"openai-agents": "agents", "langchain": "langchain", "langgraph": "langgraph",
              "claude-agent-sdk": "claude", "mcp": "mcp"}
    for page, extra in guides.items():
        blocks = blocks_of(REPO / "docs" / "how-to" / f"{page}.md")
        assert blocks and all(b.skip is None for b in blocks), page
        assert all(extra in b.requires for b in blocks), page
    middleware = blocks_of(REPO / "docs" / "how-to" / "langchain.md")
    assert any("RolloverMiddleware" in b.code for b in middleware)


def test_the_mcp_guide_s_config_names_the_command() -> None:
    text = (REPO / "docs" / "how-to" / "mcp.md").read_text(encoding="utf-8")
    (config,) = re.findall(r"```json\n(.*?)```", text, flags=re.S)
    server = json.loads(config)["mcpServers"]["transcript"]
    assert server["command"] == "tledger" and server["args"][0] == "mcp"


def test_markers_are_read_as_documented(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("intro\n\n```python\nx = 1\n```\n\n<!-- example: continue -->\n"
                    "```python\nprint(x)\n```\n\n<!-- example: requires mcp -->\n"
                    "```python\nimport mcp\n```\n\n<!-- example: skip needs a server -->\n"
                    "```python\nconnect()\n```\n", encoding="utf-8")
    import docsgen.examples as ex

    old = ex.REPO
    ex.REPO = tmp_path
    try:
        first, second, third, fourth = blocks_of(page)
    finally:
        ex.REPO = old
    assert first.continued and not second.continued
    assert second.code == "x = 1\n\nprint(x)\n"
    assert third.requires == ("mcp",) and fourth.skip == "needs a server"
    assert fourth.missing() == "needs a server"
