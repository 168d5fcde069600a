"""Usage and small CLI behaviour (issue 21 item 9, issue 20 item 11): the
positional SEQ of ``history read``, usage errors exit 2 with one line, ``stat``
counts windows and the active window's tokens, malformed roots and numbers."""

from __future__ import annotations

import json
import math
import subprocess
import time
from pathlib import Path

import pytest

from ledger import LedgerError, Store
from tests.helpers import cli_proc, msg, subprocess_env


def tl(root: Path | str, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return cli_proc.run(["--root", str(root), *args], stdin=stdin, timeout=120,
                        env=subprocess_env())


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    h = Store(tmp_path / "s", durability="off").history("ws")
    h.append_many([msg("first question"), msg("first answer", "assistant")])
    h.rollover([msg("go on")])
    h.append(msg("the active window holds this"))
    return tmp_path / "s"


def test_history_read_takes_the_seq_as_a_positional(root: Path) -> None:
    by_flag = tl(root, "history", "ws", "read", "--seq", "1")
    by_position = tl(root, "history", "ws", "read", "1")
    assert by_position.returncode == 0, by_position.stderr
    assert json.loads(by_position.stdout) == json.loads(by_flag.stdout)
    assert json.loads(by_position.stdout)["items"][0]["text"] == "first question"
    listed = tl(root, "history", "ws", "list", "3")  # list WINDOW, like --window 3
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout == tl(root, "history", "ws", "list", "--window", "3").stdout


def test_history_search_takes_more_phrasings_with_also(root: Path) -> None:
    """``--also`` adds phrasings: one ranked call that fuses them."""
    both = tl(root, "history", "ws", "search", "first question", "--also", "answer")
    assert both.returncode == 0, both.stderr
    items = json.loads(both.stdout)["items"]
    assert {i["text"] for i in items} == {"first question", "first answer"}
    h = Store(root).history("ws")
    direct = h.session_history().call({"action": "search",
                                       "query": ["first question", "answer"]})
    assert json.loads(direct)["items"] == items
    five = tl(root, "history", "ws", "search", "a", *["--also", "b"] * 4)
    assert five.returncode == 1 and json.loads(five.stdout)["error"]["code"] == "bad_request"
    literal = tl(root, "history", "ws", "search", "first", "--also", "x", "--mode", "literal")
    assert literal.returncode == 1 and "mode ranked" in literal.stdout.decode()


@pytest.mark.parametrize("args", [
    ["history", "ws", "list", "--also", "x"],
    ["history", "ws", "read", "three"],
    ["history", "ws", "read", "1", "--seq", "2"],
    ["history", "ws", "list", "x"],
    ["purge", "ws", "--quarantine-older-than", "nan"],
    ["purge", "ws", "--quarantine-older-than", "-1"],
    ["rows", "ws", "--after", "soon"],
    ["export", "ws", "--format", "anthropic", "--max-tokens", "-5"],
    ["show", "ws", "--max-lines", "0"],
])
def test_usage_errors_exit_2_with_one_line(root: Path, args: list[str]) -> None:
    p = tl(root, *args)
    assert p.returncode == 2, (args, p.stderr)
    assert b"Traceback" not in p.stderr
    assert p.stderr.decode().strip().splitlines()[-1].startswith("tledger: error:")


def test_stat_counts_windows_and_the_active_window_tokens(root: Path) -> None:
    p = tl(root, "stat", "ws")
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)
    assert report["windows"] == 2  # window 0 and the rollover's
    context = tl(root, "context", "ws").stdout
    counted = json.loads(tl(root, "count", "--rows", stdin=context).stdout)
    tokens = report["window_tokens"]
    assert (tokens["tokens"], tokens["rows"]) == (counted["tokens"], counted["rows"])
    assert tokens["model"] == "gpt-4o" and tokens["encoding"] == counted["encoding"]
    Store(root).history("ws").clear_soft()
    after = json.loads(tl(root, "stat", "ws", "--json").stdout)
    assert after["windows"] == 3 and after["window_tokens"]["rows"] == 0


def test_ls_says_one_workspace(root: Path) -> None:
    from tests.core.test_terminal import _at_terminal

    code, out, err = _at_terminal(root, "ls")
    assert code == 0, err
    assert b"1 workspace under" in out and b"1 workspaces" not in out


@pytest.mark.parametrize("url", [
    "postgresql://u@h:notaport/db",
    "postgresql://u:secret@[::1/db",
    "postgresql://u:secret@h:99999/db",
    "postgresql://h/db?nosuchoption=1",
    "postgres://%zz@h/db",
])
def test_a_malformed_postgresql_url_is_a_usage_error(url: str) -> None:
    pytest.importorskip("psycopg", reason="the [postgres] extra is not installed")
    started = time.monotonic()
    p = tl(url, "ls")
    assert time.monotonic() - started < 20  # no connection attempts, no pool timeout
    assert p.returncode == 2, p.stderr
    err = p.stderr.decode()
    assert err.count("\n") == 1 and "malformed PostgreSQL URL" in err
    assert "secret" not in err and "Traceback" not in err


@pytest.mark.parametrize("value", [math.nan, math.inf, -1.0, "10", True])
def test_store_refuses_a_lock_timeout_that_is_not_a_finite_number(
    tmp_path: Path, value: object
) -> None:
    with pytest.raises(LedgerError, match="lock_timeout"):
        Store(tmp_path, lock_timeout=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(("exc", "code", "text"), [
    (PermissionError(13, "Permission denied", "/x/seg-00000001.jsonl"), 1,
     "tledger: PermissionError: Permission denied: /x/seg-00000001.jsonl"),
    (OSError(30, "Read-only file system"), 1, "tledger: OSError: Read-only file system"),
    (RecursionError("maximum recursion depth exceeded"), 1, "nested too deeply"),
    (MemoryError(), 1, "out of memory"),
    (LedgerError("two\nlines \x1b[2J here"), 1, "tledger: LedgerError: two lines \\x1b[2J here"),
    (AttributeError("'X' object has no attribute 'y'"), 1,
     "tledger: internal error: AttributeError: 'X' object has no attribute 'y' (a bug;"),
])
def test_the_dispatcher_turns_every_failure_into_one_line(
    exc: BaseException, code: int, text: str
) -> None:
    """ledger.cli.run, where every command is dispatched: no traceback, one line."""
    import argparse
    import io

    from ledger.cli import Context, run

    def handler(args: argparse.Namespace, ctx: Context) -> int:
        raise exc

    err = io.StringIO()
    ctx = Context(root="r", stdout=io.StringIO(), stderr=err)
    assert run(argparse.Namespace(handler=handler), ctx) == code
    assert err.getvalue().count("\n") == 1 and text in err.getvalue()


def test_stat_no_tokens_leaves_the_count_out(root: Path) -> None:
    report = json.loads(tl(root, "stat", "ws", "--no-tokens").stdout)
    assert report["window_tokens"] is None and report["windows"] == 2
