"""The CLI zoo (issue 20): every registered ``tledger`` command against a zoo of
damaged workspaces. Whatever the damage: no traceback, an exit code in {0, 1, 2},
and an end within a time bound (per invocation, and per driver process).

The driver (``tests/helpers/cli_zoo.py``) runs as one real subprocess that builds
the history and imports the CLI once, then forks: the cases of ``DAMAGE`` in two
processes side by side; each case of ``STORAGE_DAMAGE`` (non-regular files,
symlinks, unreadable segments, a row nested past the stack; a FIFO can hang a
reader) in a process of its own, so one hang cannot hide the others.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import cli_zoo, subprocess_env

PROCESS_SECONDS = 240.0  # a driver process that takes longer has hung


def _drive(work: Path, groups: list[list[str]]) -> dict[str, list[dict[str, Any]]]:
    """Every case of every group (each group in a process of its own)."""
    p = subprocess.Popen([sys.executable, "-m", "tests.helpers.cli_zoo", str(work),
                          *(",".join(g) for g in groups)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL, env=subprocess_env(), cwd=cli_zoo.REPO)
    try:
        stdout, stderr = p.communicate(timeout=PROCESS_SECONDS)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        pytest.fail(f"the zoo driver {p.args!r} did not end within {PROCESS_SECONDS} s")
    assert p.returncode == 0, stderr.decode("utf-8", "replace")[-3000:]
    out: dict[str, list[dict[str, Any]]] = json.loads(stdout)
    expected = {c for g in groups for c in g}
    assert set(out) == expected, sorted(expected ^ set(out))
    return out


@pytest.fixture(scope="module")
def all_cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """The DAMAGE cases in two processes, each STORAGE_DAMAGE case in its own."""
    names = list(cli_zoo.DAMAGE)
    groups = [names[0::2], names[1::2], *([case] for case in cli_zoo.STORAGE_DAMAGE)]
    return _drive(tmp_path_factory.mktemp("zoo"), groups)


@pytest.fixture(scope="module")
def zoo(all_cases: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    return {case: all_cases[case] for case in cli_zoo.DAMAGE}


def problems(results: list[dict[str, Any]]) -> list[str]:
    """What a user would have seen go wrong, one line each."""
    found = []
    for r in results:
        where = " ".join(r["argv"][2:])[:160]
        if r["escaped"]:
            found.append(f"{where}: {r['code']}: {r['escaped'][-600:]}")
        elif r["code"] not in (0, 1, 2):
            found.append(f"{where}: exit code {r['code']}")
        elif "Traceback" in r["stdout"] or "Traceback" in r["stderr"] or \
                "internal error" in r["stderr"]:
            found.append(f"{where}: printed a traceback: {r['stderr'][-600:]}")
        elif r["code"] == 1 and r["stderr"].count("\n") > 1:
            found.append(f"{where}: more than one error line: {r['stderr'][-600:]}")
    return found


@pytest.mark.parametrize("case", list(cli_zoo.DAMAGE))
def test_no_command_prints_a_traceback_or_hangs(
    zoo: dict[str, list[dict[str, Any]]], case: str
) -> None:
    results = zoo[case]
    assert len(results) >= len(cli_zoo.invocations())
    assert not problems(results), "\n".join(problems(results))


def test_every_registered_command_is_driven(zoo: dict[str, list[dict[str, Any]]]) -> None:
    from ledger.cli import build_parser, registry

    build_parser()
    names = {c.name for c in registry.commands()}
    missing = sorted(names - set(cli_zoo.INVOCATIONS))
    assert not missing, f"add invocations for {missing} to tests/helpers/cli_zoo.py INVOCATIONS"
    driven = {r["argv"][2] for r in zoo["clean"]}
    assert names <= driven, sorted(names - driven)


def test_the_zoo_finds_what_it_looks_for(zoo: dict[str, list[dict[str, Any]]]) -> None:
    """The cases are damage the commands notice (so the zoo exercises the damaged
    paths): check fails on damage, and exits 0 on the clean history."""
    def check_code(case: str) -> int:
        [r] = [r for r in zoo[case] if r["argv"][2:4] == ["check", "ws"]]
        return int(r["code"])

    assert check_code("clean") == 0
    for case in ("torn-tail", "flipped-byte", "nul-block", "duplicated-line"):
        assert check_code(case) == 1, case
    deep = [r for r in zoo["clean"] if r["argv"][2:] == ["append", "ws"]]
    assert deep and all(r["code"] == 1 and "nested too deeply" in r["stderr"] for r in deep)


def test_stored_control_characters_never_reach_the_terminal(
    zoo: dict[str, list[dict[str, Any]]]
) -> None:
    for r in zoo["control-characters"]:
        for stream in ("stdout", "stderr"):
            assert "\x1b" not in r[stream] and "\x07" not in r[stream], (r["argv"], stream)


# The storage-side cases (special files, symlinks, unreadable segments, deep
# stored rows): each in a process of its own, so one hang cannot hide another.
@pytest.fixture(scope="module")
def storage_zoo(all_cases: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    return {case: all_cases[case] for case in cli_zoo.STORAGE_DAMAGE}


@pytest.mark.parametrize("case", list(cli_zoo.STORAGE_DAMAGE))
def test_storage_damage_never_prints_a_traceback_or_hangs(
    storage_zoo: dict[str, list[dict[str, Any]]], case: str
) -> None:
    assert not problems(storage_zoo[case]), "\n".join(problems(storage_zoo[case]))


def _ranked(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in results if "--mode" in r["argv"] and "ranked" in r["argv"]]


def test_a_damaged_recall_index_answers_as_a_fresh_one(
    zoo: dict[str, list[dict[str, Any]]]
) -> None:
    """Garbage, flipped pages, a truncated index: ranked search prints what
    it prints on the clean history (the index rebuilt), and check exits 0
    (a damaged projection is a notice; the log is whole)."""
    [clean] = _ranked(zoo["clean"])
    assert clean["code"] == 0 and json.loads(clean["stdout"])["items"]
    for case in ("recall-garbage", "recall-flipped-pages", "recall-truncated"):
        [got] = _ranked(zoo[case])
        assert (got["code"], got["stdout"]) == (0, clean["stdout"]), case
        [chk] = [r for r in zoo[case] if r["argv"][2:4] == ["check", "ws"]]
        assert chk["code"] == 0 and "recall index" in chk["stdout"], (case, chk)


def test_a_linked_recall_index_is_refused(zoo: dict[str, list[dict[str, Any]]]) -> None:
    """A symlink (to a database outside the root, or dangling) or a directory
    at the index's path: ranked search is unavailable and says why, check
    fails (exit 1) naming it; nothing is followed (tests/storage/files/
    test_recall_hardening.py checks the files outside)."""
    for case in ("recall-symlink-outside", "recall-dangling-symlink", "recall-is-a-directory"):
        [got] = _ranked(zoo[case])
        assert got["code"] == 1 and "recall index is not opened" in got["stdout"], (case, got)
        [chk] = [r for r in zoo[case] if r["argv"][2:4] == ["check", "ws"]]
        assert chk["code"] == 1 and "recall index is not opened" in chk["stdout"], (case, chk)
