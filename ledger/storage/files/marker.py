"""The marker of a rewrite in flight and the rules that settle one after a
crash (the transaction itself is ``ledger.storage.files.rewrite``).

Marker format
=============
The legacy reference design wrote ``chat-archive.jsonl.truncate.json``::

    {"finalArchiveHash": H, "finalChatHash": H,
     "rawHashes": {"version": 1, "finalArchiveHash": H, "finalChatHash": H}}

each ``H`` a 64-hex SHA-256 or null (null: that file must be absent). The
top-level digests are over the *decoded text* (UTF-8, invalid sequences
replaced by U+FFFD, as a JavaScript ``readFile(…, "utf8")`` sees them); the
``rawHashes`` are over the raw bytes, versioned separately so that a rewrite
holding invalid UTF-8 (which decoding would blur) is recognised exactly. When
``rawHashes`` is present it decides, and an invalid one makes the whole
marker invalid (an invalid marker never commits: its transaction rolls
back). A marker without ``rawHashes`` (older writers) is judged by the text
digests.

``REWRITE.json`` has that same shape. Its *archive* is the concatenation, in
order, of the sealed segments the rewrite changes; its *chat* is the segment
that was active before the rewrite. It adds ``"files": {"version": 1,
"archive": [names], "chat": name, "final": {name: raw H or null}}`` so each
segment is also checked on its own, plus ``op`` and ``time`` for people.
"""

from __future__ import annotations

import codecs
import hashlib
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from ledger.core.format import files as ffmt
from ledger.core.format import rows as fmt
from ledger.storage.files import segments as segs

MARKER_NAME = ffmt.REWRITE_MARKER_NAME
TOMBSTONE_SUFFIX = ffmt.REWRITE_TOMBSTONE_SUFFIX
RAW_HASH_VERSION = 1
FILES_VERSION = 1
_HEX64 = re.compile(r"[0-9a-fA-F]{64}")
_READ = 1 << 20


# --- digests and the marker ------------------------------------------------------


def raw_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def text_digest(data: bytes) -> str:
    """SHA-256 of the UTF-8 text the bytes decode to, invalid sequences replaced."""
    return hashlib.sha256(data.decode("utf-8", "replace").encode("utf-8")).hexdigest()


def group_digests(paths: Sequence[str]) -> tuple[str | None, str | None]:
    """(text, raw) digests of the concatenation of the files that exist, or
    (None, None) when none of them exists. Streams."""
    raw = hashlib.sha256()
    text = hashlib.sha256()
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    found = False
    for path in paths:
        try:
            f = open(path, "rb")  # closed by the with below
        except FileNotFoundError:
            continue
        found = True
        with f:
            for chunk in iter(partial(f.read, _READ), b""):
                raw.update(chunk)
                text.update(decoder.decode(chunk).encode("utf-8"))
    if not found:
        return None, None
    text.update(decoder.decode(b"", final=True).encode("utf-8"))
    return text.hexdigest(), raw.hexdigest()


def _content_digests(chunks: Sequence[bytes] | None) -> tuple[str | None, str | None]:
    if chunks is None:
        return None, None
    data = b"".join(chunks)
    return text_digest(data), raw_digest(data)


def file_raw_digest(path: str) -> str | None:
    return group_digests([path])[1]


@dataclass(frozen=True)
class Marker:
    """A parsed truncation marker (legacy or native)."""

    archive_text: str | None
    chat_text: str | None
    raw: tuple[str | None, str | None] | None  # None: the marker predates raw digests
    archive_files: tuple[str, ...] = ()
    chat_file: str | None = None
    final: dict[str, str | None] = field(default_factory=dict)
    op: str | None = None


def _hash_field(d: dict[str, Any], key: str) -> tuple[bool, str | None]:
    if key not in d:
        return False, None
    v = d[key]
    if v is None:
        return True, None
    if isinstance(v, str) and _HEX64.fullmatch(v):
        return True, v.lower()
    return False, None


def parse_marker(data: bytes) -> Marker | None:
    """The marker in ``data``, or None when it is invalid (never commits)."""
    try:
        d = fmt.decode_json(data)
    except Exception:  # any undecodable marker is invalid
        return None
    if not isinstance(d, dict):
        return None
    ok_a, archive = _hash_field(d, "finalArchiveHash")
    ok_c, chat = _hash_field(d, "finalChatHash")
    if not (ok_a and ok_c):
        return None
    raw: tuple[str | None, str | None] | None = None
    if "rawHashes" in d:
        r = d["rawHashes"]
        if (
            not isinstance(r, dict)
            or r.get("version") != RAW_HASH_VERSION
            or isinstance(r.get("version"), bool)
        ):
            return None
        ok_ra, raw_a = _hash_field(r, "finalArchiveHash")
        ok_rc, raw_c = _hash_field(r, "finalChatHash")
        if not (ok_ra and ok_rc):
            return None
        raw = (raw_a, raw_c)
    archive_files: tuple[str, ...] = ()
    chat_file = None
    final: dict[str, str | None] = {}
    if "files" in d:
        f = d["files"]
        if not isinstance(f, dict) or f.get("version") != FILES_VERSION:
            return None
        names = f.get("archive")
        cf = f.get("chat")
        fin = f.get("final")
        if not isinstance(names, list) or not all(
            isinstance(n, str) and ffmt.segment_number(n) is not None for n in names
        ):
            return None
        if cf is not None and not (isinstance(cf, str) and ffmt.segment_number(cf) is not None):
            return None
        if not isinstance(fin, dict):
            return None
        for name in fin:
            if ffmt.segment_number(name) is None:
                return None
            ok, h = _hash_field(fin, name)
            if not ok:
                return None
            final[name] = h
        archive_files, chat_file = tuple(names), cf
    op = d.get("op") if isinstance(d.get("op"), str) else None
    return Marker(archive, chat, raw, archive_files, chat_file, final, op)


def marker_matches(
    marker: Marker,
    archive_paths: Sequence[str],
    chat_paths: Sequence[str],
    final_paths: dict[str, str] | None = None,
) -> bool:
    """Whether the files are what the marker says the rewrite produced."""
    a_text, a_raw = group_digests(archive_paths)
    c_text, c_raw = group_digests(chat_paths)
    if marker.raw is not None:
        if (a_raw, c_raw) != marker.raw:
            return False
    elif (a_text, c_text) != (marker.archive_text, marker.chat_text):
        return False
    for name, want in marker.final.items():
        path = (final_paths or {}).get(name)
        if path is None or file_raw_digest(path) != want:
            return False
    return True


@dataclass
class Resolution:
    """What settling an interrupted rewrite did (or, in a dry run, would do)."""

    action: str  # "settled-tombstones" | "discarded-marker" | "committed" | "rolled-back"
    restored: list[str] = field(default_factory=list)  # files put back from tombstones
    discarded: list[str] = field(default_factory=list)  # tombstones / markers removed
    marker_valid: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "restored": self.restored,
            "discarded": self.discarded,
            "marker_valid": self.marker_valid,
        }


def decide(
    marker_path: str, tombstones: Sequence[tuple[str, str]], match: Callable[[Marker], bool]
) -> Resolution | None:
    """Decide how to settle a truncation transaction (pure: nothing is changed).

    ``tombstones`` are ``(tombstone, file it was taken from)`` pairs that exist.
    Returns None when there is nothing to settle.
    """
    have_marker = os.path.lexists(marker_path)
    if not have_marker:
        if not tombstones:
            return None
        res = Resolution("settled-tombstones")
        for tomb, target in tombstones:
            if os.path.lexists(target):
                res.discarded.append(tomb)
            else:
                res.restored.append(target)
        return res
    try:
        with open(marker_path, "rb") as f:
            marker = parse_marker(f.read(1 << 20))
    except OSError:
        marker = None
    if not tombstones:
        return Resolution(
            "discarded-marker", discarded=[marker_path], marker_valid=marker is not None
        )
    if marker is not None and match(marker):
        return Resolution("committed", discarded=[t for t, _ in tombstones] + [marker_path])
    return Resolution(
        "rolled-back",
        restored=[target for _, target in tombstones],
        discarded=[marker_path],
        marker_valid=marker is not None,
    )


def apply(
    res: Resolution,
    marker_path: str,
    tombstones: Sequence[tuple[str, str]],
    dirpath: str,
    *,
    durability: str = "full",
) -> None:
    """Carry out a :func:`decide` result on disk (under the writer lock)."""
    by_target = {target: tomb for tomb, target in tombstones}
    if res.action == "settled-tombstones":
        for tomb, target in tombstones:
            if os.path.lexists(target):
                os.unlink(tomb)
            else:
                os.rename(tomb, target)
    elif res.action == "committed":
        for tomb, _ in tombstones:
            segs.unlink_quietly(tomb)
    elif res.action == "rolled-back":
        for target in res.restored:
            os.rename(by_target[target], target)
    if durability != "off":
        segs.fsync_dir(dirpath)
    if res.action != "settled-tombstones":
        segs.unlink_quietly(marker_path)
        if durability != "off":
            segs.fsync_dir(dirpath)


# --- native settle --------------------------------------------------------------


def native_tombstones(history_path: str) -> list[tuple[str, str]]:
    try:
        names = os.listdir(history_path)
    except FileNotFoundError:
        return []
    out = []
    for name in sorted(names):
        if name.endswith(TOMBSTONE_SUFFIX):
            target = name[: -len(TOMBSTONE_SUFFIX)]
            if ffmt.segment_number(target) is not None:
                out.append((os.path.join(history_path, name), os.path.join(history_path, target)))
    return out


def _native_match(history_path: str) -> Callable[[Marker], bool]:
    def match(m: Marker) -> bool:
        if m.chat_file is None and not m.archive_files and not m.final:
            return False  # a legacy-shaped marker in a ledger directory: cannot be checked
        j = lambda n: os.path.join(history_path, n)  # noqa: E731
        return marker_matches(
            m,
            [j(n) for n in m.archive_files],
            [j(m.chat_file)] if m.chat_file else [],
            {n: j(n) for n in m.final},
        )

    return match


def plan_recovery(history_path: str) -> Resolution | None:
    """What :func:`recover_interrupted` would do, without doing it."""
    return decide(
        os.path.join(history_path, MARKER_NAME),
        native_tombstones(history_path),
        _native_match(history_path),
    )


def recover_interrupted(history_path: str, durability: str = "full") -> Resolution | None:
    """Commit or roll back an interrupted rewrite of this workspace (call under
    the exclusive lock). None when there was nothing to settle."""
    marker = os.path.join(history_path, MARKER_NAME)
    tombs = native_tombstones(history_path)
    res = decide(marker, tombs, _native_match(history_path))
    if res is not None:
        apply(res, marker, tombs, history_path, durability=durability)
    return res


def recover_if_marked(history_path: str, durability: str = "full") -> Resolution | None:
    """The append path's cheap check: one ``lstat`` when no rewrite was
    interrupted. (Tombstones without a marker are harmless leftovers of a
    rewrite that died before it changed anything; rewrites settle them.)"""
    if not os.path.lexists(os.path.join(history_path, MARKER_NAME)):
        return None
    return recover_interrupted(history_path, durability)
