"""How a root names the in-memory engine: ``memory://`` or ``memory://NAME``.

Apart from the engine so that the registry matches and checks roots without
loading the engine (every ``Store`` and ``tledger`` start asks the registry).
"""

from __future__ import annotations

import re

from ledger.core.errors import InvalidRoot

__all__ = ["SCHEME", "is_memory_root", "root_name"]

SCHEME = "memory://"
_NAME = re.compile(r"[A-Za-z0-9._-]{1,100}")


def is_memory_root(root: str) -> bool:
    return root.startswith(SCHEME)


def root_name(root: str) -> str | None:
    """The name of a ``memory://NAME`` root (None for ``memory://``);
    InvalidRoot for anything else after the scheme."""
    name = root[len(SCHEME):]
    if not name:
        return None
    if not _NAME.fullmatch(name):
        raise InvalidRoot(
            f"malformed memory root {root!r}: memory:// alone, or memory://NAME with NAME of "
            "1 to 100 letters, digits, '.', '_' or '-'"
        )
    return name
