"""The file engine's side of ``tledger import-legacy``: the one entry point
recovery uses (``recovery.legacy`` maps the records and writes through the
engine operations of any engine).

- :func:`settle_view` reads a legacy session directory (``chat-archive.jsonl``,
  ``chat.jsonl``, and after a crashed truncation its marker and tombstone: the
  marker format of this engine's rewrites) and settles the truncation
  *virtually* with the routine that settles the engine's own markers
  (``marker.decide``); nothing in the directory changes.
- :func:`legacy_lines` streams the lines of the files the settled directory holds.
- :func:`bulk_import` is the fast write path when the destination is a file
  workspace: the rows of many batches go into new sealed segments with one
  fsync (``bulk.bulk_load``) and quarantined lines go straight into the
  workspace's quarantine under the same lock. Any other engine gets None and
  recovery appends batch by batch.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ledger.core.errors import RecoveryError
from ledger.storage.files import segments as segs
from ledger.storage.files.bulk import bulk_load
from ledger.storage.files.lock import locked
from ledger.storage.files.marker import Resolution, decide, marker_matches, recover_interrupted
from ledger.storage.files.retention import Quarantine
from ledger.storage.files.workspace import FileWorkspace

__all__ = ["ARCHIVE", "CHAT", "BulkImport", "LegacyLine", "LegacyView", "bulk_import",
           "legacy_lines", "settle_view"]

ARCHIVE = "chat-archive.jsonl"
CHAT = "chat.jsonl"
MARKER = ARCHIVE + ".truncate.json"
TOMBSTONE = ARCHIVE + ".truncate"


@dataclass(frozen=True)
class LegacyView:
    """The files a settled legacy directory holds (None: absent), and how a
    crashed truncation was settled (``resolution.to_dict()`` for reports)."""

    archive: str | None
    chat: str | None
    resolution: Resolution | None


@dataclass(frozen=True)
class LegacyLine:
    source: str  # the legacy file's path
    offset: int
    data: bytes  # without its newline
    complete: bool  # False: the file's last line, torn (no newline)


def settle_view(dirpath: str) -> LegacyView:
    """Settle a crashed truncation of ``dirpath`` virtually (nothing changes)."""
    archive = os.path.join(dirpath, ARCHIVE)
    chat = os.path.join(dirpath, CHAT)
    tomb = os.path.join(dirpath, TOMBSTONE)
    tombs = [(tomb, archive)] if os.path.isfile(tomb) else []
    res = decide(os.path.join(dirpath, MARKER), tombs,
                 lambda m: marker_matches(m, [archive], [chat]))
    eff_archive = archive if os.path.isfile(archive) else None
    if res is not None and archive in res.restored:
        eff_archive = tomb
    return LegacyView(eff_archive, chat if os.path.isfile(chat) else None, res)


def legacy_lines(view: LegacyView) -> Iterator[LegacyLine]:
    """Every line of the archive, then the chat (streaming)."""
    for path in (view.archive, view.chat):
        if path is None:
            continue
        # The legacy directory is the user's: a symlinked file is read where it points.
        for line in segs.iter_lines(os.path.realpath(path)):
            yield LegacyLine(path, line.offset, line.data, line.complete)


class BulkImport:
    """An import into one file workspace: :meth:`put` sets bytes aside in its
    quarantine, :meth:`load` appends the batches as sealed segments (the
    quarantine is written from inside the load, under its lock)."""

    def __init__(self, workspace: FileWorkspace) -> None:
        self.workspace = workspace
        self.quarantine = Quarantine(workspace.path, durability=workspace.store.durability)

    def put(self, data: bytes, *, source: str, offset: int, reason: str) -> str:
        return self.quarantine.put(data, source=source, offset=offset, reason=reason)

    def load(self, batches: Iterable[Sequence[dict[str, Any]]]) -> int | None:
        """Append ``batches`` (internal rows admitted); the epoch after, or
        None when no row was written."""
        result = bulk_load(self.workspace, batches, internal=True)
        return result.epoch if result.rows else None


def bulk_import(engine: object) -> BulkImport | None:
    """A :class:`BulkImport` when ``engine`` is a file workspace (created, its
    FORMAT written and an interrupted rewrite settled), else None."""
    if not isinstance(engine, FileWorkspace):
        return None
    try:
        engine.ensure_dir()
    except OSError as exc:
        raise RecoveryError(f"workspace {engine.workspace!r}: cannot create it: {exc}") from exc
    with locked(engine.path, engine.workspace, engine.store.lock_timeout, shared=False):
        engine.ensure_format()
        recover_interrupted(engine.path, engine.store.durability)
    return BulkImport(engine)
