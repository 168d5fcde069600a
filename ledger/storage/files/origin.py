"""The ORIGIN hint of a forked file workspace: ``{"seq": N}``, where its fork
event is (a hint only: the row there is checked, ``FileWorkspace.origin``).
Written into a fork's directory before it is published (``fork.py``), and
into a loaded workspace that holds a fork event (``load.py``); copied by
``backup.py``. A leaf of the file engine.
"""

from __future__ import annotations

import os

from ledger.core.errors import UnsafePath
from ledger.core.format import rows as fmt
from ledger.storage.files import segments as segs
from ledger.storage.files.staging import write_new

ORIGIN_NAME = "ORIGIN"


def write_origin_hint(wsdir: str, seq: int, sync: bool) -> None:
    """Record where the fork event is (in a directory not yet published)."""
    write_new(os.path.join(wsdir, ORIGIN_NAME), [fmt.encode_json({"seq": seq}) + b"\n"],
              sync, 0o600)


def origin_hint(wsdir: str) -> int | None:
    """The seq the ORIGIN hint of ``wsdir`` names; None when there is none,
    or it is not a regular file holding ``{"seq": <int>}``."""
    try:
        fd = segs.open_regular(os.path.join(wsdir, ORIGIN_NAME))
    except (OSError, UnsafePath):
        return None
    try:
        data = os.read(fd, 256)  # the hint is a few bytes; anything longer is not one
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        hint = fmt.decode_json(data)
    except (ValueError, RecursionError):
        return None
    seq = hint.get("seq") if isinstance(hint, dict) else None
    if not isinstance(seq, int) or isinstance(seq, bool):
        return None
    return seq
