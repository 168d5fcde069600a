"""``tledger count``: through a real subprocess and in process."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ledger.cli import main
from ledger.tokens.encodings import get_encoding

TEXT = "The ledger counts tokens offline.\n<|endoftext|> stays ordinary text.\n"


def run(
    args: list[str],
    *,
    stdin: bytes | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "ledger.cli", "count", *args],
        input=stdin,
        capture_output=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        timeout=120,
    )


def n(text: str, encoding: str = "o200k_base") -> int:
    return len(get_encoding(encoding).encode_ordinary(text))


def test_count_file_and_stdin_in_a_subprocess(tmp_path: Path) -> None:
    path = tmp_path / "notes.md"
    path.write_text(TEXT, encoding="utf-8")
    # an empty tiktoken cache and a fresh project cache: everything offline
    env = {
        "TIKTOKEN_CACHE_DIR": str(tmp_path / "empty"),
        "TLEDGER_TIKTOKEN_CACHE": str(tmp_path / "cache"),
    }
    (tmp_path / "empty").mkdir()
    out = run([str(path)], env=env)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["tokens"] == n(TEXT)
    assert (got["encoding"], got["exact"], got["model"]) == ("o200k_base", True, "gpt-4o")
    out = run(["--model", "gpt-4-0613"], stdin=TEXT.encode(), env=env)
    got = json.loads(out.stdout)
    assert (got["tokens"], got["encoding"], got["exact"]) == (
        n(TEXT, "cl100k_base"),
        "cl100k_base",
        True,
    )
    assert list((tmp_path / "empty").iterdir()) == []


def test_count_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [
        {"kind": "message", "role": "user", "parts": [{"type": "text", "text": "hello"}]},
        {"kind": "reset", "role": "system", "parts": [], "reset": {"reason": "manual"}},
        {"kind": "message", "role": "assistant", "parts": [{"type": "text", "text": "hi"}]},
    ]
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    assert main(["count", "--rows", "--api", "canonical", str(path)]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["rows"] == 3 and got["exact"] is False
    assert got["tokens"] == 2 * (4 + 1) + n("hello") + n("hi")


def test_proxy_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.txt"
    path.write_text(TEXT)
    assert main(["count", "--model", "claude-sonnet-4-5", str(path)]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["exact"] is False and got["encoding"] == "cl100k_base"
    assert got["tokens"] == math.ceil(n(TEXT, "cl100k_base") * got["safety_factor"])


def test_models_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    models = tmp_path / "models.toml"
    models.write_text(
        '[models."house-model"]\nfamily = "acme"\nencoding = "o200k_base"\n'
        "context_limit = 8000\noutput_reserve = 1000\nsafety_factor = 2.0\n"
    )
    path = tmp_path / "t.txt"
    path.write_text(TEXT)
    assert main(["count", "--models", str(models), "--model", "house-model", str(path)]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["tokens"] == 2 * n(TEXT) and got["exact"] is False and got["family"] == "acme"
    out = run(["--model", "house-model", str(path)], env={"TLEDGER_MODELS": str(models)})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["tokens"] == 2 * n(TEXT)


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (["--model", "gpt-9-ultra"], b"hi", b"UnknownModel: unknown model 'gpt-9-ultra'"),
        ([], b"\xff\xfe not utf-8", b"TokenizerError: stdin is not valid UTF-8"),
        (["--rows"], b'{"kind": "message"}\nnot json\n', b"InvalidRow: stdin line 2"),
        (["--rows"], b"[1, 2]\n", b"InvalidRow: stdin line 1"),
        (["/nonexistent/file.txt"], None, b"cannot read /nonexistent/file.txt"),
    ],
)
def test_errors_exit_1(args: list[str], stdin: bytes | None, message: bytes) -> None:
    out = run(args, stdin=stdin)
    assert out.returncode == 1
    assert message in out.stderr
    assert out.stdout == b""


def test_bad_flag_is_usage_error() -> None:
    assert run(["--no-such-flag"]).returncode == 2


def test_help_has_an_example() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ledger.cli", "count", "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0 and "Example: tledger count" in out.stdout
