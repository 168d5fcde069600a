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
from types import TracebackType

__all__ = ["paused"]


class paused:  # lower case: used like a function, ``with paused():``
    """The cyclic garbage collector off for the body of a ``with`` (module
    doc). A class rather than a generator: leaving it allocates nothing (a
    generator's exit raises StopIteration, a new object), so the collection
    that the body's allocations have made due does not run right away, on
    the rows just built, but at the caller's next allocation -- after a
    caller that only counts or copies the rows has freed them, none at all."""

    __slots__ = ("_was",)

    def __enter__(self) -> None:
        self._was = gc.isenabled()
        if self._was:
            gc.disable()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._was:
            gc.enable()
