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

import pytest

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


def test_the_view_phase_views_the_files_benchs_real_window(tmp_path: Path) -> None:
    from bench.corpus import load_corpus
    from ledger import Store

    if not load_corpus().source.startswith("real"):
        pytest.skip("the view phase needs the real transcripts")
    root = str(tmp_path / "h")
    instr_ab.build(root, 0.05, "view")
    rows = instr_ab._real_window()
    h = Store(root).history(instr_ab.WS)
    window = h.window_rows()
    # The window is the real rows, appended as given, and about the files
    # bench's window in stored bytes; the history below it is the usual one.
    assert [r.to_dict()["parts"] for r in window[-len(rows):]] == [r["parts"] for r in rows]
    assert sum(len(r.line) + 1 for r in window) >= 0.9 * instr_ab.VIEW_WINDOW_BYTES
    assert len(window) <= len(rows) + 3
    assert h.snapshot().next_seq > len(rows) + 200
    view = h.provider_view()
    assert len(view) >= len(rows)
    # Orphan tool results are among them (served as text), as in the bench.
    results = sum(1 for r in rows for p in r["parts"] if p.get("type") == "tool_result")
    assert results > 50
    instr_ab.phase("view", root)  # what callgrind counts runs as it is


def test_each_phase_builds_its_own_history_for_it(tmp_path: Path) -> None:
    from ledger import Store

    plain, view = str(tmp_path / "plain"), str(tmp_path / "view")
    instr_ab.build(plain, 0.05)
    instr_ab.build(view, 0.05, "view")
    assert len(Store(plain).history(instr_ab.WS).window_rows()) < 210  # the 200 rows + rollover
    assert len(Store(view).history(instr_ab.WS).window_rows()) > 500
