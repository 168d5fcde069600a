"""A file workspace's quarantine directory, read and written by path.

The writer itself lives in ``ledger.storage.files.retention`` (truncation, a ledger
rewrite, also puts bytes aside, and ``ledger`` never imports ``recovery``);
recovery code that has a workspace uses its engine's ``put_quarantine`` and
``clean_quarantine`` (any engine). This module works on a directory:

- :func:`quarantine_bytes` puts bytes aside and returns the entry name:
  ``quarantine/<entry>.bin`` plus one line in ``quarantine/MANIFEST.jsonl``
  ``{entry, source, offset, length, reason, digest (xxh3-128 hex), time}``;
- :func:`entries` lists the manifest; :func:`read_entry` returns an entry's
  bytes; :func:`verify` checks every entry's bytes against its digest;
- :func:`clean` removes entries older than an age (under the workspace lock).
"""

from __future__ import annotations

import os
from typing import Any

from ledger.storage.files.retention import (
    ENTRY_SUFFIX,
    MANIFEST_NAME,
    ManifestEntry,
    Quarantine,
    QuarantineError,
    clean_quarantine,
    digest_hex,
    quarantine_dir,
    read_manifest,
)
from ledger.storage.files.retention import quarantine_bytes as _quarantine_bytes
from ledger.storage.files.workspace import FileWorkspace
from ledger.transcript.history import History

__all__ = [
    "ENTRY_SUFFIX",
    "MANIFEST_NAME",
    "ManifestEntry",
    "Quarantine",
    "QuarantineError",
    "clean",
    "entries",
    "quarantine_bytes",
    "read_entry",
    "verify",
]


def quarantine_bytes(history_path: str, data: bytes, *, source: str, offset: int,
                     reason: str, durability: str = "full") -> str:
    """Put ``data`` (taken from ``source`` at ``offset``) aside in
    ``<history_path>/quarantine``; returns the entry name. The same bytes from
    the same place are stored once."""
    return _quarantine_bytes(history_path, data, source=source, offset=offset, reason=reason,
                             durability=durability)


def entries(history_path: str) -> list[ManifestEntry]:
    return read_manifest(history_path)


def read_entry(history_path: str, entry: str) -> bytes:
    return Quarantine(history_path).read(entry)


def verify(history_path: str) -> list[dict[str, Any]]:
    """Problems with the quarantine: entries whose bytes are missing or do not
    match their digest or length. Empty when all is well."""
    problems = []
    for e in read_manifest(history_path):
        path = os.path.join(quarantine_dir(history_path), e.entry + ENTRY_SUFFIX)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            problems.append({"entry": e.entry, "problem": f"unreadable: {exc.strerror}"})
            continue
        if len(data) != e.length or digest_hex(data) != e.digest:
            problems.append({"entry": e.entry, "problem": "bytes do not match the manifest"})
    return problems


def clean(history: History | FileWorkspace, older_than_s: float) -> dict[str, int]:
    """Remove entries put aside more than ``older_than_s`` seconds ago."""
    return clean_quarantine(history, older_than_s)
