"""Loading verified rows, byte for byte, into a new file workspace (the file
side of ``tledger migrate``).

The workspace is built in a temporary directory beside it (FORMAT and sealed
segments of whole batches, each fsynced) and appears by one ``rename`` of the
directory, so a failure at any point leaves no partial workspace: only the
temporary directory, which is removed. A stable receipt with a new epoch is
published afterwards (``rebaseline``).

The segments have the shape appends and their automatic merges keep
(``merge.classes``): segments of the biggest class (16 MiB at the default
64 KiB cap), then the rest cut into fewer than ``FANOUT`` of each smaller
class, the newest rows in the smallest. So a loaded 1 GiB history is about
80 files, not 17,000 of the cap's size: every append stats each segment and
a fork links each one. At most one segment of the biggest class is held in
memory.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ledger.core.checks import Loaded
from ledger.core.errors import LedgerError
from ledger.core.format import files as ffmt
from ledger.core.format import rows as fmt
from ledger.core.rows import Row
from ledger.storage.files import segments as segs
from ledger.storage.files.merge import classes
from ledger.storage.files.origin import write_origin_hint
from ledger.storage.files.staging import staged, write_new

if TYPE_CHECKING:
    from ledger.storage.files.ports import FileHistory


def load_rows(ws: FileHistory, rows: Iterable[Row]) -> Loaded:
    """Write ``rows`` (in log order, each batch whole) as the new workspace
    ``ws``; refuses a workspace that exists. Returns rows and bytes written."""
    if ws.exists():
        raise LedgerError(f"workspace {ws.workspace!r} already exists in {ws.store.root}; "
                          "nothing was written")
    parent = os.path.dirname(ws.path)
    os.makedirs(parent, exist_ok=True)
    sync = ws.store.durability != "off"
    count = total = origin = 0
    with staged(parent, f".load-{ws.workspace}-", ws.path, sync,
                f"workspace {ws.workspace!r}: loading failed") as tmp:
        write_new(os.path.join(tmp, ffmt.FORMAT_NAME), [ffmt.FORMAT_TEXT], sync, 0o644)
        sizes = classes(ws.store.segment_bytes)
        number = 1
        chunk: list[tuple[bytes, bool]] = []  # lines with "starts a batch"
        size = 0
        for row in rows:
            starts_batch = row.batch.get("i", 0) == 0
            if chunk and starts_batch and size >= sizes[-1]:
                write_new(segs.segment_path(tmp, number), [ln for ln, _ in chunk], sync, 0o644)
                number, chunk, size = number + 1, [], 0
            if row.kind == fmt.FORK_KIND:
                origin = row.seq  # the newest fork event: the workspace's origin
            chunk.append((row.line + b"\n", starts_batch))
            size += len(row.line) + 1
            count += 1
            total += len(row.line) + 1
        for piece in _tail(chunk, sizes[:-1]):
            write_new(segs.segment_path(tmp, number), piece, sync, 0o644)
            number += 1
        if origin:
            write_origin_hint(tmp, origin, sync)
    ws.rebaseline()
    return Loaded(count, total)


def _tail(lines: list[tuple[bytes, bool]], sizes: list[int]) -> list[list[bytes]]:
    """The newest rows (less than a segment of the biggest class) as
    segments: pieces of the largest of ``sizes``, each cut at a batch start,
    and what is left after them cut the same way by the smaller ones; the
    last piece (the active segment) is under ``sizes[0]`` or one batch."""
    if not lines:
        return []
    if not sizes:
        return [[ln for ln, _ in lines]]
    pieces: list[list[bytes]] = []
    cur: list[tuple[bytes, bool]] = []
    size = 0
    for ln, starts in lines:
        if cur and starts and size >= sizes[-1]:
            pieces.append([x for x, _ in cur])
            cur, size = [], 0
        cur.append((ln, starts))
        size += len(ln)
    return pieces + _tail(cur, sizes[:-1])
