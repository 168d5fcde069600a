"""The documentation site: it builds with ``mkdocs build --strict``, its
generated reference covers the code (every CLI command and flag, every name
of every public module's ``__all__``, every error), the README stays a
landing page, and the test-skip reasons are all written down."""

from __future__ import annotations

import html
import importlib
import importlib.util
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.helpers import PYTHON, REPO, subprocess_env

# What the site is built from (mkdocs.yml; docsgen/hooks.py reads the code and bench/).
SITE_SOURCES = ("mkdocs.yml", "README.md", "docs", "docsgen", "ledger", "recovery", "bench")
BUILT_SITE = "TLEDGER_DOCS_SITE"  # .ci/run: the site its `mkdocs build --strict` just built


def _newest_source() -> float:
    newest = 0.0
    for name in SITE_SOURCES:
        top = REPO / name
        paths = [top] if top.is_file() else top.rglob("*") if top.is_dir() else []
        for p in paths:
            if "__pycache__" not in p.parts and p.is_file():
                newest = max(newest, p.stat().st_mtime)
    return newest


def _built_by_ci() -> Path | None:
    """The site .ci/run built from this checkout before pytest (``$TLEDGER_DOCS_SITE``),
    if it is there and newer than every source file; else None (build it here)."""
    given = os.environ.get(BUILT_SITE)
    if not given:
        return None
    index = Path(given) / "index.html"
    if not index.is_file() or index.stat().st_mtime < _newest_source():
        return None
    return Path(given)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if importlib.util.find_spec("mkdocs") is None or \
            importlib.util.find_spec("mkdocstrings_handlers") is None:
        pytest.skip("mkdocs not installed (pip install -e '.[docs]')")
    built = _built_by_ci()
    if built is not None:  # the same `mkdocs build --strict`: its failure failed CI already
        return built
    out = tmp_path_factory.mktemp("site")
    env = {**subprocess_env(), "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([PYTHON, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return out


def _text_of(markup: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", markup))


def _text(page: Path) -> str:
    return _text_of(page.read_text(encoding="utf-8"))


def test_the_cli_reference_names_every_command_flag_example_and_exit_code(site: Path) -> None:
    from docsgen import cli
    from ledger.cli import build_parser, registry

    build_parser()  # loads the command modules
    page = (site / "reference" / "cli-commands" / "index.html").read_text(encoding="utf-8")
    text = _text_of(page)
    commands = registry.commands()
    assert len(commands) >= 20
    for c in commands:
        assert f'id="{c.name}"' in page, c.name
        raw = page[page.index(f'id="{c.name}"'):]
        section = _text_of(raw[:raw.find("<h2", 1)])
        assert c.example in " ".join(section.split()), c.name
        for flag in cli.flags_of(c.name):
            assert flag in section, (c.name, flag)
        for code, meaning in c.exits.items():
            assert meaning in text, (c.name, code)
    for meaning in cli.EXIT_CODES.values():
        assert meaning in text


def test_the_cli_reference_follows_the_registry() -> None:
    """A new command or flag appears without anyone writing it down."""
    from docsgen import cli
    from ledger.cli import registry

    rendered = cli.render()  # builds the parser, which loads the command modules
    for c in registry.commands():
        assert f"## `{c.name}`" in rendered
        for flag in cli.flags_of(c.name):
            assert f"`{flag}`" in rendered, (c.name, flag)
        for name in cli.positionals_of(c.name):
            assert f"`{name}`" in rendered, (c.name, name)


def test_every_public_name_is_in_the_api_reference(site: Path) -> None:
    from docsgen import api, errors

    ids = set()
    for page in (site / "reference").rglob("index.html"):
        ids |= set(re.findall(r'id="([\w.]+)"', page.read_text(encoding="utf-8")))
    for module in api.public_modules():
        mod = importlib.import_module(module)
        for name in mod.__all__:
            obj = getattr(mod, name)
            home = api.home_of(obj) if hasattr(obj, "__qualname__") else None
            assert f"{module}.{name}" in ids or (home and home in ids), f"{module}.{name}"
    for cls in errors.error_classes():
        assert f"{cls.__module__}.{cls.__name__}" in ids, cls


def test_the_generated_reference_pages_hold_what_the_code_holds(site: Path) -> None:
    from ledger.transcript.retrieval import args, results

    tool = _text(site / "reference" / "session-history" / "index.html")
    for name in args.PARAMETERS["properties"]:
        assert name in tool
    for code in results.ERROR_CODES:
        assert code in tool
    assert args.DESCRIPTION[:60] in tool
    from ledger.rollover import RULE_IDS

    rules = _text(site / "explanation" / "rollover" / "index.html")
    assert all(f"\n{rule}" in rules or f" {rule} " in rules for rule in RULE_IDS)
    fmt = _text(site / "reference" / "format" / "index.html")
    assert "seg-NNNNNNNN.jsonl" in fmt and "RECEIPT" in fmt
    perf = (site / "explanation" / "performance" / "index.html").read_text(encoding="utf-8")
    plots = sorted(p.name for p in (REPO / "bench" / "plots").glob("*.png"))
    assert plots
    for name in plots:
        assert f"bench/plots/{name}" in perf, name
        assert (site / "explanation" / "bench" / "plots" / name).is_file()
    assert "<!-- bench-results" not in perf and "Met:" in _text(
        site / "explanation" / "performance" / "index.html")


def test_the_readme_is_a_landing_page() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 160
    sections = re.findall(r"^## (.+)$", text, flags=re.M)
    assert sections[0] == "Quick start"
    quick = text[text.index("## Quick start"):]
    (commands,) = re.findall(r"```sh\n(.*?)```", quick[:quick.index("\n## ", 5)], flags=re.S)
    assert commands == ("python -m pip install -e . && python -m ledger demo\n"
                        "python -m pip install -e '.[test]' && python -m pytest --durations=15\n")
    for target in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (REPO / target).is_file(), target


def test_every_skip_reason_of_the_suite_is_written_down() -> None:
    """Each module a test skips without (importorskip) is named on the page the
    Quick start links, with what makes those tests run."""
    page = (REPO / "docs" / "how-to" / "run-the-tests.md").read_text(encoding="utf-8")
    modules = set()
    for path in (REPO / "tests").rglob("*.py"):
        modules |= set(re.findall(r"importorskip\(\s*\"([\w.]+)\"", path.read_text("utf-8")))
    assert "psycopg" in modules and "agents" in modules
    missing = sorted(m for m in modules if f"`{m}`" not in page
                     and not m.startswith("ledger."))
    assert not missing, f"skip reasons not on docs/how-to/run-the-tests.md: {missing}"
    for reason in ("../shared/real-transcripts", "root", "setpriv", "Citus", "PostgreSQL"):
        assert reason in page, reason


REQUIRED = {  # what the issue asks a newcomer to find, by the page that holds it
    "tutorial.md",
    "how-to/openai-agents.md", "how-to/langgraph.md", "how-to/langchain.md",
    "how-to/claude-agent-sdk.md", "how-to/mcp.md", "how-to/postgresql.md", "how-to/citus.md",
    "how-to/recover.md", "how-to/import-transcripts.md", "how-to/benchmarks.md",
    "how-to/fork-and-rewind.md",
    "reference/api/ledger.md", "reference/cli-commands.md", "reference/errors.md",
    "reference/format.md", "reference/session-history.md", "reference/runtime.md",
    "explanation/windows.md", "explanation/durability.md", "explanation/security.md",
    "explanation/performance.md", "explanation/comparisons.md",
}


def test_each_thing_is_two_clicks_from_the_navigation() -> None:
    """A top tab, then the page in its sidebar (sections below a tab are shown
    expanded, navigation.sections): no required page sits deeper."""
    yaml = pytest.importorskip("yaml", reason="mkdocs not installed (pip install -e '.[docs]')")
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    assert "navigation.sections" in config["theme"]["features"]
    depth: dict[str, int] = {}

    def walk(items: list[object], level: int) -> None:
        for item in items:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            if isinstance(value, list):
                walk(value, level + 1)
            else:
                depth[str(value)] = level

    walk(config["nav"], 1)
    for page in REQUIRED:
        assert page in depth, f"{page} is not in the navigation"
        assert depth[page] <= 3, f"{page} is {depth[page]} levels deep"
