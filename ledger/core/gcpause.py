"""Building many rows at once without the cyclic garbage collector in the way.

A read that builds a whole window (hundreds of rows, each a dict holding lists
and dicts) allocates thousands of container objects that all stay alive until
the caller is done with them. CPython's collector counts those allocations and
runs its young-generation collections every 700 of them -- work that finds
nothing (decoded JSON holds no reference cycle) and, as the survivors pile up,
promotes them into the generations whose collections walk every object of the
process. A loop that decodes a line and frees it at once never triggers it.
``paused`` turns the collector off for the body of such a build and on again
afterwards: nothing is lost (objects that do form cycles meanwhile are
collected at the next collection, which the allocation count brings on) and
reference counting frees everything else as before.

The switch is process-wide. It is only turned off when it was on, and turned
on again only by the ``paused`` that turned it off, so nested and concurrent
builds (threads) leave it on when the last of them ends; a program that
switches the collector off itself keeps it off -- unless it does so from
another thread in the middle of such a build, which turns it back on at its
end.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["paused"]


@contextmanager
def paused() -> Iterator[None]:
    """The cyclic garbage collector off for the body (module doc)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
