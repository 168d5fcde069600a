"""The recall index of a file workspace: a projection of the log for ranked
``session_history`` search, never its source of truth.

One SQLite database (``ffmt.RECALL_NAME``) beside the segments, from the
standard library, holding for every searchable row its window, its length
in terms and its terms, and for every term its document frequency and its
postings ordered by impact (``ranking.impact``), newest first among equals,
so a query reads the best few postings of each of its terms and no more: the
work of a call is bounded by ``SCAN_ROWS`` postings whatever the size of the
history.

Maintenance is lazy: appends never touch it (their cost is unchanged); the
first ranked search after appends brings it up to the log, under the
reader's shared lock. A few rows (at most ``recall_tail.FOLD_BYTES`` of
lines beyond the mark) are read into the process's unindexed tail
(``ledger.storage.files.recall_tail``), which each search scores with the
index's rows under the same statistics; once the tail holds
``FOLD_ROWS`` rows or ``FOLD_BYTES`` bytes it is folded into the database in
one transaction. Anything more, or a new index, is indexed in SQLite
transactions (CHUNK_POSTINGS each, every one ending at a consistent mark, so
a long build keeps its progress). What it has seen is named by the log's
epoch, the position just past the last row indexed and a hash of that row's
line: a rewrite (reject, truncate, purge, repair) starts a new epoch and a
rebuild; a log that lost or changed the row the index or its tail ends at (a
crash at ``durability="off"``) is rebuilt too; a merge only moves rows: the
mark is found again by seq and the unindexed tail is kept, its places moved
through the merges' INDEX records (``_replaced``: each moved segment's last
line checked at its new place; a record missing or a line not there reads
its rows again), every line from the floor's on counted again so none is
lost, but for the segments the merge left alone: each ``segs`` entry holds
that count up to its line, and a segment whose file kept its stamp is not
read again. The index's entries are moved with their rows in the
transaction that saves the mark at the merged layout (``_replace_docs``,
through the same records, checked against the log), so a search reads each
row at its place as a fresh index's does, not by seq within its read
budget; the semantic channel's candidates are read at the entries' places
too (``places_of``: a vector keeps the place its row had when embedded). A
missing, damaged or foreign database is rebuilt from the segments. Every row
the tool returns is read again from the log.

The privacy floor hides statistics too: the index holds only the rows after
the floor (it starts at the floor's line), so document counts, lengths and
document frequencies, and so every score, depend on nothing before it; a
new floor (``clear_soft``) rebuilds it from there (the rows after a new floor
are only those appended since).

Hardened like the log: the database and its ``-wal``, ``-shm`` and
``-journal`` files are never opened through a symlink, a hard link or
anything but a regular file (``unsafe``: ranked search is unavailable and
``check`` reports it until it is moved away; ``repair`` removes it). Every
row of every table carries a checksum (``h``: xxh3 of its values, or for a
posting an arithmetic check SQLite computes) and values of fixed SQLite types
(``_TYPES``: a checksum can be made over values of another type), verified
whole (``verify``: SQLite's ``quick_check``, the schema, every row and the
statistics) once per state of the files: a connection opening a file that
``recall_verified`` records verified, not written since by anything, checks
its schema and mark only; else it verifies whole and records it. A
connection's own writes on an index it knows verified are recorded again
(``_settle``); another connection's commit never is. The rows a query reads
are verified again; any failure, or any SQLite error that is not a lock,
discards the file and builds it again from the log
(``history_unavailable`` with the reason when that fails too), so a damaged
index never answers differently from a fresh one.
"""

from __future__ import annotations

import heapq
import os
import sqlite3
import stat as stat_mod
import threading
from array import array
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from itertools import chain, islice, repeat
from typing import Any
from urllib.parse import quote

import msgspec
import xxhash

from ledger.core import ranking
from ledger.core.bounds import LINE_CAP
from ledger.core.errors import Unavailable
from ledger.core.format import files as ffmt
from ledger.core.format import rows as fmt
from ledger.core.searchable import hidden, indexed_terms, row_text
from ledger.storage.files import recall_places as places
from ledger.storage.files import recall_verified
from ledger.storage.files import segments as segs
from ledger.storage.files.appended import Appends
from ledger.storage.files.recall_tail import FOLD_BYTES, Tail, TailDoc

VERSION = "6"
_MASK = (1 << 64) - 1
CHUNK_POSTINGS = 200_000  # postings per committed chunk of a long build
BATCH_ROWS = 256  # rows whose terms a build looks up together (``_Writer.docs``), at most
BATCH_POSTINGS = 16_384  # and their postings, at most
TERMS_KEPT = 32_768  # terms a fold's ids and frequencies are kept for, at most (``_fold``)
PAGE_SIZE = 4096  # of a new database (SQLite's default; tests use small pages)
# The database, SQLite's own files and the record of its last whole verify
SUFFIXES = ("", "-wal", "-shm", "-journal", recall_verified.SUFFIX)
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(k TEXT PRIMARY KEY, v TEXT NOT NULL, h INTEGER NOT NULL)
    WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS docs(seq INTEGER PRIMARY KEY, win INTEGER NOT NULL,
    len INTEGER NOT NULL, size INTEGER NOT NULL, tids BLOB NOT NULL, seg INTEGER NOT NULL,
    off INTEGER NOT NULL, h INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS post(tid INTEGER NOT NULL, imp INTEGER NOT NULL,
    neg INTEGER NOT NULL, tf INTEGER NOT NULL, h INTEGER NOT NULL,
    PRIMARY KEY(tid, imp, neg)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS df(term TEXT PRIMARY KEY, tid INTEGER NOT NULL,
    n INTEGER NOT NULL, h INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS echo(call TEXT PRIMARY KEY, h INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS wins(win INTEGER PRIMARY KEY, h INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS segs(number INTEGER PRIMARY KEY, last_at INTEGER NOT NULL,
    last_hash TEXT NOT NULL, stamp TEXT NOT NULL, lines TEXT NOT NULL, h INTEGER NOT NULL);
"""
TABLES = ("meta", "docs", "post", "df", "echo", "wins", "segs")
# A posting's check, computed by SQLite when it is written and when it is
# verified (one scan in C): any one changed byte of its four values changes it
# (the prime modulus divides no b * 256**k).
_POST_H = "(({t} * 1000003 + {i} * 7919 + {n} * 104729 + {f} * 15485863 + 12345) % 2147483647)"
_POST_INSERT = ("INSERT OR REPLACE INTO post VALUES (?1, ?2, ?3, ?4, "
                + _POST_H.format(t="?1", i="?2", n="?3", f="?4") + ")")
# As verified: NULL (never equal to ``h``) unless all four are integers, so a
# posting of another type (text where a number belongs, with a forged ``h``)
# fails its check before Python compares or adds its values.
_POST_CHECK = ("CASE WHEN typeof(tid) = 'integer' AND typeof(imp) = 'integer' AND "
               "typeof(neg) = 'integer' AND typeof(tf) = 'integer' THEN "
               + _POST_H.format(t="tid", i="imp", n="neg", f="tf") + " END")
# The SQLite type (``typeof``) of each column of the other tables. SQLite
# stores any type in any column, and a row checksummed over values of the
# wrong type (``_h`` hashes their repr) passes its checksum: the types are
# checked as well, where the rows are read, so a value is damage
# (``Damaged``) before it is formatted, compared or added.
_TYPES = {
    "meta": (("k", "text"), ("v", "text"), ("h", "integer")),
    "docs": (("seq", "integer"), ("win", "integer"), ("len", "integer"),
             ("size", "integer"), ("tids", "blob"), ("seg", "integer"), ("off", "integer"),
             ("h", "integer")),
    "df": (("term", "text"), ("tid", "integer"), ("n", "integer"), ("h", "integer")),
    "echo": (("call", "text"), ("h", "integer")),
    "wins": (("win", "integer"), ("h", "integer")),
    "segs": (("number", "integer"), ("last_at", "integer"), ("last_hash", "text"),
             ("stamp", "text"), ("lines", "text"), ("h", "integer")),
}
_MISTYPED = {table: f"SELECT count(*) FROM {table} WHERE " + " OR ".join(
    f"typeof({col}) != '{kind}'" for col, kind in cols) for table, cols in _TYPES.items()}
# The rows just before and after each of some rows within the query's range
# (``?`` after, ``?`` high): their neighbours (ranking.Doc's prev and next).
_LINKS_SQL = ("WITH h(s) AS (VALUES {rows}) SELECT s, "
              "(SELECT seq FROM docs WHERE seq < h.s AND seq > ? ORDER BY seq DESC LIMIT 1), "
              "(SELECT seq FROM docs WHERE seq > h.s AND seq <= ? ORDER BY seq LIMIT 1) FROM h")
# What a damaged file can make SQLite or the decoding of its values raise.
# Not TypeError: a value of the wrong type is found by its type where it is
# read (``_TYPES``), so a TypeError is a bug of ours, never a silent rebuild.
DAMAGE_ERRORS = (sqlite3.DatabaseError, ValueError, KeyError, IndexError,
                 OverflowError, UnicodeError)


class Damaged(Exception):
    """A row, the schema or the statistics of the index fail verification."""


@contextmanager
def _writing(db: sqlite3.Connection) -> Iterator[None]:
    """A write transaction (``BEGIN IMMEDIATE``): committed when the block
    ends, rolled back when it raises."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


@contextmanager
def _reading(db: sqlite3.Connection) -> Iterator[None]:
    """A read transaction: one snapshot of the database for the block."""
    db.execute("BEGIN")
    try:
        yield
    finally:
        if db.in_transaction:
            db.execute("ROLLBACK")


def _h(*values: Any) -> int:
    """The checksum of one row's values (63 bits: an SQLite integer)."""
    return xxhash.xxh3_64_intdigest(repr(values).encode("utf-8", "surrogatepass")) >> 1


def _term_h(term: str, tid: int, n: int) -> int:
    """``_h(term, tid, n)`` of a df row (a term, its id and its document
    frequency, ints), without building the tuple: the same text is hashed."""
    return xxhash.xxh3_64_intdigest(
        f"({term!r}, {tid:d}, {n:d})".encode("utf-8", "surrogatepass")) >> 1


def _doc_h(seq: int, win: int, length: int, size: int, tids: bytes, seg: int,
           off: int) -> int:
    x = xxhash.xxh3_64(b"%d %d %d %d %d %d " % (seq, win, length, size, seg, off))
    x.update(tids)
    return x.intdigest() >> 1


@dataclass(frozen=True)
class Mark:
    """How far the index has read: the log's epoch and layout, the row it
    ended at and where the next line starts."""

    epoch: int
    layout: str
    upto: int  # last seq indexed (0: none)
    window: int  # the window that row is in
    segment: int  # the segment and offset just past that row's line
    offset: int
    last_at: int  # offset of that row's line in ``segment``
    last_hash: str  # xxh3-64 of that line
    docs: int
    total: int
    lines: int = 0  # sum (mod 2**64) of the xxh3-64 of every line read: the merge path
    # (or an unverified receipt) adds them up again, so any changed or lost line is seen
    floor: int = 0  # the seq of the floor the index starts at (0: none)
    next_tid: int = 1  # the next term id


_EMPTY = Mark(-1, "", 0, 0, -1, 0, -1, "", 0, 0)


class _Seen(msgspec.Struct, frozen=True):
    """The log as this process last found it to match the index with its
    tail (``mark``): its epoch, layout and floor and every segment's stamp.
    While the log's stamps are these, nothing needs checking again; when
    only the active segment changed, by this process's own appends
    (``appended``), only their lines need reading. A struct, not a frozen
    dataclass: the class is made at every start of the package (this module
    is imported with the file engine), and a frozen dataclass's costs ~5.7 M
    instructions (its methods' source generated and compiled), this ~0.1 M."""

    mark: Mark
    epoch: int
    layout: str
    floor: int
    sealed: list[tuple[int, ffmt.Stamp]]
    active: int
    active_stamp: ffmt.Stamp

    def holds(self, st: Any, layout: str, mark: Mark) -> bool:
        """Whether ``st`` is the log seen then but for the active
        segment's stamp, and ``mark`` the index's mark then."""
        return (st.verified and self.active == st.active and self.epoch == st.epoch
                and self.layout == layout and self.floor == _floor_seq(st)
                and (self.mark is mark or self.mark == mark) and self.sealed == st.sealed)


@dataclass
class _Progress:
    """A mark being advanced line by line (``RecallIndex._rows``), with the
    bytes of lines read and each segment's last row line read."""

    upto: int
    window: int
    segment: int
    offset: int
    last_at: int
    last_hash: str
    docs: int
    total: int
    lines: int
    bytes: int = 0
    # segment -> the offset and hash of its last row line read, and ``lines`` then
    seg_ends: dict[int, tuple[int, str, int]] = field(default_factory=dict)

    @classmethod
    def of(cls, mark: Mark) -> _Progress:
        return cls(mark.upto, mark.window, mark.segment, mark.offset, mark.last_at,
                   mark.last_hash, mark.docs, mark.total, mark.lines)

    def mark(self, epoch: int, layout: str, floor: int, next_tid: int) -> Mark:
        return Mark(epoch, layout, self.upto, self.window, self.segment, self.offset,
                    self.last_at, self.last_hash, self.docs, self.total, self.lines, floor,
                    next_tid)


class _Writer:
    """Documents and boundaries written into the index, in the caller's
    transaction: each term's id (looked up, else the next free one) and
    document frequency, the postings, the docs entries and the new echo
    entries, buffered until ``flush``."""

    def __init__(self, db: sqlite3.Connection, next_tid: int) -> None:
        self.db = db
        self.next_tid = next_tid
        self.fresh = next_tid == 1  # an empty table: no term to look up
        self.tids: dict[str, list[int]] = {}  # term -> [id, document frequency]
        self.touched: set[str] = set()  # the terms to write at the next flush
        self.doc_rows: list[tuple[Any, ...]] = []
        # The postings by term id, each term's in the order its rows came
        # (``flush`` writes them a term at a time: each b-tree page visited
        # once, without sorting every posting's tuple), and how many.
        self.post_rows: defaultdict[int, list[tuple[int, int, int, int]]] = defaultdict(list)
        self.postings = 0
        self.new_calls: list[str] = []

    def preload(self, terms: Iterable[str]) -> None:
        """Look up the ids and frequencies of the terms not known yet, 500
        a statement, each row verified."""
        wanted = sorted(set(terms) - self.tids.keys())
        for i in range(0, len(wanted), 500):
            part = wanted[i:i + 500]
            for term, tid, n, h in self.db.execute(
                    f"SELECT term, tid, n, h FROM df WHERE term IN ({','.join('?' * len(part))})",
                    part):
                if h != _h(term, tid, n) or type(tid) is not int or type(n) is not int:
                    raise Damaged("a term fails its checksum")
                self.tids[term] = [tid, n]

    def boundary(self, seq: int) -> None:
        self.db.execute("INSERT OR REPLACE INTO wins VALUES (?, ?)", (seq, _h(seq)))

    def docs(self, batch: list[tuple[int, int, Counter[str], int, int, int, int]]) -> None:
        """Documents (seq, window, term frequencies, length in terms, line
        size, segment, offset), in seq order: their terms looked up at once
        (none in a new index), each new term given the next id in the order
        the rows name it (as one row at a time would give them, so a folded
        index holds what a build from the log holds), every term's document
        frequency counted, and the postings and entries buffered."""
        tids = self.tids
        # Each term with the number of these rows naming it, in the order
        # the rows name them (a Counter counts and keeps that order in C).
        named = Counter(chain.from_iterable(d[2] for d in batch))
        if not self.fresh:
            self.preload(named)
        ids: dict[str, int] = {}
        next_tid = self.next_tid
        for t, k in named.items():
            got = tids.get(t)
            if got is None:  # not in the index (looked up above): a new term
                got = tids[t] = [next_tid, 0]
                next_tid += 1
            got[1] += k
            ids[t] = got[0]
        self.next_tid = next_tid
        self.touched.update(named)
        post, entries, impact = self.post_rows, self.doc_rows, ranking.impact
        for seq, window, tfs, length, size, number, offset in batch:
            t_ids = list(map(ids.__getitem__, tfs))
            counts = list(tfs.values())
            imp = {n: -round(impact(n, length) * 1000) for n in set(counts)}
            rows_of = zip(t_ids, map(imp.__getitem__, counts), repeat(-seq), counts,
                          strict=False)  # as long as t_ids: ``repeat`` has no end
            for tid, row in zip(t_ids, rows_of, strict=True):
                post[tid].append(row)
            if counts and max(counts) > 0xFFFFFFFF:  # a pair's count is 32 bits
                counts = [min(n, 0xFFFFFFFF) for n in counts]
            blob = array("I", chain.from_iterable(zip(t_ids, counts, strict=True))).tobytes()
            entries.append((seq, window, length, size, blob, number, offset,
                            _doc_h(seq, window, length, size, blob, number, offset)))
            self.postings += len(t_ids)

    def full(self) -> bool:
        return self.postings > CHUNK_POSTINGS

    def flush(self) -> None:
        db, tids = self.db, self.tids
        db.executemany("INSERT OR REPLACE INTO docs VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                       self.doc_rows)
        post = self.post_rows
        for rows in post.values():
            rows.sort()  # a few each: in key order, without comparing every posting's tid
        db.executemany(_POST_INSERT, chain.from_iterable(post[t] for t in sorted(post)))
        db.executemany("INSERT OR REPLACE INTO df VALUES (?, ?, ?, ?)",
                       [(t, tid, n, _term_h(t, tid, n))
                        for t in sorted(self.touched) for tid, n in (tids[t],)])
        db.executemany("INSERT OR IGNORE INTO echo VALUES (?, ?)",
                       [(c, _h(c)) for c in self.new_calls])
        self.doc_rows.clear()
        self.post_rows.clear()
        self.postings = 0
        self.touched.clear()
        self.new_calls.clear()


def index_path(wsdir: str) -> str:
    return os.path.join(wsdir, ffmt.RECALL_NAME)


def unsafe(wsdir: str) -> str | None:
    """Why the index's files cannot be opened (a symlink, a hard link, a
    directory, a FIFO or a device at one of their paths), else None."""
    for suffix in SUFFIXES:
        path = index_path(wsdir) + suffix
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        if not stat_mod.S_ISREG(st.st_mode):
            return f"{path} is {segs.describe_mode(st.st_mode)}"
        if st.st_nlink > 1:
            return f"{path} has {st.st_nlink} names (a hard link)"
    return None


def refusal(wsdir: str, why: str) -> str:
    return (f"the recall index is not opened: {why}, not a regular file of its own; "
            "nothing was read or written through it. Move it away (`tledger repair` "
            "removes it) and ranked search builds the index again")


def _floor_seq(st: Any) -> int:
    return int(st.floor.seq) if st.floor is not None else 0


_expected: list[tuple[str, str, str, str]] = []


def _expected_schema() -> list[tuple[str, str, str, str]]:
    if not _expected:
        mem = sqlite3.connect(":memory:")
        mem.executescript(_SCHEMA)
        _expected.extend(_schema_of(mem))
        mem.close()
    return _expected


def _schema_of(db: sqlite3.Connection) -> list[tuple[str, str, str, str]]:
    return sorted(db.execute("SELECT type, name, tbl_name, coalesce(sql, '') "
                             "FROM sqlite_schema").fetchall())


def verify(db: sqlite3.Connection) -> None:
    """Everything the index holds, checked (``Damaged`` for the first
    failure): the schema, SQLite's own ``quick_check`` (pages, b-trees, free
    space), every row's checksum, and the statistics against the rows."""
    if _schema_of(db) != _expected_schema():
        raise Damaged("its tables are not the recall index's")
    got = db.execute("PRAGMA quick_check").fetchall()
    if got != [("ok",)]:
        raise Damaged(f"it fails SQLite's check: {got[0][0] if got else 'no answer'}")
    for table, sql in _MISTYPED.items():
        wrong = db.execute(sql).fetchone()[0]
        if wrong:
            raise Damaged(f"{wrong} rows of {table} hold a value of the wrong type")
    bad = db.execute(f"SELECT count(*) FROM post WHERE h IS NOT {_POST_CHECK}").fetchone()[0]
    if bad:
        raise Damaged(f"{bad} postings fail their checksum")
    docs = total = 0
    for seq, win, length, size, tids, seg, off, h in db.execute("SELECT * FROM docs"):
        if h != _doc_h(seq, win, length, size, tids, seg, off):
            raise Damaged(f"the entry of row {seq} fails its checksum")
        docs += 1
        total += length
    for term, tid, n, h in db.execute("SELECT * FROM df"):
        if h != _h(term, tid, n):
            raise Damaged("a term fails its checksum")
    for table in ("echo", "wins", "segs"):
        for row in db.execute(f"SELECT * FROM {table}"):
            if row[-1] != _h(*row[:-1]):
                raise Damaged(f"a row of {table} fails its checksum")
    mark = read_mark(db)
    if mark is not _EMPTY and (mark.docs, mark.total) != (docs, total):
        raise Damaged(f"it counts {mark.docs} rows of {mark.total} terms; its tables hold "
                      f"{docs} of {total}")
    # Each term's document frequency is its number of postings, and the rows'
    # (term, frequency) pairs are the postings (a row deleted whole is seen).
    off = db.execute("SELECT count(*) FROM df LEFT JOIN (SELECT tid, count(*) AS c FROM post "
                     "GROUP BY tid) p USING (tid) WHERE df.n IS NOT coalesce(p.c, 0)"
                     ).fetchone()[0]
    pairs, postings, terms, ids, used = db.execute(
        "SELECT (SELECT coalesce(sum(length(tids)), 0) FROM docs), (SELECT count(*) FROM post), "
        "(SELECT count(*) FROM df), (SELECT count(DISTINCT tid) FROM df), "
        "(SELECT count(DISTINCT tid) FROM post)").fetchone()
    if off or pairs != 8 * postings or not terms == ids == used:
        raise Damaged(f"its document frequencies or postings do not add up ({off} terms; "
                      f"{pairs // 8} pairs for {postings} postings)")


def _data_version(db: sqlite3.Connection) -> int:
    return int(db.execute("PRAGMA data_version").fetchone()[0])


def read_mark(db: sqlite3.Connection) -> Mark:
    """The mark the index saved (``_EMPTY``: none, or another version's)."""
    got: dict[str, str] = {}
    for k, v, h in db.execute("SELECT k, v, h FROM meta"):
        if h != _h(k, v) or type(k) is not str or type(v) is not str:
            raise Damaged("its mark fails its checksum")
        got[k] = v
    if got.get("version") != VERSION:
        return _EMPTY
    try:
        return Mark(int(got["epoch"]), got["layout"], int(got["upto"]), int(got["window"]),
                    int(got["segment"]), int(got["offset"]), int(got["last_at"]),
                    got["last_hash"], int(got["docs"]), int(got["total"]),
                    int(got["lines"]), int(got["floor"]), int(got["next_tid"]))
    except (KeyError, ValueError):
        raise Damaged("its mark is incomplete") from None


class RecallIndex:
    """The index of one workspace directory. ``search`` brings it up to
    the log's state and answers a query from it."""

    def __init__(self, wsdir: str, synchronous: str = "NORMAL") -> None:
        self.wsdir = wsdir
        self.synchronous = synchronous
        self._db: sqlite3.Connection | None = None
        self._ident: tuple[int, int] = (0, 0)
        # The data_version of this connection at which the index was known
        # verified (whole, by its record, or made here), and its
        # total_changes when it was last recorded (``_settle``).
        self._trusted: int | None = None
        self._changes = 0
        self.sizes: dict[int, int] = {}  # the last candidates' line sizes (bytes)
        # The unindexed tail (recall_tail), the index's mark it extends and
        # the mark of both; one search or refresh at a time works on them.
        self._tail: Tail | None = None
        self._tail_base = _EMPTY
        self._tail_mark = _EMPTY
        self._guard = threading.RLock()
        self._known: tuple[int, Mark] | None = None  # (data_version, the mark read then)
        # The segs table as read at the data_version of ``_known`` (checked
        # then), and the hashes of the log lines one refresh has read: the
        # log does not change under the lock a refresh holds.
        self._segs: tuple[int, list[tuple[int, int, str, str]]] | None = None
        self._hashes: dict[tuple[int, int], str] | None = None
        self._seen: _Seen | None = None  # the log as the last refresh found it
        # The terms (id, document frequency) the last fold on this
        # connection wrote, and SQLite's data_version then (``_fold``).
        self._terms: tuple[int, dict[str, list[int]]] | None = None
        # The INDEX record of the merge that made a receipt layout under an
        # epoch (the file reader sets it): the tail is moved with its rows.
        self.moves: Callable[[int, int], ffmt.MergeRecord | None] | None = None

    # -- the database --------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        if self._db is not None:
            try:
                now = os.lstat(index_path(self.wsdir))
                same = (now.st_dev, now.st_ino) == self._ident and stat_mod.S_ISREG(
                    now.st_mode)
            except OSError:
                same = False
            if not same:  # deleted or replaced (a workspace deleted and made again)
                self.close()
        if self._db is None:
            why = unsafe(self.wsdir)
            if why is not None:
                raise Unavailable(refusal(self.wsdir, why))
            path = index_path(self.wsdir)
            try:  # made here, never through a link SQLite would follow
                os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW
                                 | os.O_CLOEXEC, 0o600))
                fresh = True
            except FileExistsError:
                fresh = False
            before = os.lstat(path)
            db = sqlite3.connect(path, timeout=30, isolation_level=None,
                                 check_same_thread=False)
            try:
                after = os.lstat(path)
                if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino) or \
                        unsafe(self.wsdir) is not None:
                    raise Unavailable(refusal(self.wsdir, "it was replaced while opened"))
                if fresh:
                    db.execute(f"PRAGMA page_size={int(PAGE_SIZE)}")
                db.execute("PRAGMA journal_mode=WAL")
                db.execute(f"PRAGMA synchronous={self.synchronous}")
                if not fresh and _schema_of(db):
                    self._verified(db, path)
                db.executescript(_SCHEMA)
                if self._trusted is None:  # made here: recorded once written
                    self._trusted = _data_version(db)
                    self._changes = -1
            except BaseException:
                db.close()
                raise
            self._db = db
            self._ident = (before.st_dev, before.st_ino)
        return self._db

    def _verified(self, db: sqlite3.Connection, path: str) -> None:
        """The index verified at open (``Damaged`` if not): its schema, and
        either its record (``recall_verified``: no byte of it changed since
        a connection that knew it verified recorded it), valid before and
        after this connection's snapshot began, or the whole ``verify``,
        then recorded."""
        before = recall_verified.valid(path)
        with _reading(db):
            if _schema_of(db) != _expected_schema():
                raise Damaged("its tables are not the recall index's")
            if before and recall_verified.valid(path):
                read_mark(db)
                self._trusted = _data_version(db)
                self._changes = db.total_changes
                return
            verify(db)
            version = _data_version(db)
        self._trusted = version
        self._changes = db.total_changes
        self._record(db, version)

    def _record(self, db: sqlite3.Connection, version: int) -> None:
        """Record the index verified when no other connection committed
        since ``version`` (this one's writes on a verified index are
        verified too): the ``-wal`` checkpointed first (so a process that
        ends, deleting it, leaves the database file as recorded), the files'
        stamps taken under SQLite's write lock. Another writer busy: not
        recorded (a later open verifies whole)."""
        try:
            busy, log, done = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            db.execute("PRAGMA busy_timeout=0")
            try:
                db.execute("BEGIN IMMEDIATE")
            finally:
                db.execute("PRAGMA busy_timeout=30000")
            try:
                if _data_version(db) == version:
                    recall_verified.write(index_path(self.wsdir),
                                          alone=busy == 0 and log == done)
            finally:
                db.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # busy, locked or unreadable: not recorded (a query finds damage)

    def _settle(self) -> None:
        """After a refresh that wrote: the index recorded verified again
        when this connection's were the only writes since it knew it
        verified (SQLite's data_version unchanged)."""
        db = self._db
        if db is None or self._trusted is None or db.total_changes == self._changes:
            return
        self._changes = db.total_changes
        if _data_version(db) == self._trusted:
            self._record(db, self._trusted)
        else:  # another connection wrote first: not recorded (``_retrust`` after its record)
            self._trusted = None

    def close(self) -> None:
        self._trusted = None
        self._tail = None
        self._terms = None
        self._known = None
        self._segs = None
        self._seen = None
        if self._db is not None:
            self._db.close()
            self._db = None

    def discard(self) -> None:
        """Delete the database (it is rebuilt at the next search)."""
        self.close()
        for suffix in SUFFIXES:
            try:
                os.unlink(index_path(self.wsdir) + suffix)
            except FileNotFoundError:
                pass

    def _mark(self, db: sqlite3.Connection) -> Mark:
        return read_mark(db)

    def _mark_now(self, db: sqlite3.Connection) -> Mark:
        """The index's mark, read again only when another connection
        committed since this one last read it (SQLite's ``data_version``):
        a catch-up that finds nothing new to write costs no mark read. Our
        own writes forget it (``_forget``)."""
        version = db.execute("PRAGMA data_version").fetchone()[0]
        if self._known is not None and self._known[0] == version:
            return self._known[1]
        mark = read_mark(db)
        self._known = (version, mark)
        if self._trusted != version:
            self._retrust(db)
        return mark

    def _retrust(self, db: sqlite3.Connection) -> None:
        """After another connection's commit: this connection knows the
        index verified again when the record holds before and after its
        ``data_version`` is read (the files unchanged in between: the state
        that version names is the one recorded), so its own next writes are
        recorded too (two long-lived processes folding in turn)."""
        path = index_path(self.wsdir)
        if recall_verified.valid(path):
            version = _data_version(db)
            if recall_verified.valid(path):
                self._trusted = version
                self._changes = db.total_changes

    def _forget(self) -> None:
        self._known = None
        self._segs = None
        self._seen = None
        self._terms = None  # this connection is about to write (or lost track)

    def _held(self, base: Mark) -> Tail | None:
        """The tail, when it extends ``base`` (the index's mark now)."""
        if self._tail is not None and self._tail_base != base:
            self._tail = None  # another process moved the index on: read again
        return self._tail

    # -- bringing it up to date ----------------------------------------------

    def refresh(self, st: Any, layout: str, steps: Appends | None = None) -> Mark:
        """Bring the index with its tail up to the log (or rebuild): the
        mark returned names everything ``candidates`` scores. Called under
        the workspace's shared lock, so the log does not change meanwhile.
        ``steps``: this process's appends (``appended``), read from memory
        when they are all that changed since the last refresh."""
        with self._guard:
            return self._refresh_guarded(st, layout, steps)

    def _refresh_guarded(self, st: Any, layout: str, steps: Appends | None = None) -> Mark:
        self._hashes = {}
        try:
            mark = self._refresh_tried(st, layout, steps)
        finally:
            self._hashes = None
        self._settle()
        self._seen = None if st.active_stamp is None or not st.verified else _Seen(
            mark, st.epoch, layout, _floor_seq(st), st.sealed, st.active, st.active_stamp)
        return mark

    def _refresh_tried(self, st: Any, layout: str, steps: Appends | None) -> Mark:
        try:
            for _ in range(8):
                try:
                    return self._refresh(st, layout, steps)
                except _Raced:
                    continue  # another reader went on from our last commit
            return self._refresh(st, layout)
        except sqlite3.OperationalError as exc:
            self._tail = None
            _raise_if_busy(exc)
            return self._rebuild_damaged(st, layout)
        except (Damaged, *DAMAGE_ERRORS):
            self._tail = None
            return self._rebuild_damaged(st, layout)

    def _rebuild_damaged(self, st: Any, layout: str) -> Mark:
        """A damaged or foreign file: it is only a projection, built again."""
        self.discard()
        try:
            return self._refresh(st, layout)
        except sqlite3.OperationalError as exc:
            _raise_if_busy(exc)
            raise Unavailable(f"the recall index cannot be built: {exc}") from None
        except (Damaged, _Raced, *DAMAGE_ERRORS) as exc:
            raise Unavailable(f"the recall index cannot be built: {exc}") from None

    def search(
        self, st: Any, layout: str, query: ranking.Query, after: int, high: int,
        window: int | None, steps: Appends | None = None,
    ) -> list[tuple[int, int, float, tuple[int, int]]]:
        """``refresh`` then ``candidates``; an index found damaged while it
        answers is rebuilt and asked again."""
        with self._guard:
            for _ in range(8):
                mark = self._refresh_guarded(st, layout, steps)
                try:
                    return self.candidates(mark, query, after, high, window)
                except _Raced:
                    self._forget()
                    continue  # another process folded or rebuilt it meanwhile
                except sqlite3.OperationalError as exc:
                    _raise_if_busy(exc)
                except (Damaged, *DAMAGE_ERRORS):
                    pass
                mark = self._rebuild_damaged(st, layout)
                try:
                    return self.candidates(mark, query, after, high, window)
                except _Raced:
                    self._forget()
                    continue
                except (Damaged, *DAMAGE_ERRORS) as exc:
                    raise Unavailable(f"the recall index cannot be read: {exc}") from None
            raise Unavailable("the recall index kept changing while it was read (other "
                              "readers bringing it up to date); retry in a moment")

    def _refresh(self, st: Any, layout: str, steps: Appends | None = None) -> Mark:
        db = self._open()
        base = self._mark_now(db)
        tail = self._held(base)
        mark = self._tail_mark if tail is not None else base
        held = (tail, base, mark) if tail is not None else None  # kept across a merge
        seen = self._seen
        if seen is not None and seen.holds(st, layout, mark):
            # The stamps say what changed since the log was last found to
            # match: nothing, or the active segment by this process's appends.
            if seen.active_stamp == st.active_stamp:
                return mark
            if mark.segment == st.active:
                lines = None if steps is None else steps.lines_after(
                    st.active, seen.active_stamp, mark.offset, st.active_stamp)
                if lines is not None:
                    got = self._extend(db, st, layout, base, tail, lines)
                    if got is not None:
                        return got
        if self._current(st, layout, mark, tail):
            return mark
        if base.upto > 0:
            got = self._extend(db, st, layout, base, tail)
            if got is not None:
                return got
        self._tail = None
        self._forget()
        with _writing(db):
            mark = self._mark(db)  # another reader may have done it meanwhile
            ends = _seg_rows(db) if mark.layout != layout else {}  # before _resume's own
            found = self._resume(st, layout, mark)
            if found is not None and mark.layout != layout:
                self._replace_docs(db, st, mark.layout, layout, ends)
            moved = self._moved(st, layout, mark, found)
            if moved is not None:
                # A merge moved the rows: the mark is saved where its row is
                # now, and the rows after it are read into the tail as after
                # any batch (folded with it, not written a row at a time here).
                _save(db, moved)
            else:
                if found is None:
                    for table in TABLES:
                        db.execute(f"DELETE FROM {table}")
                    _save_placed(db, layout)
                    if st.floor is not None:  # nothing before the floor, not even statistics
                        start = (st.floor.segment, st.floor.offset)
                    else:
                        start = (st.segments[0] if st.segments else 0, 0)
                    mark = Mark(st.epoch, layout, 0, 0, *start, -1, "", 0, 0, 0,
                                _floor_seq(st))
                else:
                    start = found[:2]
                mark = self._index_from(db, st, layout, mark, start)
                _save(db, mark)
        if moved is None:
            return mark
        got = None
        kept = self._replaced(st, layout, held) if held is not None and held[1] == mark \
            else None
        if kept is not None:
            # The tail's rows where the merge put them: not read nor counted again.
            self._tail_mark = kept[1]
            got = self._extend(db, st, layout, moved, kept[0])
        if got is None:
            got = self._extend(db, st, layout, moved, None)
        # Else (it cannot go on from the mark just saved): in SQLite.
        return got if got is not None else self._refresh(st, layout)

    def _replaced(self, st: Any, layout: str, held: tuple[Tail, Mark, Mark]
                  ) -> tuple[Tail, Mark] | None:
        """The tail ``held`` (the tail, the index's mark it extended, its own
        mark) with every place in it moved where the merges since its layout
        put its rows (their INDEX records: a merge moves whole segments, each
        source to ``into`` at a base offset, without changing a byte). Each
        segment's last line the tail read is checked at its new place (its
        hash); ``_extend`` checks the tail's own last line. None when a
        record is missing, a layout is not a receipt's, or a line is not
        where the record says: then the rows are read again."""
        tail, _base, mark = held
        steps = places.steps(self.moves, st.epoch, mark.layout, layout)
        if steps is None:
            return None

        def place(number: int, offset: int) -> tuple[int, int]:
            return places.place(steps, number, offset)

        docs: dict[int, TailDoc] = {}
        for seq, d in tail.docs.items():
            number, offset = place(d.segment, d.offset)
            docs[seq] = d if number == d.segment else TailDoc(
                d.seq, d.window, d.length, d.size, number, offset, d.tfs)
        ends: dict[int, tuple[int, str, str, int]] = {}
        for number, (at, h, _stamp, lines) in tail.seg_ends.items():
            into, at = place(number, at)
            if into not in ends or ends[into][0] < at:
                ends[into] = (at, h, _stamp_text(st, into), lines)
        for number, (at, h, _stamp, _lines) in ends.items():
            if number not in st.segments or self._hash_at(number, at) != h:
                return None
        number, offset = place(mark.segment, mark.offset)
        last = place(mark.segment, mark.last_at) if mark.last_at >= 0 else (number, -1)
        if last[0] != number:
            return None
        moved = Tail(tail.calls, docs, list(tail.order), list(tail.wins), tail.total,
                     list(tail.new_calls), ends, tail.bytes)
        return moved, replace(mark, layout=layout, segment=number, offset=offset,
                              last_at=last[1])

    def _replace_docs(self, db: sqlite3.Connection, st: Any, old: str, new: str,
                      ends: dict[int, tuple[int, str, str, str]]) -> None:
        """Move the index's entries to where the merges from layout ``old``
        to ``new`` put their rows, in the caller's transaction (the one that
        saves the mark at ``new``), so a search reads each row at its place
        as a fresh index would, not by seq within its read budget. Done when
        every entry is placed for ``old`` (the ``placed`` meta entry), every
        record is there (``recall_places.steps``) and each segment the moved
        entries name ends, at its new place, with the line the index read
        last there (``ends``: the segs entries of ``old``, by hash). Else
        the places are left as they are and ``placed`` says none is known
        for sure: rows are found by seq, as before, until a rebuild. Each
        entry's checksum is verified before it is made again."""
        steps = places.steps(self.moves, st.epoch, old, new) if _placed(db) == old else None
        rows: list[tuple[Any, ...]] = []
        if steps is not None:
            # A merge takes the trailing run of sealed segments: the entries
            # it moves are the last but for the active segment's, and an
            # entry's segment never decreases with its seq (rows are entered
            # in log order, moved in order): read back from the last entry
            # to the first before the merged segments, not the whole table.
            moving = places.sources(steps)
            lowest = min(moving)
            for row in db.execute("SELECT * FROM docs ORDER BY seq DESC"):
                if row[5] in moving:
                    rows.append(row)
                elif type(row[5]) is int and row[5] < lowest:
                    break
            for number in {row[5] for row in rows}:
                got = ends.get(number)
                if got is None:
                    steps = None
                    break
                into, at = places.place(steps, number, got[0])
                if into not in st.segments or self._hash_at(into, at) != got[1]:
                    steps = None
                    break
        if steps is None:
            _save_placed(db, "")
            return
        update = []
        for seq, win, length, size, blob, seg, off, h in rows:
            if not _all_int(seq, win, length, size, seg, off, h) or type(blob) is not bytes \
                    or h != _doc_h(seq, win, length, size, blob, seg, off):
                raise Damaged(f"the entry of row {seq} fails its checksum")
            number, offset = places.place(steps, seg, off)
            update.append((number, offset, _doc_h(seq, win, length, size, blob, number, offset),
                           seq))
        db.executemany("UPDATE docs SET seg = ?, off = ?, h = ? WHERE seq = ?", update)
        _save_placed(db, new)

    def _extend(
        self, db: sqlite3.Connection, st: Any, layout: str, base: Mark, tail: Tail | None,
        given: list[tuple[int, bytes]] | None = None,
    ) -> Mark | None:
        """Read the rows after the index's mark (or its tail's) into the
        tail, and fold it into the index once it is full; None when the
        tail cannot go on (another epoch, layout or floor, a log that lost or
        changed what it holds, or more than ``FOLD_BYTES`` to read): then
        the index is brought up to the log in SQLite. ``given``: the lines
        after the mark in the active segment, known to follow what was
        checked (``_refresh``), so the log is neither checked nor read."""
        mark = self._tail_mark if tail is not None else base
        if not (mark.epoch == st.epoch and mark.layout == layout
                and mark.floor == _floor_seq(st) and mark.segment in st.segments
                and self._pending(st, mark) <= FOLD_BYTES
                and (given is not None or (self._line_hash(mark) == mark.last_hash
                                           and self._segments_hold(db, st, tail)))):
            return None
        self._tail = None  # until it is whole again
        if tail is None:
            calls: set[str] = set()
            for call, h in db.execute("SELECT call, h FROM echo"):
                if h != _h(call) or type(call) is not str:
                    raise Damaged("an echo entry fails its checksum")
                calls.add(call)
            tail = Tail(calls)
        prog = _Progress.of(mark)
        for seq, number, offset, size, indexed in self._rows(
                st, (mark.segment, mark.offset), prog, tail.calls, tail.new_calls, given):
            if indexed is None:
                tail.boundary(seq)
            else:
                tail.add(TailDoc(seq, prog.window, indexed[1], size, number, offset,
                                 indexed[0]))
        tail.bytes += prog.bytes
        for number, (at, h, lines) in prog.seg_ends.items():
            tail.seg_ends[number] = (at, h, _stamp_text(st, number), lines)
        mark = prog.mark(st.epoch, layout, mark.floor, base.next_tid)
        if tail.full():
            return self._fold(db, st, base, tail, mark)
        self._tail, self._tail_base, self._tail_mark = tail, base, mark
        return mark

    def _fold(self, db: sqlite3.Connection, st: Any, base: Mark, tail: Tail, mark: Mark) -> Mark:
        """Write the tail into the index in one transaction (``_Raced`` when
        another process moved the index on meanwhile: read again). The
        terms this connection's last fold wrote (their ids and document
        frequencies) are taken from memory when no other connection has
        committed since (SQLite's ``data_version`` unchanged): the df table
        holds what that fold wrote; the other terms are read and verified."""
        kept = self._terms
        self._forget()  # and the terms, until this fold commits
        with _writing(db):
            if self._mark(db) != base:
                raise _Raced()
            version = db.execute("PRAGMA data_version").fetchone()[0]
            writer = _Writer(db, base.next_tid)
            if kept is not None and kept[0] == version:
                writer.tids = kept[1]
            writer.new_calls.extend(tail.new_calls)
            for seq in tail.wins:
                writer.boundary(seq)
            writer.docs([(d.seq, d.window, d.tfs, d.length, d.size, d.segment, d.offset)
                         for d in map(tail.docs.__getitem__, tail.order)])
            writer.flush()
            self._save_segs(db, st, {n: (at, h, lines)
                                     for n, (at, h, _s, lines) in tail.seg_ends.items()})
            mark = replace(mark, next_tid=writer.next_tid)
            _save(db, mark)
        if len(writer.tids) <= TERMS_KEPT:
            self._terms = (version, writer.tids)
        return mark

    @staticmethod
    def _end(st: Any) -> tuple[int, int]:
        if st.active_stamp is not None:
            return st.active, st.active_stamp.size
        if st.sealed:
            return st.sealed[-1][0], st.sealed[-1][1].size
        return 0, 0

    @staticmethod
    def _pending(st: Any, mark: Mark) -> int:
        """Bytes of the log after the mark's position."""
        sizes = {n: stamp.size for n, stamp in st.sealed}
        if st.active_stamp is not None:
            sizes[st.active] = st.active_stamp.size
        return sum(size - (mark.offset if n == mark.segment else 0)
                   for n, size in sizes.items() if n >= mark.segment)

    def _current(self, st: Any, layout: str, mark: Mark, tail: Tail | None = None) -> bool:
        return (mark.epoch == st.epoch and mark.layout == layout
                and mark.floor == _floor_seq(st)
                and (mark.segment, mark.offset) == self._end(st)
                and (mark.upto > 0 or st.next_seq <= 1)
                and self._line_hash(mark) == mark.last_hash
                and self._segments_hold(self._open(), st, tail))

    def _segments_hold(self, db: sqlite3.Connection, st: Any, tail: Tail | None = None) -> bool:
        """Whether every segment still ends its indexed part (the index's,
        then its tail's) with the line read last there (a crash at
        durability off can shorten an older segment while a newer one
        survives)."""
        stamps = _stamps(st)
        known = self._known
        if known is not None and self._segs is not None and self._segs[0] == known[0]:
            ends = list(self._segs[1])  # nobody committed since they were read
        else:
            ends = [(n, at, h, stamp) for n, (at, h, stamp, _lines) in _seg_rows(db).items()]
            if known is not None:
                self._segs = (known[0], list(ends))
        if tail is not None:
            ends.extend((n, at, h, stamp) for n, (at, h, stamp, _l) in tail.seg_ends.items())
        for number, last_at, last_hash, stamp in ends:
            if number not in st.segments:
                return False
            if stamps.get(number) == stamp:
                continue  # the same file, untouched since it was read (a sealed segment)
            if self._hash_at(number, last_at) != last_hash:
                return False
        return True

    def _line_hash(self, mark: Mark) -> str:
        """The hash of the line the mark says it ended at, read from the log."""
        return self._hash_at(mark.segment, mark.last_at)

    def _hash_at(self, number: int, at: int) -> str:
        """The hash of the line at offset ``at`` of segment ``number`` ("":
        no line, ``at`` < 0), once a refresh (``_hashes``)."""
        if at < 0:
            return ""
        memo = self._hashes
        if memo is not None:
            got = memo.get((number, at))
            if got is None:
                got = memo[(number, at)] = self._read_line_hash(number, at)
            return got
        return self._read_line_hash(number, at)

    def _read_line_hash(self, number: int, at: int) -> str:
        """The hash of :meth:`_line_at`'s line ("?": none there)."""
        data = self._line_at(number, at)
        return "?" if data is None else xxhash.xxh3_64_hexdigest(data)

    def _moved(self, st: Any, layout: str, mark: Mark,
               start: tuple[int, int, int] | None) -> Mark | None:
        """``mark`` where ``_resume`` found its row after a merge (``start``),
        when no more than the tail takes follows it; else None."""
        if start is None or mark.layout == layout:
            return None
        moved = replace(mark, layout=layout, segment=start[0], offset=start[1],
                        last_at=start[2])
        return moved if self._pending(st, moved) <= FOLD_BYTES else None

    def _resume(self, st: Any, layout: str, mark: Mark) -> tuple[int, int, int] | None:
        """Where to go on indexing (segment, offset, and the offset of the
        line of the mark's row there), or None for a rebuild."""
        if mark.epoch != st.epoch or mark.upto <= 0 or mark.floor != _floor_seq(st):
            return None
        if mark.layout == layout and mark.segment in st.segments:
            if self._line_hash(mark) != mark.last_hash or not self._segments_hold(
                    self._open(), st):
                return None  # the log lost or changed rows the index holds
            return mark.segment, mark.offset, mark.last_at
        # A merge moved rows (same epoch, same rows), or the receipt is not
        # verified (a crash): find the last row by seq, having counted the
        # lines from the floor's on again (a lost older line means a rebuild).
        # The segments the index read whose files are the same since (their
        # stamps; a merge leaves the segments before the merged ones alone)
        # are not read again: each segs entry holds the count up to its line.
        db = self._open()
        ends = _seg_rows(db)
        stamps = _stamps(st)
        kept = self._unchanged(st, ends, stamps)
        db.execute(f"DELETE FROM segs WHERE number NOT IN ({','.join('?' * len(kept))})", kept)
        count, numbers, start = 0, st.segments, (0, 0)
        for number in reversed(kept):
            at, last_hash, _stamp, lines = ends[number]
            data = self._line_at(number, at)
            seq = fmt.seq_prefix(data[:32]) if data is not None else None
            if data is None or xxhash.xxh3_64_hexdigest(data) != last_hash or seq is None:
                return None  # a file that kept its stamp but not its line: rebuild
            if seq > mark.upto:
                continue
            if seq == mark.upto:
                if last_hash != mark.last_hash or int(lines) != mark.lines:
                    return None
                return number, at + len(data) + 1, at
            count = int(lines)
            numbers = [n for n in st.segments if n >= number]
            start = (number, at + len(data) + 1)
            break
        seen: dict[int, tuple[int, bytes, int]] = {}  # each segment's last line counted
        for number in numbers:
            offset = start[1] if number == start[0] else 0
            for line in segs.iter_lines(segs.segment_path(self.wsdir, number), offset):
                seq = fmt.seq_prefix(line.data[:32])
                if seq is not None and seq >= mark.floor:
                    count = (count + xxhash.xxh3_64_intdigest(line.data)) & _MASK
                    seen[number] = (line.offset, line.data, count)
                if seq == mark.upto:
                    if xxhash.xxh3_64_hexdigest(line.data) != mark.last_hash \
                            or count != mark.lines:
                        return None
                    # What was read, so the next merge reads only what it moves.
                    self._save_segs(db, st, {n: (at, xxhash.xxh3_64_hexdigest(data), lines)
                                             for n, (at, data, lines) in seen.items()})
                    return number, line.offset + len(line.data) + 1, line.offset
                if seq is not None and seq > mark.upto:
                    return None
        return None

    def _unchanged(self, st: Any, ends: dict[int, tuple[int, str, str, str]],
                   stamps: dict[int, str]) -> list[int]:
        """The segments from the index's start on, in order, whose segs
        entries name their files as they are now (the same stamp), up to the
        first that has none or another file: the lines up to each entry's
        line are those the index counted then."""
        first = st.floor.segment if st.floor is not None else (
            st.segments[0] if st.segments else 0)
        kept = []
        for number in st.segments:
            if number < first:
                continue
            got = ends.get(number)
            if got is None or stamps.get(number) != got[2]:
                break
            kept.append(number)
        return kept

    def _line_at(self, number: int, at: int) -> bytes | None:
        """The whole line at offset ``at`` of segment ``number`` (None: none,
        the segment gone or unreadable: the index no longer holds, rebuilt).
        A segment that is a symlink or no regular file raises ``UnsafePath``
        as every read of the log does (``segs.open_regular``: nothing is
        followed, a FIFO never waited on), not a rebuild: a rebuild would
        meet it too, after throwing the index's work away."""
        try:
            fd = segs.open_regular(segs.segment_path(self.wsdir, number))
        except OSError:
            return None
        try:
            for line in segs.iter_lines_fd(fd, at, 16 * 1024):
                return line.data if line.complete else None
        except OSError:
            return None
        finally:
            os.close(fd)
        return None

    def _lines(self, st: Any, start: tuple[int, int]) -> Iterator[tuple[int, segs.Line]]:
        end_segment, end_offset = self._end(st)
        for number in st.segments:
            if number < start[0] or number > end_segment:
                continue
            offset = start[1] if number == start[0] else 0
            for line in segs.iter_lines(segs.segment_path(self.wsdir, number), offset):
                if number == end_segment and line.offset >= end_offset:
                    break
                if not line.complete:
                    break
                yield number, line

    def _rows(
        self, st: Any, start: tuple[int, int], prog: _Progress, calls: set[str],
        new_calls: list[str], given: list[tuple[int, bytes]] | None = None,
    ) -> Iterator[tuple[int, int, int, int, tuple[Counter[str], int] | None]]:
        """Each boundary and each document from ``start`` to the log's end:
        (seq, segment, offset, line size, its terms and length; None for a
        boundary), ``prog`` advanced past it first (and past the lines in
        between that are neither). ``given``: those lines of the active
        segment (offset, bytes), known already."""
        lines = self._lines(st, start) if given is None else (
            (st.active, segs.Line(offset, data, True)) for offset, data in given)
        for number, line in lines:
            prog.segment, prog.offset = number, line.offset + len(line.data) + 1
            prog.bytes += len(line.data) + 1
            if fmt.seq_prefix(line.data[:32]) is not None:
                prog.lines = (prog.lines + xxhash.xxh3_64_intdigest(line.data)) & _MASK
            row = fmt.decode_line(line.data)
            seq = row.get("seq") if row is not None else None
            if row is None or not isinstance(seq, int) or isinstance(seq, bool):
                continue  # unreadable lines are never results (check reports them)
            prog.upto, prog.last_at = seq, line.offset
            prog.last_hash = xxhash.xxh3_64_hexdigest(line.data)
            prog.seg_ends[number] = (line.offset, prog.last_hash, prog.lines)
            if row.get("kind") == "reset" or fmt.readable_row_is_reset(line.data, row):
                prog.window = seq
                yield seq, number, line.offset, len(line.data), None
                continue
            indexed = indexed_terms(row, calls, new_calls, len(line.data))
            if indexed is None:
                continue
            prog.docs += 1
            prog.total += indexed[1]
            yield seq, number, line.offset, len(line.data), indexed

    def _index_from(
        self, db: sqlite3.Connection, st: Any, layout: str, mark: Mark, start: tuple[int, int]
    ) -> Mark:
        calls: set[str] = set()
        for call, h in db.execute("SELECT call, h FROM echo"):
            if h != _h(call) or type(call) is not str:
                raise Damaged("an echo entry fails its checksum")
            calls.add(call)
        writer = _Writer(db, mark.next_tid)
        prog = _Progress.of(mark)
        batch: list[tuple[int, int, Counter[str], int, int, int, int]] = []
        postings = 0
        for seq, number, offset, size, indexed in self._rows(st, start, prog, calls,
                                                             writer.new_calls):
            if indexed is None:
                writer.boundary(seq)
                continue
            # Rows are written a batch at a time (their terms looked up in
            # one statement per 500), so ``prog`` is just past the batch's
            # last row whenever a chunk commits.
            batch.append((seq, prog.window, indexed[0], indexed[1], size, number, offset))
            postings += len(indexed[0])
            if len(batch) < BATCH_ROWS and postings < BATCH_POSTINGS:
                continue
            writer.docs(batch)
            batch.clear()
            postings = 0
            if writer.full():
                # Commit a consistent prefix (a long build survives a crash and
                # its WAL stays small), then go on if no other reader did.
                writer.flush()
                self._save_segs(db, st, prog.seg_ends)
                saved = prog.mark(st.epoch, layout, mark.floor, writer.next_tid)
                _save(db, saved)
                db.execute("COMMIT")
                db.execute("BEGIN IMMEDIATE")
                if self._mark(db) != saved:
                    raise _Raced()
        writer.docs(batch)
        writer.flush()
        self._save_segs(db, st, prog.seg_ends)
        return prog.mark(st.epoch, layout, mark.floor, writer.next_tid)

    @staticmethod
    def _save_segs(db: sqlite3.Connection, st: Any,
                   seg_ends: dict[int, tuple[int, str, int]]) -> None:
        stamps = _stamps(st)
        rows = [(n, at, h, stamps.get(n, ""), str(lines))
                for n, (at, h, lines) in seg_ends.items()]
        db.executemany("INSERT OR REPLACE INTO segs VALUES (?, ?, ?, ?, ?, ?)",
                       [(*r, _h(*r)) for r in rows])

    # -- answering -------------------------------------------------------------

    def candidates(
        self, mark: Mark, query: ranking.Query, after: int, high: int, window: int | None
    ) -> list[tuple[int, int, float, tuple[int, int]]]:
        """The ranked candidates (seq, window, score, where the row's line was
        when indexed: segment and offset, a hint), best first, of the index
        with its tail as ``mark`` (from ``refresh``) names them: for each
        query term (the rarest ``MAX_TERMS``) its best postings with seq in
        (after, high], ``SCAN_ROWS`` in all, among its first ``EXAMINE`` (all
        terms) postings, then ``ranking.rank`` over them. The index's and the
        tail's statistics are added and their postings merged in the index's
        order, in one read transaction of the database (``_Raced`` when the
        database no longer holds the mark the tail extends). The terms,
        windows and postings read are verified again (``Damaged``; the rows'
        entries, hashing whose pairs cost a few ms a query, were verified whole
        in this state of the file, at this open or at the one its record
        names); ``sizes`` gets each candidate's line size."""
        db = self._open()
        tail = self._tail if self._tail is not None and self._tail_mark == mark else None
        with _reading(db):
            if self._mark(db) != (self._tail_base if tail is not None else mark):
                raise _Raced()
            return self._candidates(db, mark, tail, query, after, high, window)

    def _candidates(
        self, db: sqlite3.Connection, mark: Mark, tail: Tail | None, query: ranking.Query,
        after: int, high: int, window: int | None,
    ) -> list[tuple[int, int, float, tuple[int, int]]]:
        dfs: dict[str, int] = {}
        tid: dict[str, int] = {}
        for t in query.terms:
            got = db.execute("SELECT tid, n, h FROM df WHERE term = ?", (t,)).fetchone()
            if got is not None and (got[2] != _h(t, got[0], got[1]) or type(got[0]) is not int
                                    or type(got[1]) is not int):
                raise Damaged("a term fails its checksum")
            n = got[1] if got else 0
            if got and n > 0:
                tid[t] = got[0]
            if tail is not None:
                n += len(tail.postings_of(t))
            if n > 0:
                dfs[t] = n
        self.sizes = {}
        if not dfs:
            return []
        kept, per_term, examine = ranking.postings_plan(dfs)
        if window is not None:  # a window is the seq range up to the next boundary
            after = max(after, window)
            nxt = db.execute("SELECT win, h FROM wins WHERE win > ? ORDER BY win LIMIT 1",
                             (window,)).fetchone()
            if nxt is not None:
                if nxt[1] != _h(nxt[0]):
                    raise Damaged("a window entry fails its checksum")
                high = min(high, int(nxt[0]) - 1)
            elif tail is not None and (later := tail.next_window(window)) is not None:
                high = min(high, later - 1)
        # Candidates: the best postings of each term; each candidate's
        # frequencies of every query term then come from its docs entry.
        found: dict[int, dict[str, int]] = {}
        partial: list[str] = []
        for t in kept:
            taken = 0
            merged: Iterable[tuple[int, int, int]] = self._postings(db, tid.get(t), examine)
            if tail is not None and tail.postings_of(t):  # the tail's come after the mark
                merged = islice(heapq.merge(merged, tail.postings_of(t)), examine)
            for _imp, neg, tf in merged:
                if after < -neg <= high:
                    found.setdefault(-neg, {})[t] = tf
                    taken += 1
                    if taken >= per_term:
                        break
            if not ranking.complete(dfs[t], taken, per_term, examine):
                partial.append(t)
        if not found:
            return []
        # The frequencies a row's postings did not give come from its entry,
        # for the terms whose postings in range were not all read.
        term_of = {tid[t]: t for t in partial if t in tid}
        where: dict[int, tuple[int, int]] = {}
        by: dict[int, ranking.Doc] = {}
        self._entries(db, tail, sorted(found), found, term_of, partial, len(kept), by, where)
        if not found.keys() <= where.keys():
            raise Damaged("a posting names a row the index has no entry for")
        corpus = ranking.Corpus(mark.docs, mark.total, dfs)
        q = ranking.Query(tuple(kept), query.phrases)
        stage = ranking.widen(list(by.values()), q, corpus)
        # The widened hits, the rows just before and after each in range
        # (their neighbours) and theirs, as the other engines read them.
        near: dict[int, tuple[int, int]] = {}
        ring = sorted(stage.wide)
        for _ in range(2):
            for seq, prev, nxt in db.execute(
                    _LINKS_SQL.format(rows=",".join(["(?)"] * len(ring))), [*ring, after, high]):
                if tail is not None:  # the tail's rows all come after the index's
                    t_prev, t_next = tail.links(seq, after, high)
                    prev, nxt = t_prev or prev, nxt or t_next
                near[seq] = (prev or 0, nxt or 0)
            ring = sorted({n for pair in near.values() for n in pair if n} - near.keys())
            if not ring:
                break
        more = sorted({n for pair in near.values() for n in pair if n} - by.keys())
        if more:
            self._entries(db, tail, more, found, term_of, partial, len(kept), by, where)
        for seq, (prev, nxt) in near.items():
            d = by.get(seq)
            if d is not None:
                d.prev, d.next = prev, nxt
        docs = [by[s] for s in sorted(by)]
        return [(s, by[s].window, score, where[s])
                for s, score in ranking.rank(docs, q, corpus, found, stage=stage)]

    @staticmethod
    def _postings(db: sqlite3.Connection, term_id: int | None,
                  examine: int) -> Iterator[tuple[int, int, int]]:
        """A term's first ``examine`` postings in the index (-impact, -seq,
        tf), each verified."""
        if term_id is None:
            return
        last: tuple[int, int] | None = None
        for imp, neg, tf, h, check in db.execute(
            f"SELECT imp, neg, tf, h, {_POST_CHECK} FROM post WHERE tid = ? "
            "ORDER BY imp, neg LIMIT ?", (term_id, examine)):
            if h != check or (last is not None and (imp, neg) <= last):
                raise Damaged("a posting fails its checksum")
            last = (imp, neg)
            yield imp, neg, tf

    def _entries(
        self, db: sqlite3.Connection, tail: Tail | None, seqs: list[int],
        found: dict[int, dict[str, int]], term_of: dict[int, str], partial: list[str],
        nterms: int, by: dict[int, ranking.Doc], where: dict[int, tuple[int, int]],
    ) -> None:
        """The entries of ``seqs`` (ascending) into ``by``: each row's
        frequencies of the query terms (from its postings in ``found``, the
        rest, of the ``partial`` terms, from its pairs in the index or its
        counts in the tail), where its line was and its size."""
        if tail is not None:
            for seq in seqs:
                d = tail.docs.get(seq)
                if d is not None:
                    where[seq] = (d.segment, d.offset)
                    self.sizes[seq] = d.size
                    by[seq] = tail.entry(seq, partial, found.get(seq, {}))
            seqs = [s for s in seqs if s not in tail.docs]
            if not seqs:
                return
        keys = [(array("I", (t_id,)).tobytes(), named) for t_id, named in term_of.items()]
        for seq, win, length, size, blob, seg, off, h in db.execute(
            f"SELECT * FROM docs WHERE seq IN ({','.join('?' * len(seqs))})", seqs,
        ):
            if type(blob) is not bytes or len(blob) % 8 or not _all_int(win, length, size, seg,
                                                                        off, h):
                raise Damaged(f"the entry of row {seq} is malformed")
            where[seq] = (seg, off)
            self.sizes[seq] = size
            tfs = found.get(seq, {})
            if keys and len(tfs) < nterms:
                for key, named in keys:
                    n = _pair_count(blob, key)
                    if n:
                        tfs[named] = n
            by[seq] = ranking.Doc(seq, win, length, tfs)

    def places_of(self, mark: Mark, seqs: list[int]) -> dict[int, tuple[int, int]]:
        """Where the index with its tail as ``mark`` (from ``refresh``) has
        the lines of ``seqs`` now: (segment, offset) of each row it holds,
        its line's size put in ``sizes``, so the semantic channel's
        candidates are read at their places as the lexical ones are (the
        entries move with the rows after a merge, ``_replace_docs``; a
        vector keeps the place where its row was when embedded, and without
        a size ``FileReader.locate_at`` finds a row by seq). Types checked as
        ``_entries`` does (``Damaged``). Empty when the database no longer
        holds ``mark`` (another process folded or rebuilt it since): the
        vectors' own places are used. A place is only where a row is read
        first: a line there of another seq is never served, the row is then
        found by seq."""
        if not seqs:
            return {}
        with self._guard:
            db = self._open()
            tail = self._tail if self._tail is not None and self._tail_mark == mark else None
            out: dict[int, tuple[int, int]] = {}
            got: dict[int, int] = {}
            if tail is not None:
                for seq in seqs:
                    d = tail.docs.get(seq)
                    if d is not None:
                        out[seq] = (d.segment, d.offset)
                        got[seq] = d.size
            rest = [s for s in seqs if s not in out]
            with _reading(db):
                if self._mark(db) != (self._tail_base if tail is not None else mark):
                    return {}
                for seq, seg, off, size in db.execute(
                    f"SELECT seq, seg, off, size FROM docs WHERE seq IN "
                    f"({','.join('?' * len(rest))})", rest,
                ) if rest else ():
                    if not _all_int(seq, seg, off, size):
                        raise Damaged(f"the entry of row {seq} is malformed")
                    out[seq] = (seg, off)
                    got[seq] = size
            self.sizes.update(got)
            return out

    def docs_after(self, upto: int) -> list[tuple[int, int, tuple[int, int]]]:
        """The rows the index and its tail hold with seq above ``upto``, in
        seq order: (seq, window, (segment, offset) where it read the row's
        line), each entry verified (``Damaged``, also when another process
        moved the index on since ``refresh``): what the semantic channel
        embeds."""
        with self._guard:
            db = self._open()
            tail = self._tail
            out = []
            with _reading(db):
                if tail is not None and self._mark(db) != self._tail_base:
                    raise Damaged("the index moved on since its tail was read")
                for seq, win, length, size, blob, seg, off, h in db.execute(
                        "SELECT * FROM docs WHERE seq > ? ORDER BY seq", (upto,)):
                    if not _all_int(win, length, size, seg, off) or type(blob) is not bytes \
                            or h != _doc_h(seq, win, length, size, blob, seg, off):
                        raise Damaged(f"the entry of row {seq} fails its checksum")
                    out.append((seq, win, (seg, off)))
            if tail is not None:
                out.extend((s, tail.docs[s].window, (tail.docs[s].segment, tail.docs[s].offset))
                           for s in tail.order if s > upto)
            return out

    def stats(self) -> dict[str, int]:
        """Rows held (the tail's too), the last seq seen and the database's bytes."""
        db = self._open()
        base = self._mark(db)
        mark = self._tail_mark if self._held(base) is not None else base
        size = 0
        for suffix in ("", "-wal"):
            try:
                size += os.path.getsize(index_path(self.wsdir) + suffix)
            except OSError:
                pass
        return {"docs": mark.docs, "upto": mark.upto, "bytes": size}


def _seg_rows(db: sqlite3.Connection) -> dict[int, tuple[int, str, str, str]]:
    """The segs table, each entry verified: segment -> (offset and hash of
    the last row line read there, its stamp then, ``lines`` up to that line)."""
    out = {}
    for number, last_at, last_hash, stamp, lines, h in db.execute(
            "SELECT * FROM segs").fetchall():
        if h != _h(number, last_at, last_hash, stamp, lines) or type(number) is not int \
                or type(last_at) is not int or type(last_hash) is not str \
                or type(stamp) is not str or type(lines) is not str or not lines.isdigit():
            raise Damaged("a segment entry fails its checksum")
        out[number] = (last_at, last_hash, stamp, lines)
    return out


def _all_int(*values: Any) -> bool:
    """Whether every value read from the database is an integer (``_TYPES``)."""
    return all(type(v) is int for v in values)


def _pair_count(blob: bytes, key: bytes) -> int:
    """The count paired with a term id (``key``: its bytes as ``array("I")``
    writes it) in a docs entry's pairs, 0 when absent: a search in C for the
    id at an even word."""
    at = blob.find(key)
    while at >= 0 and at % 8:
        at = blob.find(key, at + 1)
    if at < 0:
        return 0
    got = array("I")
    got.frombytes(blob[at + 4:at + 8])
    return got[0]


class _Raced(Exception):
    """Another process indexed between two chunks of ours."""


def _raise_if_busy(exc: sqlite3.OperationalError) -> None:
    if "locked" in str(exc) or "busy" in str(exc):
        # Another reader holds it (building a long index): not damage.
        raise Unavailable("the recall index is being built by another reader; "
                          "retry in a moment") from None


def _save(db: sqlite3.Connection, mark: Mark) -> None:
    pairs = [
        ("version", VERSION), ("epoch", str(mark.epoch)), ("layout", mark.layout),
        ("upto", str(mark.upto)), ("window", str(mark.window)),
        ("segment", str(mark.segment)), ("offset", str(mark.offset)),
        ("last_at", str(mark.last_at)), ("last_hash", mark.last_hash),
        ("docs", str(mark.docs)), ("total", str(mark.total)),
        ("lines", str(mark.lines)), ("floor", str(mark.floor)),
        ("next_tid", str(mark.next_tid)),
    ]
    db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?, ?)",
                   [(k, v, _h(k, v)) for k, v in pairs])


def _placed(db: sqlite3.Connection) -> str:
    """The layout every docs entry's place is exact for ("": none known, an
    index built before places were moved with merges, or one whose move
    could not be verified: its places are hints, rows found by seq)."""
    got = db.execute("SELECT v, h FROM meta WHERE k = 'placed'").fetchone()
    if got is None:
        return ""
    if type(got[0]) is not str or got[1] != _h("placed", got[0]):
        raise Damaged("its places' layout fails its checksum")
    return got[0]


def _save_placed(db: sqlite3.Connection, layout: str) -> None:
    db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?, ?)",
               ("placed", layout, _h("placed", layout)))


def _stamp_text(st: Any, number: int) -> str:
    """Segment ``number``'s stamp as ``_stamps`` writes it ("": none)."""
    if number == st.active and st.active_stamp is not None:
        return repr(tuple(st.active_stamp))
    for n, stamp in st.sealed:
        if n == number:
            return repr(tuple(stamp))
    return ""


def _stamps(st: Any) -> dict[int, str]:
    """Each segment's stamp as text (identity, size, times)."""
    out = {n: repr(tuple(stamp)) for n, stamp in st.sealed}
    if st.active_stamp is not None:
        out[st.active] = repr(tuple(st.active_stamp))
    return out


def layout_of(st: Any) -> str:
    """What a merge changes: the receipt's layout (else the stamps' digest)."""
    if st.verified and st.receipt is not None:
        return str(st.receipt.layout)
    return "d" + st.digest.hex()


SAMPLE = 64  # rows of the index compared with the log by ``inspect``


def inspect(wsdir: str, st: Any, read_row: Any) -> list[tuple[str, str]]:
    """Read-only findings about the index against the log state ``st``:
    (code, message) pairs. ``read_row(seq)`` returns the log's row or None.
    ``recall_index_unsafe``: a link or not a regular file at one of its paths
    (never opened); ``recall_index_stale``: its mark names another version
    (an older build's index, its tables not this one's; the next ranked
    search rebuilds it); ``recall_index_damaged``: it fails ``verify``; else
    the mark is compared with the log, and up to SAMPLE indexed rows (spread
    over the seqs) with what the log says of them now."""
    why = unsafe(wsdir)
    if why is not None:
        return [("recall_index_unsafe", refusal(wsdir, why))]
    path = index_path(wsdir)
    if not os.path.exists(path):
        return []
    try:
        db = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error as exc:
        return [("recall_index_damaged", f"the recall index cannot be opened: {exc}")]
    try:
        version = _version_of(db)
        if version is not None and version != VERSION:
            return [("recall_index_stale", f"the recall index has format {version}, this "
                     f"build writes {VERSION}")]
        verify(db)
        index = RecallIndex(wsdir)
        mark = read_mark(db)
        if mark.epoch != st.epoch or mark.upto > st.next_seq - 1 \
                or mark.floor != _floor_seq(st):
            return [("recall_index_stale", "the recall index was built for another state of "
                     "the log (a rewrite, a new privacy floor or a lost tail since)")]
        if mark.layout == layout_of(st) and mark.segment in st.segments \
                and index._line_hash(mark) != mark.last_hash:
            return [("recall_index_stale", "the row the recall index ends at is not in the log")]
        rows = db.execute("SELECT seq, len, size FROM docs ORDER BY random() LIMIT ?",
                          (SAMPLE,))
        for seq, length, size in rows.fetchall():
            if size > LINE_CAP:
                continue  # never served, indexed by a prefix: not read here
            row = read_row(seq)
            if row is None or hidden(row):
                return [("recall_index_disagrees", f"the recall index holds row {seq}, which "
                         "the log does not show")]
            if ranking.term_counts(row_text(row))[1] != length:
                return [("recall_index_disagrees", f"row {seq} differs from its index entry")]
    except Damaged as exc:
        return [("recall_index_damaged", f"the recall index is damaged: {exc}")]
    except DAMAGE_ERRORS as exc:
        return [("recall_index_damaged", f"the recall index cannot be read: {exc}")]
    finally:
        db.close()
    return []


def _version_of(db: sqlite3.Connection) -> str | None:
    """The version the index's mark names, when its meta entry reads and
    passes its checksum (else None: ``verify`` says what is wrong)."""
    try:
        got = db.execute("SELECT v, h FROM meta WHERE k = 'version'").fetchone()
    except sqlite3.DatabaseError:
        return None
    if got is None or type(got[0]) is not str or got[1] != _h("version", got[0]):
        return None
    return str(got[0])


def rebuild(wsdir: str, st: Any) -> Mark:
    """Delete the index and build it again from the log (under the lock)."""
    index = RecallIndex(wsdir)
    index.discard()
    try:
        return index.refresh(st, layout_of(st))
    finally:
        index.close()
