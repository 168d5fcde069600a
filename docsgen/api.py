"""The Python API reference's directives: one mkdocstrings block per public
module, rendering exactly the names of its ``__all__``.

Error classes are left out of the module pages: each is documented once, on
the errors page (``docsgen.errors``), and every other page links there. A name
``ledger`` loads lazily from another module (``Conversation``) is listed with a
link to where that module's page documents it.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from typing import Any

# The public modules (the architecture page names them) and the API page of each.
PAGES: dict[str, list[str]] = {
    "ledger": ["ledger"],
    "rollover": ["ledger.rollover.conversation", "ledger.rollover.guards", "ledger.rollover"],
    "tokens": ["ledger.tokens", "ledger.tokens.models"],
    "policy": ["ledger.policy", "ledger.admission", "ledger.notes"],
    "aio": ["ledger.aio"],
    "adapters": ["ledger.adapters", "ledger.adapters.validate"],
    "integrations": ["ledger.integrations", "ledger.integrations.openai_agents",
                     "ledger.integrations.openai_agents_branches",
                     "ledger.integrations.langchain", "ledger.integrations.langchain_middleware",
                     "ledger.integrations.langgraph", "ledger.integrations.claude",
                     "ledger.integrations.mcp_server"],
    "bulk": ["ledger.storage.files.bulk"],
    "recovery": ["recovery.check", "recovery.repair", "recovery.legacy", "recovery.imports",
                 "recovery.migrate"],
}


def public_modules() -> list[str]:
    return [m for mods in PAGES.values() for m in mods]


def page_of(module: str) -> str:
    for page, mods in PAGES.items():
        if module in mods:
            return page
    raise LookupError(f"{module} is not a public module with an API page")


def _exported(module: str) -> list[str]:
    mod = importlib.import_module(module)
    names = getattr(mod, "__all__", None)
    if names is None:
        raise LookupError(f"public module {module} has no __all__")
    return list(names)


def _is_error(obj: Any) -> bool:
    return inspect.isclass(obj) and issubclass(obj, BaseException)


def _shadowed(mod: Any, name: str) -> bool:
    """``name`` is exported by package ``mod`` but also names one of its
    submodules, which the documentation tool sees instead of the object."""
    path = getattr(mod, "__path__", None)
    obj = getattr(mod, name)
    return bool(path) and not inspect.ismodule(obj) and \
        importlib.util.find_spec(f"{mod.__name__}.{name}") is not None


def home_of(obj: Any) -> str:
    """Where ``obj`` is defined, as a dotted path."""
    return f"{obj.__module__}.{obj.__qualname__}"


def split(module: str) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """``module``'s ``__all__`` as (rendered here, errors, lazy (name, home module)).
    A name that a submodule shadows goes to ``shadowed`` instead."""
    mod = importlib.import_module(module)
    lazy_map: dict[str, str] = getattr(mod, "_LAZY", {})
    here, errors, lazy = [], [], []
    for name in _exported(module):
        if _shadowed(mod, name) or inspect.ismodule(getattr(mod, name)):
            continue  # rendered on their own (directive)
        if name in lazy_map and lazy_map[name] != module:
            obj = getattr(mod, name)
            (errors if _is_error(obj) else lazy).append(
                name if _is_error(obj) else (name, lazy_map[name]))  # type: ignore[arg-type]
            continue
        obj = getattr(mod, name)
        (errors if _is_error(obj) else here).append(name)
    return here, errors, lazy  # type: ignore[return-value]


def shadowed(module: str) -> list[str]:
    """The names of ``module``'s ``__all__`` that one of its submodules shadows."""
    mod = importlib.import_module(module)
    return [name for name in _exported(module) if _shadowed(mod, name)]


def directive(module: str) -> str:
    here, errors, lazy = split(module)
    out = [f"::: {module}", "    options:", "      members:"]
    out += [f"        - {name}" for name in here] or ["        []"]
    out.append("")
    for name in _exported(module):
        sub = getattr(importlib.import_module(module), name)
        if inspect.ismodule(sub):
            out += [f"::: {sub.__name__}", "    options:", "      heading_level: 3", ""]
    for name in shadowed(module):
        obj = getattr(importlib.import_module(module), name)
        out += [f"`{module}.{name}` is `{home_of(obj)}`:", "", f"::: {home_of(obj)}",
                "    options:", "      heading_level: 3", ""]
    if errors:
        links = ", ".join(f"[`{n}`](../errors.md#{_error_anchor(module, n)})" for n in errors)
        out += [f"Errors of `{module}` (on the errors page): {links}.", ""]
    if lazy:
        out += [f"Loaded by `{module}` on first use, documented with their module:", ""]
        for name, home in lazy:
            out.append(f"- [`{module}.{name}`]({page_of(home)}.md#{home}.{name})")
        out.append("")
    return "\n".join(out) + "\n"


def _error_anchor(module: str, name: str) -> str:
    obj = getattr(importlib.import_module(module), name)
    return f"{obj.__module__}.{obj.__name__}"
