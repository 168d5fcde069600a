"""The core CLI commands through a real subprocess: output and exit codes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from ledger import Store
from tests.helpers import REPO, cli_proc, msg, subprocess_env, tree


def tl(root: Path, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return cli_proc.run(["--root", str(root), *args],
                        stdin=stdin if stdin is not None else b"", cwd=REPO,
                        env=subprocess_env(), timeout=60)


def jsonl(data: bytes) -> list[dict[str, Any]]:
    # Split on b"\n" only: U+2028, NEL or a CR inside a row are not line ends.
    return [json.loads(line) for line in data.split(b"\n") if line]


def _one_error_line(p: subprocess.CompletedProcess[bytes]) -> str:
    err = p.stderr.decode()
    assert err.endswith("\n") and err.count("\n") == 1, f"stderr is not one line: {err!r}"
    return err


ODD = "line\u2028sep\u2029para\x85nel\rcr\x00nul \U0001f600 \"q\" \\"


def test_append_file_and_stdin_rows_stat_ls_clear_context(store_root: Path, tmp_path: Path) -> None:
    src = tmp_path / "rows.jsonl"
    rows = [msg("hello"), msg(ODD, role="assistant", extra={"keep": [1, {"x": None}]})]
    src.write_bytes(b"\n".join(json.dumps(r, ensure_ascii=False).encode() for r in rows) + b"\n")
    p = tl(store_root, "append", "ws-1", str(src))
    assert p.returncode == 0, p.stderr
    first = json.loads(p.stdout)
    assert list(first) == ["seqs", "epoch", "window"]
    assert first["seqs"] == [1, 2] and first["window"] == 0 and isinstance(first["epoch"], int)

    p = tl(store_root, "append", "ws-1", stdin=json.dumps(msg("from stdin")).encode() + b"\r\n")
    assert p.returncode == 0, p.stderr
    second = json.loads(p.stdout)
    assert second["seqs"] == [3] and second["epoch"] == first["epoch"]

    p = tl(store_root, "append", "ws-1", "-", stdin=json.dumps(msg("dash")).encode())
    assert p.returncode == 0 and json.loads(p.stdout)["seqs"] == [4]

    p = tl(store_root, "rows", "ws-1")
    assert p.returncode == 0, p.stderr
    out = jsonl(p.stdout)
    api = [r.to_dict() for r in Store(store_root).history("ws-1").rows()]
    assert out == api
    assert [r["seq"] for r in out] == [1, 2, 3, 4]
    assert out[1]["parts"][0]["text"] == ODD and out[1]["extra"] == {"keep": [1, {"x": None}]}
    assert list(out[1])[:9] == ["seq", "id", "kind", "role", "parts", "partial", "meta", "ts",
                                "batch"]
    assert "_c" not in out[0]

    p = tl(store_root, "rows", "ws-1", "--after", "2")
    assert p.returncode == 0 and [r["seq"] for r in jsonl(p.stdout)] == [3, 4]

    p = tl(store_root, "stat", "ws-1")
    assert p.returncode == 0, p.stderr
    st = json.loads(p.stdout)
    assert st["workspace"] == "ws-1" and st["next_seq"] == 5 and st["rows"] == 4
    assert st["receipt"]["status"] == "stable" and st["receipt"]["stamps_match"] is True
    assert st["epoch"] == first["epoch"] and st["floor"] is None

    Store(store_root, durability="off").history("ws-0").append(msg())
    p = tl(store_root, "ls")
    assert p.returncode == 0 and p.stdout == b"ws-0\nws-1\n"

    p = tl(store_root, "context", "ws-1")
    assert p.returncode == 0 and [r["seq"] for r in jsonl(p.stdout)] == [1, 2, 3, 4]

    p = tl(store_root, "clear", "ws-1")
    assert p.returncode == 0, p.stderr
    cleared = json.loads(p.stdout)
    assert cleared == {"seqs": [5], "epoch": first["epoch"], "window": 5}
    p = tl(store_root, "context", "ws-1")
    assert p.returncode == 0 and p.stdout == b""
    st = json.loads(tl(store_root, "stat", "ws-1").stdout)
    assert st["window"] == 5 and st["floor"]["seq"] == 5


def test_ls_on_a_missing_root(tmp_path: Path) -> None:
    root = tmp_path / "none"
    p = tl(root, "ls")
    assert p.returncode == 0 and p.stdout == b""
    assert not root.exists()


def test_malformed_json_names_the_line_and_writes_nothing(store_root: Path) -> None:
    data = (json.dumps(msg("ok")) + "\n" + '{"role": "user", "parts": [\n').encode()
    p = tl(store_root, "append", "ws", stdin=data)
    assert p.returncode == 1
    err = _one_error_line(p)
    assert "line 2" in err
    assert not store_root.exists()


def test_non_object_line_names_the_line(store_root: Path) -> None:
    data = (json.dumps(msg("ok")) + "\n\n" + "[1, 2]\n").encode()
    p = tl(store_root, "append", "ws", stdin=data)
    assert p.returncode == 1 and "line 3" in _one_error_line(p)
    assert not store_root.exists()


def test_invalid_row_names_its_input_line_despite_blank_lines(store_root: Path, tmp_path: Path
                                                              ) -> None:
    """Blank lines are skipped, so the error must name the line of the file,
    not the index of the row: here the bad row is on line 4."""
    src = tmp_path / "rows.jsonl"
    src.write_text("\n" + json.dumps(msg("ok")) + "\n\n" + '{"role": "robot", "parts": []}\n')
    p = tl(store_root, "append", "ws", str(src))
    assert p.returncode == 1
    err = _one_error_line(p)
    assert "line 4" in err and "robot" in err, err
    assert not store_root.exists()


def test_bad_rows_exit_1_and_write_nothing(store_root: Path) -> None:
    Store(store_root, durability="off").history("ws").append(msg())
    before = tree(store_root)
    for bad in ['{"role": "user", "parts": [], "seq": 1}',
                '{"role": "system", "kind": "reset", "parts": [], "reset": {"reason": "manual"}}',
                '{"role": "user", "parts": "text"}',
                '{"role": "user", "parts": [], "meta": {"x": NaN}}',
                ""]:
        p = tl(store_root, "append", "ws", stdin=bad.encode())
        assert p.returncode == 1, (bad, p.stderr)
        _one_error_line(p)
    assert tree(store_root) == before


def test_usage_errors_exit_2(store_root: Path) -> None:
    Store(store_root, durability="off").history("ws").append(msg())
    for args in (["frobnicate"], ["rows", "ws", "--bogus"], ["rows", "ws", "--after", "x"],
                 ["rows"], ["rows", "../etc"], ["stat", ".hidden"], ["append", "a/b"],
                 ["context", "x" * 200], []):
        p = tl(store_root, *args, stdin=json.dumps(msg()).encode())
        assert p.returncode == 2, (args, p.returncode, p.stderr)
    assert sorted(p.name for p in store_root.iterdir()) == ["ws"]


def test_missing_workspace_exits_1(store_root: Path) -> None:
    Store(store_root, durability="off").history("ws").append(msg())
    before = tree(store_root)
    for cmd in ("rows", "stat", "context"):
        p = tl(store_root, cmd, "nosuch")
        assert p.returncode == 1, (cmd, p.stderr)
        err = _one_error_line(p)
        assert "nosuch" in err and "Traceback" not in err
    assert tree(store_root) == before


def test_missing_input_file_exits_1(store_root: Path, tmp_path: Path) -> None:
    p = tl(store_root, "append", "ws", str(tmp_path / "absent.jsonl"))
    assert p.returncode == 1 and "absent.jsonl" in _one_error_line(p)
    assert not store_root.exists()


def test_append_batch_id_retry_and_expect_window(store_root: Path) -> None:
    data = (json.dumps(msg("a")) + "\n" + json.dumps(msg("b")) + "\n").encode()
    p1 = tl(store_root, "append", "ws", "--batch-id", "job-7", stdin=data)
    assert p1.returncode == 0, p1.stderr
    before = tree(store_root)
    p2 = tl(store_root, "append", "ws", "--batch-id", "job-7", stdin=data)
    assert p2.returncode == 0 and json.loads(p2.stdout) == json.loads(p1.stdout)
    assert tree(store_root) == before
    p3 = tl(store_root, "append", "ws", "--expect-window", "9", stdin=data)
    assert p3.returncode == 1 and "window" in _one_error_line(p3).lower()
    assert tree(store_root) == before


def test_embedder_option_adds_the_semantic_channel(store_root: Path) -> None:
    """``--embedder wordllama:64`` (or $TLEDGER_EMBEDDER) gives ranked search
    the semantic channel; an unknown one is one error line, exit 1."""
    import pytest

    pytest.importorskip("wordllama")
    h = Store(str(store_root)).history("w")
    h.append_many([msg("we adopted a kitten last week"), msg("the tax forms are due")])
    search = ["history", "w", "search", "pet cat", "--mode", "ranked", "--current"]
    assert json.loads(tl(store_root, *search).stdout)["items"] == []  # no word matches
    p = tl(store_root, "--embedder", "wordllama:64", *search)
    assert p.returncode == 0, p.stderr
    assert [i["seq"] for i in json.loads(p.stdout)["items"]] == [1]
    bad = tl(store_root, "--embedder", "bert", *search)
    assert bad.returncode == 1 and "unknown embedder 'bert'" in _one_error_line(bad)
    bad = tl(store_root, "--embedder", "wordllama:99", *search)
    assert bad.returncode == 1 and "dimension must be one of" in _one_error_line(bad)
