"""Which engine a store's root names (``Store(root)``).

Each engine registers an ``EngineSpec`` (``ledger.storage.engine``): how its
roots are written and matched, its own option checks, how it opens. A root
that a registered engine matches goes to it; any other root that looks like
a URL (``scheme://...``) is refused with ``InvalidRoot`` naming the forms
accepted; everything else is a directory path: the file engine, the
fallback. The built-in engines -- PostgreSQL, memory, files -- are
registered here; ``register`` adds another.
"""

from __future__ import annotations

import re

from ledger.core.errors import InvalidRoot
from ledger.storage.engine import EngineSpec
from ledger.storage.files.spec import SPEC as FILES
from ledger.storage.memory.spec import SPEC as MEMORY
from ledger.storage.postgres.spec import SPEC as POSTGRES

__all__ = ["FALLBACK", "engine_for", "forms", "register", "registered"]

FALLBACK = FILES
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_ENGINES: list[EngineSpec] = [POSTGRES, MEMORY]


def register(spec: EngineSpec) -> None:
    """Add an engine (checked before the built-in ones; one per name)."""
    if any(e.name == spec.name for e in [*_ENGINES, FALLBACK]):
        raise ValueError(f"an engine named {spec.name!r} is registered already")
    _ENGINES.insert(0, spec)


def registered() -> list[EngineSpec]:
    """Every engine, in the order roots are matched (the fallback last)."""
    return [*_ENGINES, FALLBACK]


def forms() -> str:
    """How a root may be written, for messages."""
    return "; ".join(e.forms for e in registered())


def engine_for(root: str) -> EngineSpec:
    """The engine ``root`` names (module doc)."""
    for spec in _ENGINES:
        if spec.matches(root):
            return spec
    if _URL.match(root):
        raise InvalidRoot(
            f"no engine for root {root.split('://', 1)[0]}://...: a root is {forms()}"
        )
    return FALLBACK
