"""What this process's last appends wrote to the active segment, kept so the
recall index can catch up without reading those lines back (``recall``).

Each append rewrites the active segment by rename: the new file is the old
one's bytes followed by the batch's lines. A ``Step`` records that: the
stamp of the file the append read (identity, size, times), the stamp of the
file it committed, where the batch starts and its lines. ``Appends`` keeps
the steps while each starts from the file the one before it committed (a
chain of stamps), up to ``KEEP_STEPS`` appends and ``KEEP_BYTES`` of lines,
oldest dropped first (a search after more appends than that reads the log).

``lines_after`` answers from the steps only when their stamps link a file
the caller checked to the file there now: the bytes then are the bytes
checked plus these lines, as sure as a stamp that did not change means an
unchanged file (the rule sealed segments are trusted by, DESIGN 6). Any
other change in between (another process's append, a rewrite, a copy put
back, an edit) leaves a stamp no step names, and the caller reads the log
as before. Held in memory only: a process that ends loses nothing. Steps
are added under the workspace's exclusive lock and read under its shared
lock, so never both at once.
"""

from __future__ import annotations

from collections import deque

import msgspec

from ledger.core.format.files import Stamp

# What is kept: a search after more appends than this reads them from the log
# (its cost then spread over as many appends); held by a process that only
# appends too, so small.
KEEP_BYTES = 256 * 1024
KEEP_STEPS = 64


class Step(msgspec.Struct, frozen=True):
    """One append to segment ``segment``: the file it read (``before``,
    ``offset`` bytes, whole lines) and the one it committed (``after``),
    which holds ``lines`` (each ending in a newline) from ``offset`` on. A
    struct, not a NamedTuple: its class is made at every start of the
    package, and a NamedTuple's costs ~1.2 M instructions (generated source
    compiled), this ~0.1 M."""

    segment: int
    before: Stamp
    after: Stamp
    offset: int
    lines: list[bytes]
    size: int  # bytes of ``lines``


class Appends:
    """The chained steps of this process's last appends (module doc)."""

    def __init__(self) -> None:
        self._steps: deque[Step] = deque()
        self._held = 0  # bytes of their lines

    def add(self, step: Step) -> None:
        """Kept after the others when it starts from the file the last one
        committed, else alone; then the oldest dropped while more than
        KEEP_STEPS steps or KEEP_BYTES of lines are held."""
        steps = self._steps
        if steps and (steps[-1].segment, steps[-1].after) != (step.segment, step.before):
            steps.clear()
            self._held = 0
        steps.append(step)
        self._held += step.size
        while len(steps) > 1 and (len(steps) > KEEP_STEPS or self._held > KEEP_BYTES):
            self._held -= steps.popleft().size

    def lines_after(
        self, segment: int, checked: Stamp, offset: int, now: Stamp
    ) -> list[tuple[int, bytes]] | None:
        """The lines (offset, bytes without the newline) segment ``segment``
        holds after the ``offset`` bytes of the file stamped ``checked``, when
        the steps lead from that file to the one stamped ``now``; None when
        they do not (the caller reads the file)."""
        steps = self._steps
        if not steps or steps[-1].after != now:
            return None
        taken: list[Step] = []
        for s in reversed(steps):  # newest first: a search after each append
            taken.append(s)
            if s.segment == segment and s.before == checked and s.offset == offset:
                out = []
                for step in reversed(taken):
                    at = step.offset
                    for line in step.lines:
                        out.append((at, line[:-1]))
                        at += len(line)
                return out
        return None
