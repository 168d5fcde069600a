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

import inspect
import re
import sys
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import msgspec

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


#: Exact types that hold nothing (a subclass may be anything, so only these).
_LEAVES = frozenset((str, int, float, bool, type(None), bytes))


def nests_deeper(value: Any, limit: int = MAX_DEPTH) -> bool:
    """True when the Python value ``value`` nests more than ``limit`` mappings,
    lists and tuples deep (``value`` itself is level 1): ``too_deep`` for a
    value not yet encoded, so the runtime can refuse input before anything
    that recurses (an adapter, a copy, an encoder) sees it. Iterative, linear,
    and stops at the first level past the limit."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        # Builtins first: an ABC check costs several times a type check.
        if isinstance(v, (dict, list, tuple)):
            children: Any = v.values() if isinstance(v, dict) else v
        elif isinstance(v, Mapping):
            children = v.values()
        else:
            continue
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children if type(c) not in _LEAVES and (
            isinstance(c, (dict, list, tuple)) or isinstance(c, Mapping)))
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
        _limit_changes[0] += 1  # a capped decode running meanwhile discards its answer
        sys.setrecursionlimit(old + 2 * MAX_DEPTH + 64)
        try:
            return fn(arg)
        finally:
            sys.setrecursionlimit(old)
            _limit_changes[0] += 1


# How many times ``with_headroom`` has raised or restored the recursion limit
# (process-wide, so a decode in another thread may see it change under it).
_limit_changes = [0]


# --- decoding a chunk of lines with msgspec's own depth guard ----------------
#
# msgspec counts one level of Python recursion per array and object it
# decodes (or skips), against the thread's recursion limit. Called with only
# ``_BUDGET`` levels of that limit left, a decode of lines nesting deeper
# than MAX_DEPTH raises RecursionError -- the depth test of a whole chunk for
# the price of one descent, where counting brackets reads every byte
# (``bytes.translate``: ~8 instructions a byte, the largest cost of a check or
# a provider view above decoding itself; bench/RESULTS.md, issue 31).
#
# The descent is C code: msgspec's encoder enters one level of the same
# recursion limit per list it encodes, so encoding a list nested ``k`` deep
# whose innermost item only ``enc_hook`` can encode runs the hook -- and the
# decode in it -- ``k`` levels (plus the hook's own frame) further down. A
# chain of ``k`` Python calls did the same for ~12x the time (~700 frames
# before every chunk; bench/RESULTS.md, issue 31, checkfast). Where the
# interpreter counts differently (Python 3.12 moved C recursion to a
# separate counter), the self-test below fails and callers count brackets.

_BUDGET = MAX_DEPTH - 8  # levels left to msgspec; lines 249-256 deep go line by line
_MAX_SINK = 4000  # levels this may descend; a higher recursion limit counts brackets instead
_OPENING_OR_NL = bytes(b for b in range(256) if b not in b"[{\n")  # translate deletes these


def _frames() -> int:
    """Python frames on this thread's stack (each holds one level of the
    recursion limit; C code may hold more, which only leaves less room)."""
    n = 0
    # No local may hold this function's own frame when it returns: the frame
    # would hold itself (a cycle), and through ``f_back`` every caller's frame
    # and locals -- a check's scanner and its 1 MiB chunk -- until a later
    # collection of the oldest generation found them.
    f: Any = inspect.currentframe()  # this function's frame (CPython always gives one)
    f = f.f_back if f is not None else None
    while f is not None:
        n += 1
        f = f.f_back
    return n


class _Bottom:
    """The innermost item of a descent: only ``enc_hook`` encodes it."""


_BOTTOM = _Bottom()
_encode = msgspec.json.encode
_nests: dict[int, list[Any]] = {}  # k -> a list nested k deep around _BOTTOM (never changed)
_HOOK_LEVELS = 1  # the hook's frame: a descent of k lists holds k + 1 levels (measured)


def _nest(k: int) -> list[Any]:
    x = _nests.get(k)
    if x is None:
        x = [_BOTTOM]
        for _ in range(k - 1):
            x = [x]
        if len(_nests) < 64:  # the stack depths a process decodes at are few
            _nests[k] = x
    return x


def _descend(k: int, fn: Callable[[Any], T], arg: Any) -> T:
    """``fn(arg)`` with ``k`` + _HOOK_LEVELS fewer levels of recursion left
    (``k`` >= 1); its exceptions propagate unchanged."""
    out: list[T] = []

    def hook(_bottom: Any) -> None:
        out.append(fn(arg))

    _encode(_nest(k), enc_hook=hook)
    return out[0]


def _sink(k: int, fn: Callable[[Any], T], arg: Any) -> T:
    return _sink(k - 1, fn, arg) if k > 0 else fn(arg)


def _capped(fn: Callable[[Any], T], arg: Any) -> T | None:
    """``fn(arg)`` with at most ``_BUDGET`` levels of recursion left (input
    deeper raises RecursionError); None when that would take more than
    ``_MAX_SINK`` levels, or when ``with_headroom`` in another thread raised
    or restored the recursion limit while it ran (the cap was not sure)."""
    changes = _limit_changes[0]
    spare = sys.getrecursionlimit() - _frames() - _BUDGET - 1  # levels to hold before fn
    if spare > _MAX_SINK:
        return None
    if spare > _HOOK_LEVELS:
        out = _descend(spare - _HOOK_LEVELS, fn, arg)
    elif spare >= 0:  # a level or two: Python frames hold them
        out = _sink(spare, fn, arg)
    else:  # less room already
        out = fn(arg)
    if _limit_changes[0] != changes:
        return None  # the limit moved mid-decode: the caller takes the counting path
    return out


def _self_test() -> bool:
    """Whether msgspec's decode, run by :func:`_capped`, refuses one level
    more than ``_BUDGET`` (objects, arrays, and values a typed decoder skips)
    and accepts rows of ordinary depth, on this interpreter. (Where C code
    between the frames holds levels too, as the import machinery does while
    this runs, a row may get fewer than ``_BUDGET``: never more.)"""
    import msgspec

    class _Probe(msgspec.Struct):
        a: int = 0

    def nested(depth: int, open_: bytes, close: bytes) -> bytes:
        return b'{"b":' + open_ * (depth - 1) + b"1" + close * (depth - 1) + b"}"

    generic = msgspec.json.Decoder().decode_lines
    typed = msgspec.json.Decoder(_Probe).decode_lines  # "b" is skipped, not built
    for dec in (generic, typed):
        for open_, close in ((b"[", b"]"), (b'{"x":', b"}")):
            try:
                if _capped(dec, nested(64, open_, close)) is None:
                    return False
            except RecursionError:
                return False
            try:
                _capped(dec, nested(_BUDGET + 1, open_, close))
            except RecursionError:
                continue
            return False
    return True


DEPTH_CAPPED = _self_test()


# Below this many bytes a chunk's brackets are counted (``bytes.translate``,
# ~1 us plus ~1.2 us a KiB) rather than the decode run at the bottom of a
# descent (~15-18 us a chunk whatever its size, the encoder's ~700 levels):
# a small turn's window is one such chunk (bench/RESULTS.md, issue 31,
# twelfth round, tidy3).
_COUNT_BELOW = 8192


def shallow_lines(fn: Callable[[Any], T], data: Any, raw: bytes) -> T | None:
    """``fn(data)`` (a msgspec ``decode_lines``) when no line of ``raw`` (the
    same lines, as bytes) can nest deeper than MAX_DEPTH; None when one may,
    or the decode ran out of recursion: the caller then goes line by line,
    where ``too_deep`` decides each line. msgspec's DecodeError propagates.

    Where :data:`DEPTH_CAPPED`, the decode itself is the test (see above),
    except for a chunk shorter than ``_COUNT_BELOW`` bytes (``raw`` no
    shorter than ``data``: a caller that passes less takes the descent) whose lines each
    hold at most MAX_DEPTH opening brackets (a line nests at most as deep as
    it has opening brackets: the same cap, decided by counting); elsewhere
    no line may hold more opening brackets than MAX_DEPTH."""
    counted = False
    if DEPTH_CAPPED:
        if len(data) <= len(raw) < _COUNT_BELOW:  # raw holds data's lines (or more)
            counted = _brackets_within(raw)
        if not counted:
            try:
                out = _capped(fn, data)
            except RecursionError:
                return None
            if out is not None:
                return out
    if not counted and not _brackets_within(raw):
        return None
    try:
        return with_headroom(fn, data)
    except RecursionError:
        return None


def _brackets_within(raw: bytes) -> bool:
    """Whether no line of ``raw`` holds more than MAX_DEPTH opening brackets."""
    return max(map(len, raw.translate(None, _OPENING_OR_NL).split(b"\n"))) <= MAX_DEPTH
