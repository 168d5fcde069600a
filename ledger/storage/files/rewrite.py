"""Rewrite primitives and their transaction marker.

Every rewrite of existing segments -- ``reject``, ``truncate_after``,
``purge_before_floor`` and ``recovery``'s repair -- goes through
:func:`commit_rewrite`, under the exclusive workspace lock:

1. publish a **pending** receipt (cursors expire; a failure aborts);
2. put aside whatever leaves the live log (the caller's ``before_commit``:
   quarantine entries, fsynced) -- before any segment changes;
3. *tombstones*: hard-link every segment about to change to
   ``seg-NNNNNNNN.jsonl.truncate`` (O(1): the rewrite replaces segments by
   rename, so the link keeps the old bytes);
4. the **marker** ``REWRITE.json`` (temp + fsync + rename) with the digests of
   the final files;
5. rewrite each changed segment by temp + rename, or unlink it when it ends
   up empty; fsync the directory;
6. remove the tombstones, then the marker;
7. re-baseline: a stable receipt with a **new epoch**.

After a crash at any step the next writer (``recover_interrupted``, called
by appends, rewrites, repair and import) settles it with one routine that
serves this format and the legacy one alike:

- no marker, tombstones: each tombstone is discarded when its file exists,
  else restored (the crash came before the marker: nothing changed);
- marker, no tombstones: the marker is discarded (the crash came after step 6's
  first half: the rewrite is complete);
- marker and tombstones: **committed** when every file matches the marker's
  digests, else **rolled back** by renaming each tombstone over its file.

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
import secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ledger.core import format as fmt
from ledger.core.errors import CommitFailed, LedgerError, RecoveryError
from ledger.core.rows import new_id, now_ms
from ledger.core.windows import Entry
from ledger.storage.files import segments as segs
from ledger.storage.files.index import entry_of
from ledger.storage.files.lock import locked
from ledger.storage.files.retention import Quarantine
from ledger.storage.files.state import empty_receipt, unwrap

if TYPE_CHECKING:
    from ledger.storage.files.reads import WorkspaceBase as History
    from ledger.storage.files.state import State

MARKER_NAME = fmt.REWRITE_MARKER_NAME
TOMBSTONE_SUFFIX = fmt.REWRITE_TOMBSTONE_SUFFIX
RAW_HASH_VERSION = 1
FILES_VERSION = 1
QUARANTINE_VERSION = 1
_HEX64 = re.compile(r"[0-9a-fA-F]{64}")
_READ = 1 << 20

# Test hook: called with the name of each step of commit_rewrite.
FAULT_HOOK: Callable[[str], None] | None = None


class RewriteRefused(LedgerError):
    """A rewrite that would break a rule (split a batch, erase a reset
    candidate, reject a reset); nothing was written."""


def _step(name: str) -> None:
    if FAULT_HOOK is not None:
        FAULT_HOOK(name)


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
            for chunk in iter(lambda f=f: f.read(_READ), b""):
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
            isinstance(n, str) and fmt.segment_number(n) is not None for n in names
        ):
            return None
        if cf is not None and not (isinstance(cf, str) and fmt.segment_number(cf) is not None):
            return None
        if not isinstance(fin, dict):
            return None
        for name in fin:
            if fmt.segment_number(name) is None:
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
            _unlink(tomb)
    elif res.action == "rolled-back":
        for target in res.restored:
            os.rename(by_target[target], target)
    if durability != "off":
        segs.fsync_dir(dirpath)
    if res.action != "settled-tombstones":
        _unlink(marker_path)
        if durability != "off":
            segs.fsync_dir(dirpath)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


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
            if fmt.segment_number(target) is not None:
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


# --- the rewrite transaction ------------------------------------------------------


@dataclass
class RewriteOutcome:
    changed: list[int]
    epoch: int


def commit_rewrite(
    history: History,
    st: State,
    changes: dict[int, list[bytes] | None],
    *,
    op: str,
    before_commit: Callable[[], None] | None = None,
) -> RewriteOutcome:
    """Replace segments (number -> new bytes, None to delete) as one
    transaction (module doc). Call under the exclusive lock with ``st`` fresh."""
    path = history.path
    durability = history.store.durability
    changes = {n: c for n, c in changes.items() if n in st.segments}
    if not changes:
        return RewriteOutcome([], st.epoch)
    history._publish_pending(st, None)
    tombs: list[tuple[str, str]] = []
    marker_path = os.path.join(path, MARKER_NAME)
    marker_written = False
    segments_done = False
    try:
        _step("pending")
        if before_commit is not None:
            before_commit()
        _step("quarantined")
        active = st.active
        order = sorted(changes)
        archive = [n for n in order if n != active]
        arch_chunks: list[bytes] = []
        any_archive = False
        for n in archive:
            c = changes[n]
            if c is not None:
                any_archive = True
                arch_chunks.extend(c)
        a_text, a_raw = _content_digests(arch_chunks if any_archive else None)
        if active in changes:
            c_text, c_raw = _content_digests(changes[active])
        else:
            c_text, c_raw = group_digests([segs.segment_path(path, active)])
        final = {
            fmt.segment_name(n): (None if changes[n] is None else raw_digest(b"".join(changes[n])))
            for n in order
        }
        marker = {
            "finalArchiveHash": a_text,
            "finalChatHash": c_text,
            "rawHashes": {
                "version": RAW_HASH_VERSION,
                "finalArchiveHash": a_raw,
                "finalChatHash": c_raw,
            },
            "files": {
                "version": FILES_VERSION,
                "archive": [fmt.segment_name(n) for n in archive],
                "chat": fmt.segment_name(active),
                "final": final,
            },
            "op": op,
            "time": now_ms(),
        }
        for n in order:
            seg = segs.segment_path(path, n)
            tomb = seg + TOMBSTONE_SUFFIX
            _unlink(tomb)
            os.link(seg, tomb)
            tombs.append((tomb, seg))
        if durability != "off":
            segs.fsync_dir(path)
        _step("tombstones")
        segs.commit_file(
            path,
            MARKER_NAME,
            [fmt.encode_json(marker) + b"\n"],
            durability="full" if durability != "off" else "off",
            new_file=True,
        )
        marker_written = True
        _step("marker")
        for n in order:
            c = changes[n]
            if c is None:
                os.unlink(segs.segment_path(path, n))
            else:
                segs.commit_file(
                    path, fmt.segment_name(n), c, durability=durability, new_file=False
                )
            _step(f"segment-{n}")
        segments_done = True
        if durability != "off":
            segs.fsync_dir(path)
        for tomb, _ in tombs:
            os.unlink(tomb)
        _step("tombstones-removed")
        os.unlink(marker_path)
        if durability != "off":
            segs.fsync_dir(path)
        _step("marker-removed")
    except (OSError, segs.CommitStepError, LedgerError) as exc:
        if not marker_written:
            for tomb, _ in tombs:
                _unlink(tomb)
            raise CommitFailed(
                f"workspace {history.workspace!r}: {op} failed ({exc}); nothing was changed"
            ) from exc
        # Settle now rather than leave it to the next writer. Once every
        # segment is in place the rewrite has committed (only clean-up failed).
        res = _settle_after_failure(path, durability)
        if not (segments_done or (res is not None and res.action == "committed")):
            what = "rolled back" if res is not None else "left for the next writer to roll back"
            raise CommitFailed(
                f"workspace {history.workspace!r}: {op} failed ({exc}); {what}"
            ) from exc
    history._derived = {}
    epoch = history._rebaseline_locked(history.state(), force_new_epoch=True)
    _step("receipt")
    return RewriteOutcome(order, epoch)


def _settle_after_failure(path: str, durability: str) -> Resolution | None:
    try:
        return recover_interrupted(path, durability)
    except OSError:
        return None


def _empty_receipt() -> fmt.Receipt:
    return empty_receipt()


# --- helpers over segment lines ---------------------------------------------------


def segment_entries(history_path: str, number: int) -> list[Entry]:
    return [
        entry_of(number, line) for line in segs.iter_lines(segs.segment_path(history_path, number))
    ]


def _raw_line(e: Entry, data: bytes) -> bytes:
    """The stored bytes of an entry (with its newline when it had one)."""
    end = e.offset + len(e.line)
    return data[e.offset : end + 1] if end < len(data) else data[e.offset : end]


def _locked_rewrite(history: History) -> Any:
    history._require()
    return locked(history.path, history.workspace, history.store.lock_timeout, shared=False)


def _settle(history: History) -> Resolution | None:
    return recover_interrupted(history.path, history.store.durability)


def is_husk(row: dict[str, Any]) -> bool:
    """A rejected request's outer record (DESIGN.md 3)."""
    meta = row.get("meta")
    q = meta.get("quarantine") if isinstance(meta, dict) else None
    return (
        isinstance(q, dict)
        and q.get("v") == QUARANTINE_VERSION
        and isinstance(q.get("row"), dict)
        and row.get("role") == "assistant"
        and row.get("parts") == []
        and row.get("partial", False) is False
    )


def rejected_original(row: dict[str, Any]) -> dict[str, Any]:
    """What display and export show: the original of a rejected request, else
    the row itself."""
    if is_husk(row):
        return dict(row["meta"]["quarantine"]["row"])
    return row


def husk_line(line: bytes, row: dict[str, Any]) -> bytes:
    """The stored line of the empty assistant record that quarantines ``row``.

    The original row's JSON (unknown fields included) is spliced in as raw
    bytes, so it survives byte for byte.
    """
    body = fmt.body_of(line)
    if body is None:
        raise RewriteRefused("cannot reject a line that does not verify")
    sentinel = f"tl-row-{secrets.token_hex(12)}"
    outer: dict[str, Any] = {
        "seq": row["seq"],
        "id": row.get("id") if isinstance(row.get("id"), str) and row.get("id") else new_id("r_"),
        "kind": row.get("kind", "message"),
        "role": "assistant",
        "parts": [],
        "partial": False,
        "meta": {"quarantine": {"v": QUARANTINE_VERSION, "row": sentinel}},
        "ts": row["ts"] if isinstance(row.get("ts"), int) else now_ms(),
        "batch": row["batch"],
    }
    enc = fmt.encode_json(outer)
    enc = enc.replace(fmt.encode_json(sentinel), body, 1)
    return fmt.frame(enc)


# --- reject -------------------------------------------------------------------------


def _owns(prelude: dict[str, Any], request: dict[str, Any]) -> bool:
    meta = prelude.get("meta") if isinstance(prelude.get("meta"), dict) else {}
    return meta.get("synthetic") is True or (
        meta.get("owner") is not None and meta.get("owner") == request.get("id")
    )


def _prelude(entries: list[Entry], idx: int) -> list[int]:
    """Indexes of the synthetic rows a request owns: the rows right before it
    in its batch that are marked ``meta.synthetic: true`` or ``meta.owner`` =
    the request's id."""
    req = entries[idx].row
    assert req is not None
    bid = req.get("batch", {}).get("id") if isinstance(req.get("batch"), dict) else None
    out = []
    j = idx - 1
    while j >= 0:
        r = entries[j].row
        if r is None or not isinstance(r.get("batch"), dict) or r["batch"].get("id") != bid:
            break
        if not _owns(r, req):
            break
        out.append(j)
        j -= 1
    return out[::-1]


def reject(history: History, seq_or_seqs: int | Iterable[int]) -> dict[str, Any]:
    """Quarantine persisted requests (and the synthetic prelude rows they own)
    as empty assistant records (DESIGN.md 3). Rejecting a record that is
    already rejected keeps its inner original. Refuses, writing nothing, when
    a seq is missing or names a reset (or any non-message row)."""
    history = unwrap(history)
    seqs = {seq_or_seqs} if isinstance(seq_or_seqs, int) else set(seq_or_seqs)
    if not seqs or not all(isinstance(s, int) and not isinstance(s, bool) for s in seqs):
        raise RewriteRefused("reject needs one or more integer seqs")
    with _locked_rewrite(history):
        settled = _settle(history)
        st = history.state()
        changes: dict[int, list[bytes] | None] = {}
        rejected: list[int] = []
        already: list[int] = []
        found: set[int] = set()
        for number in st.segments:
            seg_path = segs.segment_path(history.path, number)
            entries = segment_entries(history.path, number)
            hits = [
                i for i, e in enumerate(entries) if e.row is not None and e.row.get("seq") in seqs
            ]
            if not hits:
                continue
            targets: dict[int, None] = {}
            for i in hits:
                found.add(entries[i].row["seq"])  # type: ignore[index]
                for j in [*_prelude(entries, i), i]:
                    targets[j] = None
            new_lines: dict[int, bytes] = {}
            for j in targets:
                e = entries[j]
                row = e.row
                assert row is not None
                if e.is_reset or row.get("kind") == "reset":
                    raise RewriteRefused(
                        f"workspace {history.workspace!r}: seq {row.get('seq')} "
                        f"({fmt.segment_name(number)} offset {e.offset}) is a reset row; a "
                        "rejection never rewrites a reset away"
                    )
                if row.get("kind", "message") != "message":
                    raise RewriteRefused(
                        f"workspace {history.workspace!r}: seq {row.get('seq')} is a "
                        f"{row.get('kind')!r} row; only requests (kind 'message') are rejected"
                    )
                if is_husk(row):
                    already.append(row["seq"])
                    continue
                new_lines[j] = husk_line(e.line, row)
                rejected.append(row["seq"])
            if new_lines:
                data = segs.read_file(seg_path)
                chunks = [new_lines.get(j, _raw_line(e, data)) for j, e in enumerate(entries)]
                changes[number] = chunks
        missing = sorted(seqs - found)
        if missing:
            raise RewriteRefused(
                f"workspace {history.workspace!r}: no readable row with seq {missing}; "
                "nothing was rejected"
            )
        out = commit_rewrite(history, history.state(), changes, op="reject") if changes else None
    return {
        "op": "reject",
        "rejected": sorted(rejected),
        "already": sorted(set(already)),
        "epoch": out.epoch if out else st.epoch,
        "recovered": settled.to_dict() if settled else None,
    }


# --- truncate ------------------------------------------------------------------------


def truncate_after(history: History, seq: int) -> dict[str, Any]:
    """Drop every row after the row ``seq`` (its last occurrence in log order).

    ``seq`` must end its batch (a batch is never split). The dropped bytes go
    to the quarantine; unreadable lines that may be resets stay in the log byte
    for byte. A rewrite with a marker and a new epoch.
    """
    history = unwrap(history)
    if not isinstance(seq, int) or isinstance(seq, bool):
        raise RewriteRefused("truncate_after needs an integer seq")
    with _locked_rewrite(history):
        settled = _settle(history)
        st = history.state()
        spot: tuple[int, int, list[Entry]] | None = None
        for number in reversed(st.segments):
            entries = segment_entries(history.path, number)
            for i in range(len(entries) - 1, -1, -1):
                r = entries[i].row
                if r is not None and r.get("seq") == seq:
                    spot = (number, i, entries)
                    break
            if spot is not None:
                break
        if spot is None:
            raise RewriteRefused(
                f"workspace {history.workspace!r}: no readable row with seq {seq}; nothing "
                "was truncated"
            )
        number, idx, entries = spot
        row = entries[idx].row
        assert row is not None
        b = row.get("batch") if isinstance(row.get("batch"), dict) else {}
        if isinstance(b.get("n"), int) and isinstance(b.get("i"), int) and b["i"] != b["n"] - 1:
            last = seq + (b["n"] - 1 - b["i"])
            first = seq - b["i"]
            raise RewriteRefused(
                f"workspace {history.workspace!r}: seq {seq} is row {b['i'] + 1} of {b['n']} of "
                f"batch {b.get('id')!r}; a batch is never split: truncate after seq {last} "
                f"(its last row) or after seq {first - 1} (before it)"
            )
        floor = st.floor
        if (
            floor is not None
            and floor.readable
            and (floor.segment, floor.offset) > (number, entries[idx].offset)
        ):
            # Dropping the newest manual reset would make the rows it hides
            # retrievable again: fail closed.
            raise RewriteRefused(
                f"workspace {history.workspace!r}: truncating after seq {seq} would remove "
                f"the privacy floor (the manual reset at seq {floor.seq}); truncate after "
                f"seq {floor.seq} or later"
            )
        quarantine = Quarantine(history.path, durability=history.store.durability)
        puts: list[Callable[[], str]] = []
        changes: dict[int, list[bytes] | None] = {}
        removed_bytes = 0
        removed_rows = 0
        kept_candidates = 0
        reason = f"truncated after seq {seq}"
        later = [n for n in st.segments if n > number]
        for n, start in [(number, idx + 1), *[(m, 0) for m in later]]:
            ents = entries if n == number else segment_entries(history.path, n)
            tail = ents[start:]
            if not tail:
                continue
            if n != number and not any(e.candidate for e in tail):
                seg_path = segs.segment_path(history.path, n)
                name = fmt.segment_name(n)
                puts.append(
                    lambda p=seg_path, s=name: quarantine.put_file(
                        p, source=s, offset=0, reason=reason
                    )
                )
                changes[n] = None
                removed_bytes += os.path.getsize(seg_path)
                removed_rows += sum(1 for e in tail if e.row is not None)
                continue
            data = segs.read_file(segs.segment_path(history.path, n))
            kept = [_raw_line(e, data) for e in ents[:start]]
            run_start: int | None = None
            run: list[bytes] = []
            for e in tail:
                raw = _raw_line(e, data)
                if e.candidate:
                    kept_candidates += 1
                    kept.append(raw)
                    if run:
                        puts.append(
                            _put(
                                quarantine,
                                b"".join(run),
                                fmt.segment_name(n),
                                run_start or 0,
                                reason,
                            )
                        )
                        run, run_start = [], None
                    continue
                if run_start is None:
                    run_start = e.offset
                run.append(raw)
                removed_bytes += len(raw)
                removed_rows += e.row is not None
            if run:
                puts.append(
                    _put(quarantine, b"".join(run), fmt.segment_name(n), run_start or 0, reason)
                )
            changes[n] = kept if kept else None
        entries_out: list[str] = []

        def before() -> None:
            entries_out.extend(p() for p in puts)

        out = (
            commit_rewrite(
                history,
                st,
                {n: c for n, c in changes.items()},
                op="truncate_after",
                before_commit=before,
            )
            if changes
            else None
        )
    return {
        "op": "truncate_after",
        "seq": seq,
        "removed_rows": removed_rows,
        "removed_bytes": removed_bytes,
        "kept_reset_candidates": kept_candidates,
        "quarantine": entries_out,
        "epoch": out.epoch if out else st.epoch,
        "recovered": settled.to_dict() if settled else None,
    }


def _put(q: Quarantine, data: bytes, source: str, offset: int, reason: str) -> Callable[[], str]:
    return lambda: q.put(data, source=source, offset=offset, reason=reason)


# --- purge ------------------------------------------------------------------------------


def purge_before_floor(history: History) -> dict[str, Any]:
    """Really delete every row at or before the newest manual reset (the
    privacy floor): no quarantine. The floor row goes too when it is a batch of
    its own; a floor inside a larger batch keeps that whole batch. Unreadable
    lines that may be resets stay byte for byte. A rewrite with a marker and
    a new epoch."""
    history = unwrap(history)
    with _locked_rewrite(history):
        settled = _settle(history)
        st = history.state()
        active = (st.active, st.active_stamp) if st.active_stamp is not None else None
        floors = [b for b in history.index.all_bounds(st.sealed, active, None) if b.is_floor]
        result: dict[str, Any] = {
            "op": "purge_before_floor",
            "purged_rows": 0,
            "purged_bytes": 0,
            "kept_reset_candidates": 0,
            "floor": None,
            "epoch": st.epoch,
            "recovered": settled.to_dict() if settled else None,
        }
        if not floors:
            return result
        floor = floors[-1]
        result["floor"] = {
            "seq": floor.seq if floor.readable else None,
            "segment": fmt.segment_name(floor.segment),
            "offset": floor.offset,
        }
        changes: dict[int, list[bytes] | None] = {}
        for n in [m for m in st.segments if m <= floor.segment]:
            ents = segment_entries(history.path, n)
            cut = len(ents)
            if n == floor.segment:
                cut = _purge_cut(ents, floor.offset)
            if cut == 0:
                continue
            data = segs.read_file(segs.segment_path(history.path, n))
            kept: list[bytes] = []
            dropped = 0
            for i, e in enumerate(ents):
                raw = _raw_line(e, data)
                if i >= cut or e.candidate:
                    kept.append(raw)
                    if i < cut:
                        result["kept_reset_candidates"] += 1
                    continue
                dropped += 1
                result["purged_bytes"] += len(raw)
                result["purged_rows"] += e.row is not None
            if dropped:
                changes[n] = kept if kept else None
        if changes:
            out = commit_rewrite(history, st, changes, op="purge_before_floor")
            result["epoch"] = out.epoch
        return result


def _purge_cut(ents: list[Entry], floor_offset: int) -> int:
    """Index of the first line kept in the floor's segment."""
    for i, e in enumerate(ents):
        if e.offset != floor_offset:
            continue
        if e.row is None:
            return i  # an unreadable floor is kept (it may be a reset)
        b = e.row.get("batch") if isinstance(e.row.get("batch"), dict) else {}
        if b.get("n") == 1:
            return i + 1
        j = i
        while j > 0:
            prev = ents[j - 1].row
            pb = (
                prev.get("batch")
                if prev is not None and isinstance(prev.get("batch"), dict)
                else {}
            )
            if prev is None or pb.get("id") != b.get("id"):
                break
            j -= 1
        return j
    raise RecoveryError(f"privacy floor at offset {floor_offset} not found; run repair")
