"""tledger fork, rewind and branches through a real subprocess: output, exit
codes (0 done, 1 refused, 2 usage) and one redacted error line."""

from __future__ import annotations

import json
from pathlib import Path

from ledger import Store
from tests.cli.test_core import _one_error_line, tl
from tests.helpers import msg


def _history(root: Path) -> Store:
    store = Store(root, durability="off")
    h = store.history("ws-1")
    h.append(msg("secret"))
    h.clear_soft()  # the floor: seq 2
    for i in range(3):
        h.append_many([msg(f"q{i}"), msg(f"a{i}", "assistant")])  # seqs 3..8
    return store


def test_fork_branches_and_rewind(store_root: Path) -> None:
    store = _history(store_root)
    p = tl(store_root, "fork", "ws-1", "ws-2", "--at", "6", "--json")
    assert p.returncode == 0, p.stderr
    origin = json.loads(p.stdout)
    assert (origin["workspace"], origin["source"], origin["seq"]) == ("ws-2", "ws-1", 6)
    assert origin["epoch"] == store.history("ws-1").epoch
    assert [r.line for r in store.history("ws-2").rows()][:6] == \
        [r.line for r in store.history("ws-1").rows()][:6]

    p = tl(store_root, "branches", "ws-1", "--json")
    assert p.returncode == 0, p.stderr
    assert [b["workspace"] for b in json.loads(p.stdout)] == ["ws-2"]
    p = tl(store_root, "branches", "ws-2")
    assert p.returncode == 0 and b"no forks" in p.stdout

    p = tl(store_root, "stat", "ws-2", "--json", "--no-tokens")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["origin"]["source"] == "ws-1"

    epoch = store.history("ws-1").epoch
    p = tl(store_root, "rewind", "ws-1", "--to", "4", "--expect-epoch", str(epoch), "--json")
    assert p.returncode == 0, p.stderr
    done = json.loads(p.stdout)
    assert done["op"] == "rewind" and done["rewound"] == [5, 6, 7, 8]
    assert [r.seq for r in store.history("ws-1").provider_view()] == [3, 4]
    assert [r.seq for r in store.history("ws-2").provider_view()] == [3, 4, 5, 6]


def test_refusals_exit_1_with_one_line_and_change_nothing(store_root: Path) -> None:
    store = _history(store_root)
    before = [r.line for r in store.history("ws-1").rows()]
    epoch = store.history("ws-1").epoch
    for args, words in [
        (["fork", "ws-1", "ws-2", "--at", "2"], "privacy floor"),
        (["fork", "ws-1", "ws-2", "--at", "5"], "never split"),
        (["fork", "nowhere", "ws-2"], "no history"),
        (["rewind", "ws-1", "--to", "1"], "--restore-cleared"),
        (["rewind", "ws-1", "--to", "5"], "never split"),
        (["rewind", "ws-1", "--to", "4", "--expect-epoch", str(epoch + 1)], "expected epoch"),
    ]:
        p = tl(store_root, *args)
        assert p.returncode == 1, (args, p.stderr)
        assert words in _one_error_line(p), (args, p.stderr)
        assert b"Traceback" not in p.stderr
    assert [r.line for r in store.history("ws-1").rows()] == before
    assert store.history("ws-1").epoch == epoch
    assert store.workspaces() == ["ws-1"]


def test_restore_cleared_is_the_users_flag(store_root: Path) -> None:
    store = _history(store_root)
    p = tl(store_root, "rewind", "ws-1", "--to", "1", "--restore-cleared")
    assert p.returncode == 0, p.stderr
    assert [r.parts[0]["text"] for r in store.history("ws-1").provider_view()] == ["secret"]


def test_usage_errors_exit_2(store_root: Path) -> None:
    _history(store_root)
    for args in (["fork", "ws-1", "../escape"], ["fork", "ws-1", "ws-2", "--at", "x"],
                 ["rewind", "ws-1"], ["rewind", "ws-1", "--to", "x"], ["branches"],
                 ["fork", "ws-1", "bad\x1b[31mid"]):
        p = tl(store_root, *args)
        assert p.returncode == 2, (args, p.stderr)
        assert b"\x1b" not in p.stderr and b"Traceback" not in p.stderr


def test_errors_redact_the_root(tmp_path: Path) -> None:
    root = "postgresql://user:hunter2@127.0.0.1:1/db?connect_timeout=1"
    p = tl(root, "fork", "ws-1", "ws-2")  # type: ignore[arg-type]  # a URL, not a path
    assert p.returncode == 1, p.stderr
    assert b"hunter2" not in p.stderr + p.stdout
