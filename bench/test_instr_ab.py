"""``python -m bench.instr_ab``: what its phases run.

Run: ``python -m pytest bench/test_instr_ab.py`` (``bench/`` is outside the
test suite's ``testpaths``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from bench import instr_ab

REPO = Path(__file__).resolve().parent.parent
SCRIPT = "from ledger import Store; from ledger.cli import main"


def _loaded(code: Path) -> list[str]:
    """The files each module under ``code`` was loaded from, the import run
    as a phase runs it: PYTHONDONTWRITEBYTECODE set, as on this project's
    machines."""
    env = {**os.environ, "PYTHONPATH": str(code), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([sys.executable, "-v", "-c", SCRIPT], env=env, cwd=code,
                          capture_output=True, text=True, check=True)
    return re.findall(r"# code object from '?(" + re.escape(str(code)) + r"[^'\s]*)",
                      done.stderr)


def test_the_phases_run_bytecode_and_leave_the_tree_alone(tmp_path: Path) -> None:
    tree = tmp_path / "tree"  # as ``git archive`` leaves one: no bytecode
    for package in instr_ab.PACKAGES:
        shutil.copytree(REPO / package, tree / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    source = _loaded(tree)
    assert source and all(f.endswith(".py") for f in source)  # as a tree is: from source

    code = instr_ab.compiled_copy(tree, tmp_path / "code")
    compiled = _loaded(code)
    assert sorted(os.path.relpath(f, code).replace("__pycache__/", "").split(".")[0]
                  for f in compiled) == sorted(
        os.path.relpath(f, tree).split(".")[0] for f in source)  # the same modules
    assert all(f.endswith(".pyc") for f in compiled)  # each from its bytecode
    assert not list(tree.rglob("__pycache__"))  # nothing written into the tree
