"""The reference a ranked search is held to: what an index built whole from
the log answers. The workspace ``root/w`` is copied to ``scratch`` without
its recall index (and whatever else ``also`` names, e.g. the vectors) and
searched by a new store."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ledger.core.format import files as ffmt


@contextmanager
def rebuilt(root: Path, scratch: Path, open_history: Callable[[Path], Any],
            *also: str) -> Iterator[Any]:
    """A ``session_history`` tool on a copy of ``root/w`` in ``scratch`` (made
    anew) with no recall index (nor the files matching ``also``): the next
    search builds it whole; its connection is closed on the way out."""
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(root / "w", scratch / "w",
                    ignore=shutil.ignore_patterns(ffmt.RECALL_NAME + "*", *also))
    tool = open_history(scratch).session_history()
    try:
        yield tool
    finally:
        if tool.reader._recall is not None:
            tool.reader._recall.close()
