"""An import-linter contract type: no module imports a private name from
another package.

A private name starts with one underscore and is not a dunder (``_x``, not
``__all__``). A module's package is the folder it sits in
(``ledger.storage.files`` for ``ledger/storage/files/reads.py``; a package's
``__init__`` is in the package itself). ``from ledger.storage.files.reads
import _x`` is allowed in ``ledger.storage.files`` and refused everywhere
else, relative imports (``from ..files.reads import _x``) included. The same
rule as the syntax-tree walk in tests/test_layers.py, which also checks
attribute access (``obj._x``), something no import graph shows.

Registered in pyproject.toml (``[tool.importlinter] contract_types``) and
imported by ``lint-imports`` from the repository root (it puts its working
directory on ``sys.path``). The graph names the modules; each one's source is
read and parsed (nothing of ``ledger`` is imported), so a name imported from
a module that does not exist is found too.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from typing import Any

from grimp import ImportGraph
from importlinter import Contract, ContractCheck, output


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


class PrivateNameContract(Contract):
    """``type = "private_names"``: no ``from <another package's module> import
    _name``. No options of its own."""

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        sources = _Sources(self.session_options)
        found: list[dict[str, Any]] = []
        for importer in sorted(graph.modules):
            tree = sources.tree(importer)
            if tree is None:  # not a module of a root package
                continue
            for node in ast.walk(tree):  # every statement, in functions too
                if not isinstance(node, ast.ImportFrom):
                    continue
                source = _absolute(node, importer, sources.is_package(importer))
                if (source is None or source.split(".")[0] not in sources.roots
                        or sources.package(source) == sources.package(importer)):
                    continue
                for alias in node.names:
                    if is_private(alias.name):
                        found.append({"importer": importer, "line_number": node.lineno,
                                      "module": source, "name": alias.name})
        return ContractCheck(kept=not found, metadata={"crossings": found})

    def render_broken_contract(self, check: ContractCheck) -> None:
        output.print_error("A private name is imported from another package:", bold=False)
        output.new_line()
        for c in check.metadata["crossings"]:
            output.print_error(
                f"- {c['importer']} (l.{c['line_number']}): "
                f"from {c['module']} import {c['name']}",
                bold=False,
            )
            output.new_line()


def _absolute(node: ast.ImportFrom, importer: str, importer_is_package: bool) -> str | None:
    """The module a ``from ... import`` names, relative forms resolved."""
    if node.level == 0:
        return node.module
    base = importer.split(".") if importer_is_package else importer.split(".")[:-1]
    if node.level - 1 > len(base):
        return None
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base) or None


class _Sources:
    """Where the root packages' modules are, parsed on demand."""

    def __init__(self, session_options: dict[str, Any]) -> None:
        roots = session_options.get("root_packages") or [session_options["root_package"]]
        self.roots: dict[str, Path] = {}
        for root in roots:
            spec = importlib.util.find_spec(root)  # a top-level name: nothing is executed
            if spec is not None and spec.submodule_search_locations:
                self.roots[root] = Path(next(iter(spec.submodule_search_locations)))
        self.trees: dict[str, ast.Module | None] = {}

    def path(self, module: str) -> Path | None:
        top, *rest = module.split(".")
        if top not in self.roots:
            return None
        base = self.roots[top].joinpath(*rest)
        for candidate in (base / "__init__.py", base.with_suffix(".py")):
            if candidate.is_file():
                return candidate
        return None

    def is_package(self, module: str) -> bool:
        path = self.path(module)
        return path is not None and path.name == "__init__.py"

    def package(self, module: str) -> str:
        """The module itself for a package, else its parent; a module that is
        not found (a name imported from a package) counts as its parent's."""
        return module if self.is_package(module) else module.rpartition(".")[0]

    def tree(self, module: str) -> ast.Module | None:
        if module not in self.trees:
            path = self.path(module)
            self.trees[module] = (
                ast.parse(path.read_text(encoding="utf-8")) if path is not None else None
            )
        return self.trees[module]
