"""The layer contract (docs/explanation/architecture.md) holds, and its check fails
on an import that runs up a floor or imports another package's private name."""

from __future__ import annotations

import ast
import importlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINT = shutil.which("lint-imports", path=os.path.dirname(sys.executable)) or shutil.which(
    "lint-imports"
)

pytestmark = pytest.mark.skipif(
    LINT is None, reason="import-linter is not installed (pip install -e '.[test]')"
)


# Private-looking names that are public APIs of the standard library.
STDLIB_PUBLIC = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults"})


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    assert LINT is not None
    return subprocess.run([LINT, "--no-cache"], cwd=root, env=env, capture_output=True,
                          text=True, timeout=120)


def copy_tree(dest: Path) -> Path:
    for name in ("ledger", "recovery"):
        shutil.copytree(REPO / name, dest / name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", dest / "pyproject.toml")
    (dest / "tests").mkdir()  # the private_names contract type (pyproject.toml names it)
    for name in ("__init__.py", "lint_private.py"):
        shutil.copy(REPO / "tests" / name, dest / "tests" / name)
    return dest


def test_the_repository_keeps_every_contract() -> None:
    p = lint(REPO)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "0 broken" in p.stdout


@pytest.mark.parametrize(
    ("module", "upward", "contract"),
    [
        # core is the bottom floor: it may not import the CLI.
        ("ledger/core/rows.py", "import ledger.cli", "no import runs up a floor"),
        # the engine interface may not import the file engine.
        ("ledger/storage/engine.py", "import ledger.storage.files.segments",
         "engines build on the engine interface"),
        # recovery may not import the CLI (its only importer) ...
        ("recovery/check.py", "import ledger.cli", "Recovery builds on the library"),
        # ... nor an engine's insides: it drives the engine operations.
        ("recovery/salvage.py", "from ledger.storage.files import segments",
         "Recovery builds on the library"),
        ("recovery/migrate.py", "import ledger.storage.postgres.connect",
         "Recovery builds on the library"),
        # no ledger module but the CLI imports recovery: not the library's face ...
        ("ledger/__init__.py", "import recovery.check", "Only the CLI imports recovery"),
        # ... nor a floor below the CLI.
        ("ledger/transcript/history.py", "from recovery import repair",
         "Only the CLI imports recovery"),
        # retrieval's rules may not touch the file engine directly.
        ("ledger/transcript/retrieval/tool.py", "import ledger.storage.files.segments",
         "never touches a path"),
    ],
)
def test_an_upward_import_breaks_the_check(tmp_path: Path, module: str, upward: str,
                                           contract: str) -> None:
    root = copy_tree(tmp_path)
    path = root / module
    path.write_text(path.read_text(encoding="utf-8") + f"\n{upward}  # deliberately wrong\n",
                    encoding="utf-8")
    p = lint(root)
    assert p.returncode != 0, p.stdout
    broken = [line for line in p.stdout.splitlines() if " BROKEN" in line]
    assert [b for b in broken if contract in b], p.stdout  # that contract's line, not its name


PRIVATE_NAMES = "Private names: no module imports a _name from another package"


@pytest.mark.parametrize(
    ("module", "line", "expected"),
    [
        # a private name of ledger's core, imported by recovery.
        ("recovery/repair.py", "from ledger.core.rows import _private",
         "recovery.repair (l.{n}): from ledger.core.rows import _private"),
        # one of the file engine, over several lines, in a function, through a relative import.
        ("ledger/transcript/store.py",
         "def f():\n    from ..storage.files.reads import (\n        segment_path,\n"
         "        _hidden,\n    )",
         "ledger.transcript.store (l.{m}): from ledger.storage.files.reads import _hidden"),
    ],
)
def test_a_private_import_breaks_the_check(tmp_path: Path, module: str, line: str,
                                           expected: str) -> None:
    """The private_names contract (tests/lint_private.py) breaks, and only it."""
    root = copy_tree(tmp_path)
    path = root / module
    text = path.read_text(encoding="utf-8") + "\n"
    n = text.count("\n") + 1
    path.write_text(text + line + "\n", encoding="utf-8")
    p = lint(root)
    assert p.returncode != 0, p.stdout
    assert f"{PRIVATE_NAMES} BROKEN" in p.stdout, p.stdout
    assert "Contracts: 5 kept, 1 broken." in p.stdout, p.stdout
    assert expected.format(n=n, m=n + 1) in p.stdout, p.stdout


def test_a_private_name_within_its_package_keeps_the_contract(tmp_path: Path) -> None:
    root = copy_tree(tmp_path)
    path = root / "ledger/storage/files/merge.py"
    path.write_text(path.read_text(encoding="utf-8")
                    + "\nfrom ledger.storage.files.reads import _x\nfrom . import _y\n",
                    encoding="utf-8")
    p = lint(root)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"{PRIVATE_NAMES} KEPT" in p.stdout, p.stdout


# -- No private name crosses a package ---------------------------------------
# ``lint-imports`` checks the imports (the private_names contract type of
# tests/lint_private.py, above); the rule is also checked here on the syntax
# tree of every module of ``ledger``, with attribute access, which no import
# graph shows. A module's package is the folder
# it sits in (``ledger.storage.files`` for ``ledger/storage/files/reads.py``).
# A private name (one underscore, not a dunder) may be used only inside the
# package that defines it: ``from ledger.x import _y`` from another package is
# refused, and so is ``obj._y`` where no module of the using package defines
# or binds ``_y`` (a method of another package's class, say).


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _modules(root: Path) -> dict[str, tuple[Path, ast.Module]]:
    out = {}
    for path in sorted([*(root / "ledger").rglob("*.py"), *(root / "recovery").rglob("*.py")]):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = (path, ast.parse(path.read_text(encoding="utf-8")))
    return out


def _package(mods: dict[str, tuple[Path, ast.Module]], name: str) -> str:
    path = mods[name][0] if name in mods else None
    return name if path is not None and path.name == "__init__.py" else name.rpartition(".")[0]


def _bound_names(tree: ast.Module) -> Iterator[str]:
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield n.name
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            yield n.id
        elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
            yield n.attr
        elif isinstance(n, ast.arg):
            yield n.arg
        elif isinstance(n, ast.alias):
            yield n.asname or n.name.split(".")[0]
        elif isinstance(n, ast.keyword) and n.arg:
            yield n.arg
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.isidentifier():
            yield n.value  # __slots__, object.__setattr__(self, "_x", ...)


def private_crossings(root: Path) -> list[str]:
    mods = _modules(root)
    bound: dict[str, set[str]] = {}
    for name, (_, tree) in mods.items():
        bound.setdefault(_package(mods, name), set()).update(_bound_names(tree))
    found = []
    for name, (path, tree) in mods.items():
        pkg = _package(mods, name)
        where = path.relative_to(root)
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom) and n.module and n.module.split(".")[0] == "ledger":
                for a in n.names:
                    if _is_private(a.name) and _package(mods, n.module) != pkg:
                        found.append(f"{where}:{n.lineno}: from {n.module} import {a.name}")
            elif (isinstance(n, ast.Attribute) and _is_private(n.attr)
                  and n.attr not in STDLIB_PUBLIC and n.attr not in bound[pkg]):
                found.append(f"{where}:{n.lineno}: .{n.attr} (defined in another package)")
    return found


def test_no_private_name_crosses_a_package() -> None:
    assert private_crossings(REPO) == []


@pytest.mark.parametrize(
    ("module", "line", "expected"),
    [
        ("recovery/repair.py", "from ledger.storage.files.reads import _x",
         "from ledger.storage.files.reads import _x"),
        ("ledger/rollover/rules.py", "def f(h): return h._private_method_of_history()",
         "._private_method_of_history"),
    ],
)
def test_a_private_crossing_is_found(tmp_path: Path, module: str, line: str,
                                     expected: str) -> None:
    root = copy_tree(tmp_path)
    path = root / module
    path.write_text(path.read_text(encoding="utf-8") + f"\n{line}\n", encoding="utf-8")
    found = private_crossings(root)
    assert len(found) == 1 and expected in found[0], found


# -- One public face ----------------------------------------------------------
# A package's face re-exports the names of one of its own modules; nothing else
# re-exports: ``ledger.policy``, ``ledger.admission`` and ``ledger.notes`` hold
# their code, and ``ledger`` names every error a caller may catch.

PUBLIC_FACES = {
    "ledger.rollover": "ledger.rollover.engine",
    "ledger.tokens": "ledger.tokens.counting",
}


@pytest.mark.parametrize(("face", "module"), sorted(PUBLIC_FACES.items()))
def test_a_public_face_holds_the_names_of_its_module(face: str, module: str) -> None:
    f, m = importlib.import_module(face), importlib.import_module(module)
    assert list(f.__all__) == list(m.__all__) and m.__all__
    assert all(getattr(f, n) is getattr(m, n) for n in m.__all__)
    assert not [n for n in f.__all__ if n.startswith("_")]


def _top_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """A module's top-level statements, those under a top-level if/try too."""
    for n in body:
        if isinstance(n, ast.If):
            yield from _top_statements(n.body + n.orelse)
        elif isinstance(n, ast.Try):
            yield from _top_statements(n.body + n.orelse + n.finalbody
                                       + [s for h in n.handlers for s in h.body])
        else:
            yield n


def _source(node: ast.ImportFrom, name: str, is_package: bool) -> str:
    if node.level == 0:
        return node.module or ""
    base = name.split(".") if is_package else name.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def alias_modules(root: Path) -> list[str]:
    """Modules that are another module's alias, whatever their shape: a
    ``sys.modules`` swap or ``globals().update``; a module that defines no
    public name of its own but imports (an ``import *`` twin, a list of
    re-exported names); a ``__getattr__`` that forwards names outside a
    package face; a public name (``__all__``) or a star import taken from
    another folder. A package's ``__init__`` may present its own modules."""
    mods = _modules(root)
    found = []
    for name, (path, tree) in mods.items():
        is_package = path.name == "__init__.py"
        pkg = _package(mods, name)
        where = str(path.relative_to(root))

        def home(src: str, is_package: bool = is_package, pkg: str = pkg) -> bool:
            """May this module present ``src``'s names: a package's face those
            of its own modules, any other module those of its folder."""
            return _inside(src, pkg) if is_package else _package(mods, src) == pkg

        for n in ast.walk(tree):
            if isinstance(n, ast.Subscript) and ast.unparse(n.value) == "sys.modules" and (
                isinstance(n.ctx, ast.Store)
            ):
                found.append(f"{where}: assigns sys.modules")
            if isinstance(n, ast.Call) and ast.unparse(n.func) in (
                "globals().update", "vars().update", "sys.modules.__setitem__"
            ):
                found.append(f"{where}: {ast.unparse(n.func)}")
        imported: dict[str, str] = {}  # public name -> the module it comes from
        defined: set[str] = set()
        imports = 0
        for n in _top_statements(tree.body):
            if isinstance(n, ast.ImportFrom) and n.module != "__future__":
                imports += 1
                src = _source(n, name, is_package)
                for a in n.names:
                    if a.name == "*" and not home(src):
                        found.append(f"{where}: from {src} import * (another package)")
                    imported[a.asname or a.name] = src
            elif isinstance(n, ast.Import):
                imports += 1
            elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(n.name)
                if n.name == "__getattr__" and not is_package:
                    found.append(f"{where}: a module __getattr__ (forwards names)")
            elif isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                defined.update(t.id for t in targets if isinstance(t, ast.Name))
        own = {d for d in defined if not d.startswith("_")}
        if not is_package and imports and not own and path.name != "__main__.py":
            found.append(f"{where}: defines no public name, only imports")
        for x in _literal_all(tree):
            src = imported.get(x)
            if src is not None and src.split(".")[0] in ("ledger", "recovery") and not home(src):
                found.append(f"{where}: __all__ names {x}, imported from {src}")
    return found


def _literal_all(tree: ast.Module) -> list[str]:
    for n in tree.body:
        if (isinstance(n, (ast.Assign, ast.AnnAssign))
                and any(isinstance(t, ast.Name) and t.id == "__all__"
                        for t in (n.targets if isinstance(n, ast.Assign) else [n.target]))
                and isinstance(n.value, ast.List)):
            return [ast.literal_eval(e) for e in n.value.elts]
    return []


def test_no_all_names_a_private_name_and_no_module_is_an_alias() -> None:
    for name, (_path, tree) in _modules(REPO).items():
        assert not [x for x in _literal_all(tree) if x.startswith("_")], name
    assert alias_modules(REPO) == []


@pytest.mark.parametrize(
    ("module", "text", "expected"),
    [
        # an import * twin, in another package and in the same one
        ("ledger/budget.py", "from ledger.rollover.rules import *  # noqa: F403\n",
         "from ledger.rollover.rules import * (another package)"),
        ("ledger/rollover/rules2.py", "from ledger.rollover.rules import *  # noqa: F403\n",
         "defines no public name, only imports"),
        # the 0.2 shape of ledger.policy: a star import and __all__ built from it
        ("ledger/policy2.py", "from ledger import policy as _p\n"
         "from ledger.policy import *  # noqa: F403\n__all__: list[str] = []\n"
         "__all__ += _p.__all__\n", "defines no public name, only imports"),
        # a list of names re-exported from another module
        ("ledger/errors.py", "from ledger.core.errors import InvalidRow, LedgerError\n"
         "__all__ = ['InvalidRow', 'LedgerError']\n", "defines no public name"),
        # a module of its own that also re-exports another package's name
        ("ledger/transcript/extra.py", "from ledger.core.errors import LedgerError\n"
         "X = 1\n__all__ = ['LedgerError', 'X']\n",
         "__all__ names LedgerError, imported from ledger.core.errors"),
        # a package's face that presents another package
        ("recovery/__init__.py", "from ledger.core.checks import CheckReport\n"
         "__all__ = ['CheckReport']\n",
         "__all__ names CheckReport, imported from ledger.core.checks"),
        # names forwarded on first use, and a module swapped for another
        ("ledger/history.py", "import importlib\nVERSION = 1\n"
         "def __getattr__(n):\n    return getattr(importlib.import_module('x'), n)\n",
         "a module __getattr__"),
        ("ledger/segments.py", "import sys\nimport ledger.storage.files.segments as s\n"
         "sys.modules[__name__] = s\n", "assigns sys.modules"),
        ("ledger/format.py", "import ledger.core.format as f\nglobals().update(vars(f))\n",
         "globals().update"),
    ],
)
def test_an_alias_module_is_found(tmp_path: Path, module: str, text: str,
                                  expected: str) -> None:
    root = copy_tree(tmp_path)
    (root / module).write_text(text, encoding="utf-8")
    found = alias_modules(root)
    assert found and all(module in f for f in found), found
    assert [f for f in found if expected in f], found


def _ledger_errors() -> list[type]:
    """Every LedgerError subclass a module of ledger defines (integrations whose
    framework is missing are skipped; the test extras install them all)."""
    import pkgutil

    import ledger
    from ledger.core.errors import LedgerError

    for info in pkgutil.walk_packages(ledger.__path__, "ledger."):
        if info.name.endswith(".__main__"):  # runs the CLI
            continue
        try:
            importlib.import_module(info.name)
        except ImportError:
            continue
    out, todo = [], [LedgerError]
    while todo:
        cls = todo.pop()
        if cls.__module__.startswith("ledger.") or cls.__module__ == "ledger":
            out.append(cls)
        todo.extend(cls.__subclasses__())
    return [c for c in out if not c.__name__.startswith("_")]


def test_every_error_a_caller_catches_is_importable_from_ledger() -> None:
    import ledger

    errors = _ledger_errors()
    assert len(errors) > 40  # the whole tree: core's, the rollover's, the engines'
    missing = [f"{c.__module__}.{c.__qualname__}" for c in errors
               if c.__name__ not in ledger.__all__ or getattr(ledger, c.__name__) is not c]
    assert missing == []
    assert "Conversation" in ledger.__all__ and "RewriteRefused" in ledger.__all__


def test_import_star_from_ledger_needs_no_optional_extra(tmp_path: Path) -> None:
    """``from ledger import *`` loads each name of ``__all__`` (the lazy ones
    too) with no framework and no PostgreSQL driver installed."""
    code = ("import sys\n"
            "for m in ('mcp', 'psycopg', 'psycopg_pool', 'agents', 'langchain_core',"
            " 'langgraph', 'claude_agent_sdk'):\n"
            "    sys.modules[m] = None  # importing it raises ImportError\n"
            "ns = {}\nexec('from ledger import *', ns)\n"
            "import ledger\n"
            "assert all(ns[n] is getattr(ledger, n) for n in ledger.__all__)\n"
            "print(len(ledger.__all__))\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.returncode == 0, p.stderr
    assert int(p.stdout) > 40


@pytest.mark.parametrize("old", ["ledger.history", "ledger.segments", "ledger.format",
                                 "ledger.budget", "ledger.interop", "ledger.recovery"])
def test_the_pre_0_2_paths_are_gone(old: str) -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)


def test_every_name_loaded_on_first_use_is_typed_where_it_is_loaded_from() -> None:
    """``ledger``'s lazily loaded names are imported for type checkers too, from the
    module they load from: a name missing from the ``TYPE_CHECKING`` block reads as
    ``object`` to mypy (``ledger.Conversation(...)`` would not be checked)."""
    import ledger

    tree = ast.parse((REPO / "ledger" / "__init__.py").read_text(encoding="utf-8"))
    typed: dict[str, str] = {}
    for node in tree.body:
        if (isinstance(node, ast.If) and isinstance(node.test, ast.Name)
                and node.test.id == "TYPE_CHECKING"):
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.module
                typed.update({a.name: imp.module for a in imp.names})
    loaded = {**ledger._LAZY, **ledger._DEFERRED}
    assert loaded and typed == loaded
