"""A fork of a file workspace (``History.fork``; the rules: ``ledger.core.forks``).

Under the source's exclusive lock the fork is built in a temporary
directory beside it and appears by one ``rename`` of that directory, as an
import does (``load.py``): after a crash at any point the fork exists whole
or not at all (a leftover ``.fork-*`` directory is never listed as a
workspace, and the next fork into the same id removes it).

Cost: every segment that lies wholly at or before the fork point is
hard-linked, never copied; only the prefix of the segment holding the fork
point (when it is not that segment's last row) is copied, with its INDEX
entry; the origin event is a segment of its own. No path of the
engine writes a segment file in place -- appends, rewrites, merges and
repair replace a segment by temp + rename, a delete unlinks -- so a shared
inode is never changed through either name and neither side ever loses a
byte to the other's purge, truncate, repair, rewind or delete.

A link changes the shared inode's ctime, which is part of a segment's
stamp. The fork republishes the source's stable receipt with the new stamps
under the same epoch and layout (and records its INDEX entries again), so
the source's cursors, receipt and epoch stay as they were. A later change of
the link count (another fork, a delete or rewrite of one side, which
hard-links tombstones) changes the stamp the other side recorded: its next
reader reads that segment to check it, and its next writer re-baselines
(a new epoch); no byte changes.
"""

from __future__ import annotations

import os
import shutil

from ledger.core.forks import ForkRefused, check_fork_point, fork_event
from ledger.core.format import files as ffmt
from ledger.core.format import rows as fmt
from ledger.core.rows import new_id, prepare_batch
from ledger.storage.files import segments as segs
from ledger.storage.files import syncfs
from ledger.storage.files.index import SegmentInfo, append_entries
from ledger.storage.files.lock import locked
from ledger.storage.files.marker import recover_interrupted
from ledger.storage.files.origin import write_origin_hint
from ledger.storage.files.ports import FileHistory
from ledger.storage.files.receipt import write_receipt
from ledger.storage.files.staging import staged, write_new
from ledger.storage.files.state import State, stable_receipt

TEMP_PREFIX = ".fork-"


def fork(src: FileHistory, dst: FileHistory, at: int | None) -> None:
    """Make ``dst`` (which must not exist) a fork of ``src`` at row ``at``
    (None: the newest row). Raises ForkRefused, WorkspaceNotFound, CommitFailed."""
    if dst.workspace != src.workspace and dst.exists():
        raise ForkRefused(f"workspace {dst.workspace!r} already exists under "
                          f"{src.store.root}; a fork needs a new workspace id; nothing was "
                          "forked")
    src.require()
    with locked(src.path, src.workspace, src.store.lock_timeout, shared=False):
        recover_interrupted(src.path, src.store.durability)
        st = src.state()
        infos = [(n, stamp, src.index.info(n, stamp)) for n, stamp in _stamps(st)]
        if at is None:
            at = next((i.last_seq for _, _, i in reversed(infos) if i.rows), 0)
        spot = next(((k, n) for k, (n, _, i) in enumerate(infos)
                     if i.rows and i.first_seq <= at <= i.last_seq), None)
        lines: list[segs.Line] = []
        row = None
        cut = -1
        if spot is not None:
            lines = list(segs.iter_lines(segs.segment_path(src.path, spot[1])))
            key = b'{"seq":%d,' % at  # every stored line starts so: decode only candidates
            for j, line in enumerate(lines):
                got = fmt.decode_line(line.data) if line.complete and \
                    line.data.startswith(key) else None
                if got is not None and got.get("seq") == at:
                    row, cut = got, j
        check_fork_point(src.workspace, dst.workspace, at, row, st.floor)
        assert spot is not None and row is not None
        _, event_lines = prepare_batch([fork_event(src.workspace, at, st.epoch)], at + 1,
                                       new_id("fork_"), src.store.max_row_bytes, internal=True)
        k, number = spot
        whole = cut == len(lines) - 1
        linked = infos[: k + 1] if whole else infos[:k]
        prefix = None if whole else _prefix_info(infos[k][2], lines, cut, at)
        linked_stamps = _build(src, dst, linked, number, lines[: cut + 1], whole,
                               event_lines[0], at + 1, prefix)
        _restamp(src, st, infos, linked_stamps)
    dst.rebaseline()


def _prefix_info(info: SegmentInfo, lines: list[segs.Line], cut: int, at: int
                 ) -> SegmentInfo | None:
    """The INDEX entry of the first ``cut + 1`` lines of a segment whose entry
    is ``info`` (so the fork need not read them again), when every line of it
    is a readable row (else None: the fork's first reader scans it)."""
    if info.rows != len(lines) or not all(ln.complete for ln in lines) or info.max_seq != \
            info.last_seq:
        return None
    end = lines[cut].offset + len(lines[cut].data) + 1
    bounds = tuple(b for b in info.bounds if b.offset < end)
    return SegmentInfo(info.number, info.stamp, info.first_seq, at, cut + 1, bounds, at)


def _stamps(st: State) -> list[tuple[int, ffmt.Stamp]]:
    return [*st.sealed, *([(st.active, st.active_stamp)] if st.active_stamp else [])]


def _build(src: FileHistory, dst: FileHistory, linked: list[tuple[int, ffmt.Stamp,
           SegmentInfo]], number: int, prefix: list[segs.Line], whole: bool,
           event: bytes, event_seq: int, prefix_info: SegmentInfo | None
           ) -> dict[int, ffmt.Stamp]:
    """Build the fork and publish it; returns the linked segments' stamps (a
    link changes the inode, which both sides share: one stat serves both)."""
    parent = os.path.dirname(dst.path)
    for name in os.listdir(parent):  # a crashed fork into this id left its temp dir
        if name.startswith(f"{TEMP_PREFIX}{dst.workspace}-"):
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
    # Always durable, whatever the level (as a rewrite): whole or not at all.
    # Nothing inside is fsynced on its own: one flush of the filesystem makes
    # every file of the fork durable (the note below says why) before the
    # staged rename publishes the directory.
    with staged(parent, f"{TEMP_PREFIX}{dst.workspace}-", dst.path, True,
                f"workspace {dst.workspace!r}: the fork of {src.workspace!r} failed") as tmp:
        write_new(os.path.join(tmp, ffmt.FORMAT_NAME), [ffmt.FORMAT_TEXT], False, 0o600)
        write_origin_hint(tmp, event_seq, False)
        entries: list[SegmentInfo | ffmt.MergeRecord] = []
        stamps: dict[int, ffmt.Stamp] = {}
        for n, _, info in linked:
            path = segs.segment_path(tmp, n)
            os.link(segs.segment_path(src.path, n), path)
            stamp = segs.stamp(path)
            if stamp is not None:
                stamps[n] = stamp
                entries.append(_with_stamp(info, stamp))
        if not whole:  # the prefix of segment `number`, sealed in the fork
            path = segs.segment_path(tmp, number)
            write_new(path, [ln.data + b"\n" for ln in prefix], False, 0o600)
            stamp = segs.stamp(path)
            if prefix_info is not None and stamp is not None:
                entries.append(_with_stamp(prefix_info, stamp))
        append_entries(tmp, entries)  # one write for thousands of segments
        write_new(segs.segment_path(tmp, number + 1), [event], False, 0o600)
        syncfs.sync_filesystem(tmp)  # the linked bytes, the new files, their entries
    return stamps  # published (staged: a rename; fails when the workspace appeared)


# Why one flush of the filesystem (``syncfs.sync_filesystem``): the linked
# segments' bytes must be durable before the fork is published (a fork is
# durable whatever the level, and the source may have written them at
# "off"). Per segment, ``fsync`` forces a journal commit for the link count
# and ctime the link changed, and even ``fdatasync`` of bytes already on the
# device issues a device cache flush (about 3 ms and 0.3 ms each here:
# seconds for a fork of thousands of segments); one ``syncfs`` flushes what
# is dirty on the workspace's filesystem once, and covers the fork's own new
# files and directory entries too (so none of them is fsynced on its own).
# ``os.sync()`` did the same for every filesystem of the machine. The
# crash-state explorer models it (tests/helpers/crashfs.py: everything
# before it survives).


def _with_stamp(info: SegmentInfo, stamp: ffmt.Stamp) -> SegmentInfo:
    """``info`` under another stamp (a replace, without its cost, which a
    fork of thousands of segments notices)."""
    return SegmentInfo(info.number, stamp, info.first_seq, info.last_seq, info.rows,
                       info.bounds, info.max_seq, info.epoch)


def _restamp(src: FileHistory, st: State, infos: list[tuple[int, ffmt.Stamp, SegmentInfo]],
             linked: dict[int, ffmt.Stamp]) -> None:
    """Republish the source's stable receipt for the stamps the links changed
    (only their ctime: same inode, size and mtime), same epoch and layout;
    ``linked``: the stamps read right after each link (the same inode).
    Best effort: when it cannot be done the next writer re-baselines."""
    if not st.verified or st.receipt is None or not infos:
        return
    fresh: list[tuple[int, ffmt.Stamp]] = []
    restamped: list[SegmentInfo] = []
    try:
        for n, old, info in infos:
            new = linked.get(n) or segs.stamp(segs.segment_path(src.path, n))
            if new is None or new[:4] != old[:4]:
                return  # something else changed it: leave it to the next writer
            fresh.append((n, new))
            if new != old and n != st.active:
                restamped.append(_with_stamp(info, new))
        src.index.persist_many(restamped)  # one INDEX write
        receipt = stable_receipt(st.epoch, st.next_seq, st.window, st.floor, st.receipt.layout,
                                 fresh[-1], fresh[:-1])
        write_receipt(src.path, receipt)
    except OSError:
        return
    finally:
        src.forget_derived()
