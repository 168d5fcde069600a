"""Loading verified rows, byte for byte, into a new file workspace (the file
side of ``tledger migrate``).

The workspace is built in a temporary directory beside it (FORMAT and sealed
segments of whole batches, each fsynced) and appears by one ``rename`` of the
directory, so a failure at any point leaves no partial workspace: only the
temporary directory, which is removed. A stable receipt with a new epoch is
published afterwards (``rebaseline``).
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
        number = 1
        chunk: list[bytes] = []
        size = 0
        for row in rows:
            starts_batch = row.batch.get("i", 0) == 0
            if chunk and starts_batch and size >= ws.store.segment_bytes:
                write_new(segs.segment_path(tmp, number), chunk, sync, 0o644)
                number, chunk, size = number + 1, [], 0
            if row.kind == fmt.FORK_KIND:
                origin = row.seq  # the newest fork event: the workspace's origin
            chunk.append(row.line + b"\n")
            size += len(row.line) + 1
            count += 1
            total += len(row.line) + 1
        if chunk:
            write_new(segs.segment_path(tmp, number), chunk, sync, 0o644)
        if origin:
            write_origin_hint(tmp, origin, sync)
    ws.rebaseline()
    return Loaded(count, total)

