"""Which segment files changed, without a ``stat`` of each (Linux inotify).

Every append and every read checks the stamps of every segment against the
receipt: an untracked edit anywhere must be noticed (DESIGN 6). With
thousands of segments that is thousands of ``stat`` calls per turn (257 ms
a turn at 17,000 segments, ``bench/RESULTS.md`` issue 33). A
``SegmentTable`` keeps one workspace directory's listing and stamps; once
the directory holds ``WATCH_MIN_SEGMENTS`` segments it asks the kernel to
report every change in it, and a scan stats only what an event named, the
active segment, the segments also linked elsewhere that have no watch of
their own, and ``ROTATE`` others in turn. The rest keep the stamps of the
last full pass.

What the kernel reports to the directory's watch: creates, renames and
unlinks; writes and truncations (``IN_MODIFY``); a close after writing
(also after writes through ``mmap``); mode, owner and time changes
(``IN_ATTRIB``). A segment with another link (a fork shares its sealed
segments by hard link) gets a watch of its own, so a write through the
other name shows too (up to ``INODE_WATCH_BUDGET`` per process; past it,
such segments are stated on every scan).

What it does not report: a segment linked from another directory after
the table's last pass and then changed through that other name, changes
made on another machine (a network file system), and writes through an
``mmap`` of the other name. What of those is seen, and when:

- A change to a segment the table lists (written, truncated, replaced
  under its name, removed): the rotating stat sees it within
  ``segments / ROTATE`` scans, since it stats listed segments in turn.
- A segment file the table does not list -- one another machine adds
  outside the protocol, without a receipt naming it -- is never stated by
  the rotation, which stats only listed numbers: no scan from events sees
  it. Only a full pass lists it: when the receipt disagrees with the
  table's stamps (a tracked writer anywhere, on any machine, changes the
  receipt, and ``reads.WorkspaceBase.state`` then calls ``forget()``), on
  a queue overflow, a replaced directory or a fork, or while the directory
  holds fewer than ``WATCH_MIN_SEGMENTS`` segments (every scan is a full
  pass). Until then the table lists the directory without it.

Every read verifies each line's checksum. Like a same-size rewrite inside
one timestamp tick (DESIGN 6), such an edit can go unseen for a while:
docs/explanation/storage.md says so.

The table is a cache: no inotify (another OS, no instance left), a queue
overflow (the kernel's, or a table's own list past ``EVENTS_MAX`` while no
one scans it), the directory replaced, a fork of the process: each is answered
with a full pass, as before.
"""

from __future__ import annotations

import bisect
import ctypes
import os
import stat as stat_mod
import struct
import sys
import threading
import weakref

import msgspec

from ledger.core.format import files as ffmt
from ledger.storage.files import segments as segs

WATCH_MIN_SEGMENTS = 64  # fewer: a full pass costs less than keeping a watch
ROTATE = 16  # segments stated per scan besides those an event named
INODE_WATCH_BUDGET = 4096  # watches on shared segments, per process
EVENTS_MAX = 4096  # events kept for a table not scanned meanwhile; more: a full pass

_IN_MODIFY = 0x2
_IN_ATTRIB = 0x4
_IN_CLOSE_WRITE = 0x8
_IN_MOVED_FROM = 0x40
_IN_MOVED_TO = 0x80
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_IN_UNMOUNT = 0x2000
_IN_Q_OVERFLOW = 0x4000
_IN_IGNORED = 0x8000
_IN_ONLYDIR = 0x01000000
_IN_DONT_FOLLOW = 0x02000000
_IN_NONBLOCK = 0o4000
_IN_CLOEXEC = 0o2000000
_CHANGED = _IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE
_DIR_MASK = (_CHANGED | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE
             | _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_ONLYDIR | _IN_DONT_FOLLOW)
_FILE_MASK = _CHANGED | _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_DONT_FOLLOW
_GONE = _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_UNMOUNT | _IN_IGNORED
_EVENT = struct.Struct("iIII")

# An event as a table receives it: (segment number of an inode watch, or None
# for the directory's; mask; name within the directory).
Event = tuple[int | None, int, str]


class _Inotify:
    """The process's one inotify instance, and which tables hear which watch."""

    def __init__(self, libc: ctypes.CDLL) -> None:
        fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.fd = fd
        self.libc = libc
        self.lock = threading.Lock()
        self.pid = os.getpid()
        # wd -> {id(table): (the table, the segment number of an inode watch)}
        self.hearers: dict[int, dict[int, tuple[weakref.ref[SegmentTable], int | None]]] = {}
        self.inode_watches = 0
        # (wd, id(table)) of collected tables whose watches wait for the lock
        self.dropped: list[tuple[int, int]] = []

    def add(self, path: str, mask: int, table: SegmentTable, number: int | None) -> int | None:
        """Watch ``path`` for ``table``; None when the kernel refuses (no
        watch left, the path gone or not what ``mask`` allows)."""
        with self.lock:
            self._drop_dead()
            if number is not None and self.inode_watches >= INODE_WATCH_BUDGET:
                return None
            wd = self.libc.inotify_add_watch(self.fd, os.fsencode(path), mask)
            if wd < 0:
                return None
            hearers = self.hearers.setdefault(wd, {})
            if number is not None and id(table) not in hearers:
                self.inode_watches += 1
            hearers[id(table)] = (weakref.ref(table), number)
            return int(wd)

    def remove(self, wd: int, table_id: int) -> None:
        """``table`` no longer listens to ``wd``; the last one removes it."""
        with self.lock:
            self._remove(wd, table_id, False)

    def remove_dead(self, wd: int, table_id: int) -> None:
        """``remove`` for a collected table. Its finalizer runs wherever the
        collector does, also inside ``take`` or ``add`` on this thread with
        the lock held: it never waits for the lock (that would deadlock);
        when the lock is taken the removal waits for its next holder."""
        if self.lock.acquire(blocking=False):
            try:
                self._remove(wd, table_id, True)
            finally:
                self.lock.release()
        else:
            self.dropped.append((wd, table_id))

    def _drop_dead(self) -> None:
        while self.dropped:
            self._remove(*self.dropped.pop(), True)

    def _remove(self, wd: int, table_id: int, dead: bool) -> None:
        hearers = self.hearers.get(wd)
        if hearers is None:
            return
        entry = hearers.get(table_id)
        if entry is None or (dead and entry[0]() is not None):
            return  # (a live table since took the collected one's id)
        del hearers[table_id]
        if entry[1] is not None:
            self.inode_watches -= 1
        if not hearers:
            del self.hearers[wd]
            self.libc.inotify_rm_watch(self.fd, wd)

    def take(self, table: SegmentTable) -> list[Event]:
        """Hand every queued event to the tables that listen to its watch;
        return (and clear) ``table``'s."""
        with self.lock:
            self._drop_dead()
            while True:
                try:
                    buf = os.read(self.fd, 1 << 16)
                except BlockingIOError:
                    break
                except InterruptedError:
                    continue
                self._dispatch(buf)
            events, table.events = table.events, []
            return events

    def _dispatch(self, buf: bytes) -> None:
        i, end = 0, len(buf)
        while i + 16 <= end:
            wd, mask, _cookie, length = _EVENT.unpack_from(buf, i)
            name = os.fsdecode(buf[i + 16:i + 16 + length].rstrip(b"\0"))
            i += 16 + length
            if mask & _IN_Q_OVERFLOW:
                for every in self.hearers.values():
                    for ref, _number in every.values():
                        table = ref()
                        if table is not None:
                            table.overflowed = True
                continue
            found = self.hearers.get(wd)
            if not found:
                continue
            hearers = found
            for ref, number in hearers.values():
                table = ref()
                if table is not None:
                    if len(table.events) < EVENTS_MAX:
                        table.events.append((number, mask, name))
                    else:  # a table no one scans: its next scan is a full pass
                        table.overflowed = True
            if mask & _IN_IGNORED:  # the kernel dropped the watch (its file is gone)
                self.inode_watches -= sum(1 for _r, n in hearers.values() if n is not None)
                del self.hearers[wd]


_lock = threading.Lock()
_instance: list[_Inotify | None] = []  # empty: not tried yet in this process


def _inotify() -> _Inotify | None:
    """The process's inotify instance, made on first use (None: unavailable)."""
    if _instance:
        return _instance[0]
    with _lock:
        if not _instance:
            made: _Inotify | None = None
            if sys.platform.startswith("linux"):
                try:
                    libc = ctypes.CDLL(None, use_errno=True)
                    if hasattr(libc, "inotify_init1"):
                        made = _Inotify(libc)
                except OSError:
                    made = None
            _instance.append(made)
    return _instance[0]


def available() -> bool:
    """Whether this process can keep tables by kernel events (Linux inotify)."""
    return _inotify() is not None


def _forget_in_child() -> None:
    """After ``os.fork`` the child shares the parent's queue: reading it would
    take events the parent is owed. The child starts its own when it needs one
    (its tables see another pid and make a full pass)."""
    if _instance and _instance[0] is not None:
        try:
            os.close(_instance[0].fd)
        except OSError:
            pass
    _instance.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


class Scan(msgspec.Struct, frozen=True):
    """A workspace directory as one scan saw it. ``sealed`` is the same list
    object from scan to scan while no sealed segment changed. (A struct:
    every append and every page of a read builds one.)"""

    fresh: bool  # from a full pass (not from the table's memory)
    has_format: bool
    marked: bool  # a rewrite or merge marker is there
    temps: list[str]
    numbers: list[int]
    sealed: list[tuple[int, ffmt.Stamp]]
    active: tuple[int, ffmt.Stamp] | None

    @property
    def stamps(self) -> list[tuple[int, ffmt.Stamp]]:
        return [*self.sealed, self.active] if self.active is not None else []


def _scan_of(names: list[str], numbers: list[int], stamps: list[tuple[int, ffmt.Stamp]]) -> Scan:
    temps = [n for n in names if n.startswith(ffmt.TEMP_PREFIX)]
    return Scan(True, ffmt.FORMAT_NAME in names, _marked(names), temps, numbers, stamps[:-1],
                stamps[-1] if stamps else None)


def _marked(names: set[str] | list[str]) -> bool:
    return ffmt.REWRITE_MARKER_NAME in names or ffmt.MERGE_NAME in names


def _unwatch_all(owned: dict[int, _Inotify], table_id: int, collected: bool = False) -> None:
    """Remove a table's watches (when it stops, or is collected)."""
    for wd, ino in list(owned.items()):
        if ino.pid == os.getpid():
            if collected:
                ino.remove_dead(wd, table_id)
            else:
                ino.remove(wd, table_id)
    owned.clear()


class SegmentTable:
    """One workspace directory's listing and stamps, kept by kernel events
    once it is big enough (module doc). Not a source of truth: ``scan()``
    answers from a full pass whenever the table cannot vouch for itself."""

    def __init__(self, wsdir: str) -> None:
        self.wsdir = wsdir
        self.events: list[Event] = []  # appended by _Inotify.drain
        self.overflowed = False
        self._lock = threading.Lock()
        self._inotify: _Inotify | None = None  # set while watching
        self._owned: dict[int, _Inotify] = {}  # every watch this table holds
        self._dir_id = (0, 0)
        self._names: set[str] = set()
        self._temps: set[str] = set()
        self._numbers: list[int] = []
        self._stamps: dict[int, ffmt.Stamp] = {}
        self._sealed: list[tuple[int, ffmt.Stamp]] = []
        self._inode_wds: dict[int, int] = {}  # shared segment -> its own watch
        self._unwatched: set[int] = set()  # shared segments without a watch
        self._turn = 0
        weakref.finalize(self, _unwatch_all, self._owned, id(self), True)

    @property
    def watching(self) -> bool:
        return self._inotify is not None

    def scan(self) -> Scan:
        """The listing and every segment's stamp now (``segs.stamps``'s
        errors for an entry that is no regular file)."""
        with self._lock:
            ino = self._inotify
            if ino is not None and ino.pid == os.getpid() and _inotify() is ino:
                found = self._incremental(ino)
                if found is not None:
                    return found
            return self._full()

    def forget(self) -> None:
        """Drop what the table knows: the next scan is a full pass (a caller
        found the receipt disagreeing with the table's stamps)."""
        with self._lock:
            self._stop()

    # --- a full pass -------------------------------------------------------------------

    def _full(self) -> Scan:
        self._stop()
        names = os.listdir(self.wsdir)
        numbers = segs.segments_in(self.wsdir, names)
        ino = _inotify() if len(numbers) >= WATCH_MIN_SEGMENTS and not _marked(names) else None
        wd = ino.add(self.wsdir, _DIR_MASK, self, None) if ino is not None else None
        if ino is None or wd is None:
            return _scan_of(names, numbers, segs.stamps(self.wsdir, numbers))
        # Watching from here on: list and stat again, so any change after
        # the listing and stats is an event.
        self._inotify = ino
        self._owned[wd] = ino
        self.events = []
        self.overflowed = False
        try:
            dir_st = os.stat(self.wsdir, follow_symlinks=False)
            names = os.listdir(self.wsdir)
            numbers = segs.segments_in(self.wsdir, names)
            shared: list[int] = []
            stamps = segs.stamps(self.wsdir, numbers, shared)
        except BaseException:
            self._stop()
            raise
        if not numbers or _marked(names):
            self._stop()
            return _scan_of(names, numbers, stamps)
        self._dir_id = (dir_st.st_dev, dir_st.st_ino)
        self._names = set(names)
        self._temps = {n for n in names if n.startswith(ffmt.TEMP_PREFIX)}
        self._numbers = numbers
        self._stamps = dict(stamps)
        self._sealed = stamps[:-1]
        for n in shared:
            self._share(ino, n)
        return self._result(fresh=True)

    def _stop(self) -> None:
        self._inotify = None
        _unwatch_all(self._owned, id(self))
        self._inode_wds = {}
        self._unwatched = set()
        self.events = []

    def _share(self, ino: _Inotify, number: int) -> None:
        """Segment ``number`` has another link: watch it itself, or stat it on
        every scan. It is stated again on the next scan (a change between the
        stat and the watch would otherwise go unseen)."""
        if number in self._inode_wds or number in self._unwatched:
            return
        wd = ino.add(segs.segment_path(self.wsdir, number), _FILE_MASK, self, number)
        if wd is None:
            self._unwatched.add(number)
        else:
            self._inode_wds[number] = wd
            self._owned[wd] = ino
        self.events.append((number, _IN_ATTRIB, ""))

    def _unshare(self, ino: _Inotify, number: int) -> None:
        wd = self._inode_wds.pop(number, None)
        if wd is not None and self._owned.pop(wd, None) is not None:
            ino.remove(wd, id(self))
        self._unwatched.discard(number)

    # --- a scan from events ------------------------------------------------------------

    def _incremental(self, ino: _Inotify) -> Scan | None:
        """None: the table cannot vouch for itself (the caller makes a full pass)."""
        events = ino.take(self)
        if self.overflowed:
            return None
        dir_st = os.stat(self.wsdir, follow_symlinks=False)
        if (dir_st.st_dev, dir_st.st_ino) != self._dir_id:
            return None  # another directory now has the workspace's name
        dirty: set[int] = set()
        names, temps = self._names, self._temps
        for number, mask, name in events:
            if number is not None:
                if mask & _IN_IGNORED and self._inode_wds.get(number) is not None:
                    # The kernel dropped the watch (the inode is gone).
                    self._owned.pop(self._inode_wds.pop(number), None)
                dirty.add(number)
                continue
            if mask & _GONE:
                return None
            if mask & (_IN_CREATE | _IN_MOVED_TO):
                names.add(name)
                if name.startswith(ffmt.TEMP_PREFIX):
                    temps.add(name)
            elif mask & (_IN_DELETE | _IN_MOVED_FROM):
                names.discard(name)
                temps.discard(name)
            n = ffmt.segment_number(name)
            if n is not None:
                dirty.add(n)
        if _marked(names):
            return None  # an interrupted rewrite or merge: the full pass reads its marker
        if not self._update(ino, dirty):
            return None
        return self._result()

    def _update(self, ino: _Inotify, dirty: set[int]) -> bool:
        """Stat ``dirty``, the active segment, the shared segments without a
        watch and the next ``ROTATE``; update the table. False when no
        segment is left (a full pass answers that)."""
        numbers = self._numbers
        for n in sorted(dirty):
            present = ffmt.segment_name(n) in self._names
            i = bisect.bisect_left(numbers, n)
            listed = i < len(numbers) and numbers[i] == n
            if present != listed:
                if numbers is self._numbers:
                    numbers = list(numbers)
                if present:
                    numbers.insert(i, n)
                else:
                    del numbers[i]
                    self._stamps.pop(n, None)
                    self._unshare(ino, n)
        if not numbers:
            return False
        sealed_changed = numbers is not self._numbers
        active = numbers[-1]
        count = len(numbers)
        start = self._turn % count
        todo = {n for n in dirty if n in self._stamps or ffmt.segment_name(n) in self._names}
        todo.add(active)
        todo.update(self._unwatched)
        todo.update(numbers[start:start + ROTATE])
        todo.update(numbers[:max(0, start + ROTATE - count)])
        self._turn = start + ROTATE
        stamps = self._stamps
        dfd = os.open(self.wsdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for n in todo:
                name = ffmt.segment_name(n)
                if name not in self._names:
                    continue
                try:
                    st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                except FileNotFoundError:
                    new, nlink = ffmt.ZERO_STAMP, 1  # gone since: its event is queued
                else:
                    if not stat_mod.S_ISREG(st.st_mode):
                        self._stop()
                        raise segs.not_regular(segs.segment_path(self.wsdir, n),
                                               segs.describe_mode(st.st_mode))
                    new = ffmt.Stamp(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
                                     st.st_ctime_ns)
                    nlink = st.st_nlink
                if stamps.get(n) != new:
                    stamps[n] = new
                    if n != active:
                        sealed_changed = True
                if nlink > 1:
                    self._share(ino, n)
                elif n in self._inode_wds or n in self._unwatched:
                    self._unshare(ino, n)
        finally:
            os.close(dfd)
        self._numbers = numbers
        if sealed_changed:
            self._sealed = [(n, stamps[n]) for n in numbers[:-1]]
        return True

    def _result(self, fresh: bool = False) -> Scan:
        numbers = self._numbers
        return Scan(fresh, ffmt.FORMAT_NAME in self._names, False, sorted(self._temps),
                    numbers, self._sealed, (numbers[-1], self._stamps[numbers[-1]]))
