"""The layer contract (README "How it is built") holds, and its check fails
on an import that runs up a floor."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINT = shutil.which("lint-imports", path=os.path.dirname(sys.executable)) or shutil.which(
    "lint-imports"
)

pytestmark = pytest.mark.skipif(
    LINT is None, reason="import-linter is not installed (pip install -e '.[test]')"
)


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    assert LINT is not None
    return subprocess.run([LINT, "--no-cache"], cwd=root, env=env, capture_output=True,
                          text=True, timeout=120)


def copy_tree(dest: Path) -> Path:
    for name in ("ledger",):
        shutil.copytree(REPO / name, dest / name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", dest / "pyproject.toml")
    return dest


def test_the_repository_keeps_every_contract() -> None:
    p = lint(REPO)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "0 broken" in p.stdout


@pytest.mark.parametrize(
    ("module", "upward", "contract"),
    [
        # core is the bottom floor: it may not import the CLI.
        ("ledger/core/rows.py", "import ledger.cli", "no import runs up a floor"),
        # the engine interface may not import the file engine.
        ("ledger/storage/engine.py", "import ledger.storage.files.segments",
         "engines build on the engine interface"),
        # retrieval's rules may not touch the file engine directly.
        ("ledger/transcript/retrieval/tool.py", "import ledger.storage.files.segments",
         "never touches a path"),
    ],
)
def test_an_upward_import_breaks_the_check(tmp_path: Path, module: str, upward: str,
                                           contract: str) -> None:
    root = copy_tree(tmp_path)
    path = root / module
    path.write_text(path.read_text(encoding="utf-8") + f"\n{upward}  # deliberately wrong\n",
                    encoding="utf-8")
    p = lint(root)
    assert p.returncode != 0, p.stdout
    assert "BROKEN" in p.stdout and contract in p.stdout, p.stdout
