"""How deep a row may nest, and reading JSON that deep (pure: no I/O).

Rows may nest at most ``MAX_DEPTH`` arrays and objects deep (the row object
itself is level 1). Appends refuse deeper rows (InvalidRow); a stored line
deeper than that is damage (unreadable: check reports it, repair quarantines
it). ``too_deep`` decides it on the bytes without recursing. msgspec recurses
once per level and counts against Python's recursion limit, so a reader
already deep in its own call stack gets headroom for this many levels
(``with_headroom``). ``ledger.core.format.rows`` applies both to every line it
decodes; its callers reach these names through it too (``fmt.too_deep``).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = ["MAX_DEPTH", "nests_deeper", "too_deep", "with_headroom"]

MAX_DEPTH = 256

_NEST_TOKEN_RE = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)

T = TypeVar("T")


def too_deep(data: bytes, limit: int = MAX_DEPTH) -> bool:
    """True when the JSON text ``data`` nests more than ``limit`` arrays and
    objects deep (brackets inside strings do not count). Linear and
    non-recursive; most lines are settled by their length or bracket count."""
    if len(data) <= 2 * limit:
        return False  # every level takes two bytes
    if len(data) < 4096:
        if len(data.translate(None, _NOT_OPENING)) <= limit:
            return False  # every level takes an opening bracket (one pass keeps just those)
    elif not _brackets_exceed(data, limit):
        return False  # the same, by memchr jumps (faster than counting long lines)
    depth = 0
    for m in _NEST_TOKEN_RE.finditer(data):
        c = m.group()[0]
        if c == 0x5B or c == 0x7B:  # [ {
            depth += 1
            if depth > limit:
                return True
        elif c == 0x5D or c == 0x7D:  # ] }
            depth -= 1
    return False


def nests_deeper(value: Any, limit: int = MAX_DEPTH) -> bool:
    """True when the Python value ``value`` nests more than ``limit`` mappings,
    lists and tuples deep (``value`` itself is level 1): ``too_deep`` for a
    value not yet encoded, so the runtime can refuse input before anything
    that recurses (an adapter, a copy, an encoder) sees it. Iterative, linear,
    and stops at the first level past the limit."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, Mapping):
            children: Any = v.values()
        elif isinstance(v, (list, tuple)):
            children = v
        else:
            continue
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children
                     if isinstance(c, (Mapping, list, tuple)))
    return False


_NOT_OPENING = bytes(b for b in range(256) if b not in b"[{")  # bytes.translate deletes these


def _brackets_exceed(data: bytes, limit: int) -> bool:
    """Whether ``data`` holds more than ``limit`` opening brackets."""
    n = 0
    for ch in (b"[", b"{"):
        i = data.find(ch)
        while i >= 0:
            n += 1
            if n > limit:
                return True
            i = data.find(ch, i + 1)
    return False


def with_headroom(fn: Callable[[Any], T], arg: Any) -> T:
    """``fn(arg)`` (a msgspec encode or decode); when it runs out of Python
    recursion depth because the caller is deep in its own stack, once more
    with room for MAX_DEPTH more levels. Input deeper than that still
    raises RecursionError (callers check ``too_deep`` first)."""
    try:
        return fn(arg)
    except RecursionError:
        old = sys.getrecursionlimit()
        sys.setrecursionlimit(old + 2 * MAX_DEPTH + 64)
        try:
            return fn(arg)
        finally:
            sys.setrecursionlimit(old)
