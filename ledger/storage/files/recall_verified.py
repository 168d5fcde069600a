"""The record that a file workspace's recall index was verified whole
(``ledger.storage.files.recall``: ``verify``), so a new process's first
ranked search need not read all of it again (issue 31, thirteenth round).

Why: ``verify`` reads every page and every row (0.2-0.5 s at 16 MiB of
history, 13 s at 1 GiB); each ``tledger search``, each MCP server start and
each short-lived agent runtime paid it before its first ranked answer.

What it records, beside the database (``RECALL.sqlite-verified``, one line):
the machine's boot id and the identity, size, modification and change times
(``st_ctime_ns``, which nothing but a write can set) of the database file and
of its ``-wal`` (or none), taken under SQLite's write lock at a
``data_version`` the writing connection knew to be verified, and whether the
``-wal`` then held nothing the database file lacks (a checkpoint had copied
all of it: ``alone``). It is valid while the boot id and the database file's
stamp are the same and the ``-wal`` is the one recorded, or (``alone``)
absent or empty: no byte of either file changed since (any write, by SQLite,
a tool or an editor, moves the change time; a copy or a replaced file has
another inode), and no crash of the machine came between (a torn page from
a power loss keeps every stamp: the boot id changes). A record torn, edited
or of another format fails its checksum or its parse: invalid. Invalid
means a whole verify, as before. Where the system has no boot id
(``/proc/sys/kernel/random/boot_id``), nothing is recorded or trusted.

Not caught by it: a change inside the file that keeps every stamp (a disk
returning other bytes than were written, or a writer restoring the change
time, which takes root) and a second write within one tick of a coarse file
clock; the queries still verify each term, posting and window entry they
read, and ``tledger check`` still verifies the whole file.
"""

from __future__ import annotations

import os
import stat as stat_mod
import time

import xxhash

SUFFIX = "-verified"
TRIES = 50  # waits of 1 ms for the file clock to pass the files' change times, at most
_MAGIC = "recall-verified 1"
_boot: list[str | None] = []


def boot_id() -> str | None:
    """This boot's id (Linux), else None: then nothing is trusted."""
    if not _boot:
        try:
            with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
                got = f.read(64).strip()
            _boot.append(got if got and got.replace("-", "").isalnum() else None)
        except (OSError, UnicodeError):
            _boot.append(None)
    return _boot[0]


def _stamp(path: str) -> tuple[str, int]:
    """A file's identity, size and times as text, and its change time
    ("-": none there; "?": not a regular file of its own)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "-", 0
    if not stat_mod.S_ISREG(st.st_mode) or st.st_nlink != 1:
        return "?", 0
    return (f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}",
            st.st_ctime_ns)


def _open_record(path: str, flags: int) -> int | None:
    """The record beside the database ``path``, opened with ``flags`` and
    never through a link nor blocking on a FIFO; None when it cannot be, or
    is not a regular file of its own (then it is neither read nor written)."""
    try:
        fd = os.open(path + SUFFIX, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
    except OSError:
        st = None
    if st is None or not stat_mod.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        return None
    return fd


def _line(boot: str, db: str, wal: str, alone: bool) -> bytes:
    body = f"{_MAGIC} {boot} {db} {wal} {int(alone)}"
    return f"{body} {xxhash.xxh3_64_hexdigest(body.encode())}\n".encode("ascii")


def valid(path: str) -> bool:
    """Whether the record beside the database ``path`` holds for its files now."""
    boot = boot_id()
    if boot is None:
        return False
    fd = _open_record(path, os.O_RDONLY)
    if fd is None:
        return False
    try:
        data = os.read(fd, 1024)
    except OSError:
        return False
    finally:
        os.close(fd)
    try:
        parts = data.decode("ascii").split()
    except UnicodeError:
        return False
    if len(parts) != 7 or " ".join(parts[:2]) != _MAGIC or parts[6] != \
            xxhash.xxh3_64_hexdigest(" ".join(parts[:6]).encode()):
        return False
    _, _, rec_boot, rec_db, rec_wal, alone, _ = parts
    if rec_boot != boot or "?" in (rec_db, rec_wal) or _stamp(path)[0] != rec_db:
        return False
    wal = _stamp(path + "-wal")[0]
    if wal == rec_wal:
        return True
    if alone != "1" or wal == "?":
        return False
    return wal == "-" or wal.split(":")[2] == "0"  # none, or empty: the database is all


def write(path: str, alone: bool) -> bool:
    """Record the database ``path`` and its ``-wal`` as they are now
    (called under SQLite's write lock by a connection that knows the state
    verified); False when nothing was written (no boot id, a file not a
    regular file of its own, an error, or files that kept changing).

    Racy stamps (git's "racily clean" entries): a file changed again within
    the tick of the file clock it last changed in keeps its times. So the
    record first writes itself (invalid meanwhile) to read the file clock
    now, and holds only stamps whose change time is before that: any later
    change has a later time. Else it waits a millisecond and reads again (a
    checkpoint that just wrote is a tick old at most)."""
    boot = boot_id()
    if boot is None:
        return False
    fd = _open_record(path, os.O_RDWR | os.O_CREAT)
    if fd is None:
        return False
    try:
        for _ in range(TRIES):
            os.ftruncate(fd, 0)
            os.pwrite(fd, b"-", 0)
            now = os.fstat(fd).st_mtime_ns
            (db, db_c), (wal, wal_c) = _stamp(path), _stamp(path + "-wal")
            if "?" in (db, wal) or db == "-":
                return False
            if db_c < now and wal_c < now:
                data = _line(boot, db, wal, alone)
                os.ftruncate(fd, 0)
                return os.pwrite(fd, data, 0) == len(data)
            time.sleep(0.001)
        return False
    except OSError:
        return False
    finally:
        os.close(fd)
