"""The README's runtime-object loop runs offline, as written."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.helpers import PYTHON, REPO, subprocess_env

SECTION = "## Automatic rollover (for agent runtimes)"


def _loop() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    (block,) = re.findall(r"```python\n(.*?)```", text[start:end], flags=re.S)
    return block


def test_readme_loop_is_about_forty_lines() -> None:
    assert 30 <= len(_loop().splitlines()) <= 50


def test_readme_loop_runs_with_rollovers_an_approval_and_retrieval(tmp_path: Path) -> None:
    done = subprocess.run([PYTHON, "-c", _loop()], cwd=tmp_path, env=subprocess_env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    windows, found = re.fullmatch(r"(\d+) windows; the model's search found: (.*)\n",
                                  done.stdout, flags=re.S).groups()  # type: ignore[union-attr]
    # a manual clear and 3+ automatic rollovers
    assert int(windows) >= 5
    # the approved deploy's result was carried with its call into a new window, and
    # the model's session_history search finds it there after later rollovers
    assert '"text":"deployed v42 to prod"' in found
    assert (tmp_path / ".tledger" / "demo").is_dir()
