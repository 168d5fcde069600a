"""The tail every bench script shares: a scratch directory, progress lines, the JSON out.

A script builds its histories in ``scratch(prefix)`` (removed at the end, on error too),
logs progress with ``progress()`` (seconds since the start, on stderr, so stdout stays
the JSON document), and ends with ``emit(doc, args.json)``: the document on stdout and,
with ``--json FILE``, the same text in FILE.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def scratch(prefix: str) -> Iterator[str]:
    """A new temporary directory, removed with everything in it when the block ends."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def progress() -> Callable[[str], None]:
    """A logger printing ``"  12.3s message"`` (time since this call) to stderr."""
    started = time.monotonic()

    def log(msg: str) -> None:
        print(f"{time.monotonic() - started:7.1f}s {msg}", file=sys.stderr, flush=True)

    return log


def machine() -> dict[str, Any]:
    """The CPU count and the load averages now (a run's ``"machine"`` entry)."""
    return {"cpus": os.cpu_count(), "load_at_end": os.getloadavg()}


def emit(doc: Any, path: str | None, *, indent: int = 2) -> None:
    """Print ``doc`` as JSON and, when ``path`` is given, write the same text there."""
    text = json.dumps(doc, indent=indent)
    print(text)
    if path:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text + "\n")
