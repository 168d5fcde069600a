"""The engine registry (``ledger.storage.registry``): a root's form picks the
engine, an unknown URL scheme is refused naming the forms accepted, options
are checked for every engine, and the CLI refuses memory roots (a store that
dies with its process; each ``tledger`` command is a process)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger import LedgerError, Store
from ledger.cli import main
from ledger.core.errors import InvalidRoot
from ledger.storage import registry
from ledger.storage.engine import EngineSpec
from ledger.storage.memory import MemoryEngine
from tests.helpers.engine_contract import msg


@pytest.mark.parametrize(("root", "name"), [
    ("./.tledger", "files"), ("/var/lib/ledger", "files"), ("relative/dir", "files"),
    ("C:\\ledger", "files"), ("postgresql://u@h/db", "postgresql"),
    ("postgres://h/db", "postgresql"), ("memory://", "memory"), ("memory://team-1", "memory"),
])
def test_the_roots_form_picks_the_engine(root: str, name: str) -> None:
    assert registry.engine_for(root).name == name


@pytest.mark.parametrize("root", ["redis://h/0", "sqlite:///x.db", "s3://bucket/p",
                                  "file://tmp/x", "MEMORY://x", "https://u:secret@h/"])
def test_an_unknown_scheme_is_refused_naming_the_forms(root: str) -> None:
    with pytest.raises(InvalidRoot) as info:
        Store(root)
    text = str(info.value)
    for form in ("a directory path", "postgresql://", "postgres://", "memory://"):
        assert form in text
    assert "secret" not in text  # only the scheme of the root is echoed
    assert isinstance(info.value, LedgerError)


def test_store_opens_what_the_registry_picked(tmp_path: Path) -> None:
    files = Store(tmp_path / "s")
    assert files.spec.name == "files" and type(files.engine).__name__ == "FileEngine"
    mem = Store("memory://")
    assert mem.spec.name == "memory" and isinstance(mem.engine, MemoryEngine)
    assert repr(mem) == "Store('memory://')"


def test_a_registered_engine_is_matched_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_ENGINES", list(registry._ENGINES))
    opened: list[str] = []

    def open_(options: object) -> MemoryEngine:
        opened.append(options.root)  # type: ignore[attr-defined]
        return MemoryEngine(Store("memory://"))

    registry.register(EngineSpec(name="scratch", forms="scratch:// (a test engine)",
                                 matches=lambda r: r.startswith("scratch://"), open=open_))
    store = Store("scratch://a")
    store.history("ws").append(msg("x"))
    assert opened == ["scratch://a"] and store.workspaces() == ["ws"]
    assert "scratch://" in registry.forms()
    with pytest.raises(ValueError, match="registered already"):
        registry.register(registry.FALLBACK)


@pytest.mark.parametrize("root", ["memory://", "memory://x"])
@pytest.mark.parametrize("option", [{"durability": "sometimes"}, {"segment_bytes": 0},
                                    {"max_row_bytes": 10}, {"lock_timeout": -1},
                                    {"lock_timeout": float("inf")}])
def test_options_are_checked_on_every_engine(root: str, option: dict[str, object]) -> None:
    with pytest.raises(LedgerError, match=next(iter(option))):
        Store(root, **option)  # type: ignore[arg-type]


# --- the CLI ---------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [
    ["--root", "memory://", "ls"],
    ["--root", "memory://team", "clear", "ws"],
    ["--root", "memory://", "history", "ws", "list"],
])
def test_the_cli_refuses_a_memory_root(argv: list[str], capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "memory:// is the memory engine" in err and "dies with it" in err


def test_migrate_refuses_a_memory_side(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    Store(tmp_path / "s").history("ws").append(msg("x"))
    assert main(["migrate", str(tmp_path / "s"), "memory://dst"]) == 2
    assert "memory engine" in capsys.readouterr().err
    assert Store("memory://dst").workspaces() == []


def test_the_cli_refuses_an_unknown_scheme_as_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--root", "redis://h/0", "ls"]) == 2
    assert "a root is" in capsys.readouterr().err


def test_commands_that_open_no_store_ignore_the_root(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("TLEDGER_ROOT", "memory://")
    text = tmp_path / "t.txt"
    text.write_text("hello there")
    assert main(["count", "--model", "gpt-4o", str(text)]) == 0
    assert json.loads(capsys.readouterr().out)["tokens"] > 0


def test_db_names_the_engine_a_root_is_of(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--root", "memory://", "db", "status"]) == 2
    assert "a root of the memory engine" in capsys.readouterr().err
