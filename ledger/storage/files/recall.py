"""The recall index of a file workspace: a projection of the log for ranked
``session_history`` search, never its source of truth.

One SQLite database (``fmt.RECALL_NAME``) beside the segments, from the
standard library, holding for every searchable row its window, its length
in terms and its terms, and for every term its document frequency and its
postings ordered by impact (``ranking.impact``), newest first among equals,
so a query reads the best few postings of each of its terms and no more: the
work of a call is bounded by ``SCAN_ROWS`` postings whatever the size of the
history.

Maintenance is lazy: appends never touch it (their cost is unchanged); the
first ranked search after appends indexes the rows it has not seen, under
the reader's shared lock, in SQLite transactions (CHUNK_POSTINGS each, every
one ending at a consistent mark, so a long build keeps its progress). What it
has seen is named by the log's epoch, the position just past the last row indexed and a
hash of that row's line: a rewrite (reject, truncate, purge, repair) starts
a new epoch and a rebuild; a log that lost or changed the row the index ends
at (a crash at ``durability="off"``) is rebuilt too; a merge only moves rows
and is found again by seq. A missing, damaged or foreign database is
rebuilt from the segments. Rows at or before the floor, or after the query's
high-water mark, are never candidates (the SQL bounds them), and every row
the tool returns is read again from the log.
"""

from __future__ import annotations

import os
import sqlite3
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import xxhash

from ledger.core import format as fmt
from ledger.core import ranking
from ledger.core.errors import Unavailable
from ledger.core.searchable import hidden, indexed_terms, row_text
from ledger.storage.files import segments as segs

VERSION = "4"
_MASK = (1 << 64) - 1
CHUNK_POSTINGS = 200_000  # postings per committed chunk of a long build
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(k TEXT PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS docs(seq INTEGER PRIMARY KEY, win INTEGER NOT NULL,
    len INTEGER NOT NULL, tids BLOB NOT NULL, seg INTEGER NOT NULL, off INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS post(tid INTEGER NOT NULL, imp INTEGER NOT NULL,
    neg INTEGER NOT NULL, tf INTEGER NOT NULL, PRIMARY KEY(tid, imp, neg)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS df(term TEXT PRIMARY KEY, tid INTEGER NOT NULL UNIQUE,
    n INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS echo(call TEXT PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS wins(win INTEGER PRIMARY KEY);
CREATE TABLE IF NOT EXISTS segs(number INTEGER PRIMARY KEY, last_at INTEGER NOT NULL,
    last_hash TEXT NOT NULL, stamp TEXT NOT NULL);
"""


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


_EMPTY = Mark(-1, "", 0, 0, -1, 0, -1, "", 0, 0)


def index_path(wsdir: str) -> str:
    return os.path.join(wsdir, fmt.RECALL_NAME)


class RecallIndex:
    """The index of one workspace directory. ``refresh`` brings it up to
    the log's state; ``candidates`` answers a query from it."""

    def __init__(self, wsdir: str, synchronous: str = "NORMAL") -> None:
        self.wsdir = wsdir
        self.synchronous = synchronous
        self._db: sqlite3.Connection | None = None
        self._ident: tuple[int, int] = (0, 0)

    # -- the database --------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        if self._db is not None:
            try:
                now = os.stat(index_path(self.wsdir))
                same = (now.st_dev, now.st_ino) == self._ident
            except OSError:
                same = False
            if not same:  # deleted or replaced (a workspace deleted and made again)
                self.close()
        if self._db is None:
            db = sqlite3.connect(index_path(self.wsdir), timeout=30, isolation_level=None,
                                 check_same_thread=False)
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute(f"PRAGMA synchronous={self.synchronous}")
                db.executescript(_SCHEMA)
                now = os.stat(index_path(self.wsdir))
            except (sqlite3.DatabaseError, OSError):
                db.close()
                raise
            self._db = db
            self._ident = (now.st_dev, now.st_ino)
        return self._db

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def discard(self) -> None:
        """Delete the database (it is rebuilt at the next search)."""
        self.close()
        for suffix in ("", "-wal", "-shm", "-journal"):
            try:
                os.unlink(index_path(self.wsdir) + suffix)
            except FileNotFoundError:
                pass

    def _mark(self, db: sqlite3.Connection) -> Mark:
        got = dict(db.execute("SELECT k, v FROM meta").fetchall())
        if got.get("version") != VERSION:
            return _EMPTY
        try:
            return Mark(int(got["epoch"]), got["layout"], int(got["upto"]), int(got["window"]),
                        int(got["segment"]), int(got["offset"]), int(got["last_at"]),
                        got["last_hash"], int(got["docs"]), int(got["total"]),
                        int(got["lines"]))
        except (KeyError, ValueError):
            return _EMPTY

    # -- bringing it up to date ----------------------------------------------

    def refresh(self, st: Any, layout: str) -> Mark:
        """Index what the log holds beyond the mark (or rebuild). Called under
        the workspace's shared lock, so the log does not change meanwhile."""
        try:
            for _ in range(8):
                try:
                    return self._refresh(st, layout)
                except _Raced:
                    continue  # another reader went on from our last commit
            return self._refresh(st, layout)
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                # Another reader holds it (building a long index): not damage.
                raise Unavailable("the recall index is being built by another reader; "
                                  "retry in a moment") from None
            return self._rebuild_damaged(st, layout)
        except sqlite3.DatabaseError:
            return self._rebuild_damaged(st, layout)

    def _rebuild_damaged(self, st: Any, layout: str) -> Mark:
        """A damaged or foreign file: it is only a projection, built again."""
        self.discard()
        try:
            return self._refresh(st, layout)
        except sqlite3.DatabaseError as exc:
            raise Unavailable(f"the recall index cannot be written: {exc}") from None

    def _refresh(self, st: Any, layout: str) -> Mark:
        db = self._open()
        mark = self._mark(db)
        if self._current(st, layout, mark):
            return mark
        db.execute("BEGIN IMMEDIATE")
        try:
            mark = self._mark(db)  # another reader may have done it meanwhile
            start = self._resume(st, layout, mark)
            if start is None:
                for table in ("meta", "docs", "post", "df", "echo", "wins", "segs"):
                    db.execute(f"DELETE FROM {table}")
                start = (st.segments[0] if st.segments else 0, 0)
                mark = Mark(st.epoch, layout, 0, 0, *start, -1, "", 0, 0)
            mark = self._index_from(db, st, layout, mark, start)
            _save(db, mark)
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        return mark

    @staticmethod
    def _end(st: Any) -> tuple[int, int]:
        if st.active_stamp is not None:
            return st.active, st.active_stamp.size
        if st.sealed:
            return st.sealed[-1][0], st.sealed[-1][1].size
        return 0, 0

    def _current(self, st: Any, layout: str, mark: Mark) -> bool:
        return (mark.epoch == st.epoch and mark.layout == layout
                and (mark.segment, mark.offset) == self._end(st)
                and (mark.upto > 0 or st.next_seq <= 1)
                and self._line_hash(mark) == mark.last_hash
                and self._segments_hold(self._open(), st))

    def _segments_hold(self, db: sqlite3.Connection, st: Any) -> bool:
        """Whether every segment still ends its indexed part with the line the
        index read last there (a crash at durability off can shorten an
        older segment while a newer one survives)."""
        stamps = _stamps(st)
        for number, last_at, last_hash, stamp in db.execute("SELECT * FROM segs").fetchall():
            if number not in st.segments:
                return False
            if stamps.get(number) == stamp:
                continue  # the same file, untouched since it was read (a sealed segment)
            if self._line_hash(Mark(0, "", 0, 0, number, 0, last_at, "", 0, 0)) != last_hash:
                return False
        return True

    def _line_hash(self, mark: Mark) -> str:
        """The hash of the line the mark says it ended at, read from the log."""
        if mark.last_at < 0:
            return ""
        try:
            fd = os.open(segs.segment_path(self.wsdir, mark.segment),
                         os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            return "?"
        try:
            for line in segs.iter_lines_fd(fd, mark.last_at, 16 * 1024):
                return xxhash.xxh3_64_hexdigest(line.data) if line.complete else "?"
        except OSError:
            return "?"
        finally:
            os.close(fd)
        return "?"

    def _resume(self, st: Any, layout: str, mark: Mark) -> tuple[int, int] | None:
        """Where to go on indexing, or None for a rebuild."""
        if mark.epoch != st.epoch or mark.upto <= 0:
            return None
        if mark.layout == layout and mark.segment in st.segments:
            if self._line_hash(mark) != mark.last_hash or not self._segments_hold(
                    self._open(), st):
                return None  # the log lost or changed rows the index holds
            return mark.segment, mark.offset
        self._open().execute("DELETE FROM segs")  # a merge: segments renumbered
        # A merge moved rows (same epoch, same rows), or the receipt is not
        # verified (a crash): find the last row by seq, having counted the
        # lines before it again (a lost older line means a rebuild).
        count = 0
        for number in st.segments:
            for line in segs.iter_lines(segs.segment_path(self.wsdir, number)):
                seq = fmt.seq_prefix(line.data[:32])
                if seq is not None:
                    count = (count + xxhash.xxh3_64_intdigest(line.data)) & _MASK
                if seq == mark.upto:
                    if xxhash.xxh3_64_hexdigest(line.data) != mark.last_hash \
                            or count != mark.lines:
                        return None
                    return number, line.offset + len(line.data) + 1
                if seq is not None and seq > mark.upto:
                    return None
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

    def _index_from(
        self, db: sqlite3.Connection, st: Any, layout: str, mark: Mark, start: tuple[int, int]
    ) -> Mark:
        calls = {c for (c,) in db.execute("SELECT call FROM echo")}
        tids: dict[str, int] = {}
        top = db.execute("SELECT max(tid) FROM df").fetchone()
        next_tid = [int(top[0]) + 1 if top and top[0] is not None else 1]

        fresh = next_tid[0] == 1  # an empty table: no term to look up

        def tid_of(term: str) -> int:
            got = tids.get(term)
            if got is None:
                row = None if fresh else db.execute(
                    "SELECT tid FROM df WHERE term = ?", (term,)).fetchone()
                if row is None:
                    got = next_tid[0]
                    next_tid[0] += 1
                    db.execute("INSERT INTO df VALUES (?, ?, 0)", (term, got))
                else:
                    got = int(row[0])
                tids[term] = got
            return got

        upto, window = mark.upto, mark.window
        segment, offset, last_at, last_hash = mark.segment, mark.offset, mark.last_at, \
            mark.last_hash
        docs, total, lines = mark.docs, mark.total, mark.lines
        df: dict[int, int] = {}
        doc_rows: list[tuple[int, int, int, bytes, int, int]] = []
        post_rows: list[tuple[int, int, int, int]] = []
        new_calls: list[str] = []
        seg_ends: dict[int, tuple[int, str]] = {}
        for number, line in self._lines(st, start):
            segment, offset = number, line.offset + len(line.data) + 1
            if fmt.seq_prefix(line.data[:32]) is not None:
                lines = (lines + xxhash.xxh3_64_intdigest(line.data)) & _MASK
            row = fmt.decode_line(line.data)
            seq = row.get("seq") if row is not None else None
            if row is None or not isinstance(seq, int) or isinstance(seq, bool):
                continue  # unreadable lines are never results (check reports them)
            upto, last_at = seq, line.offset
            last_hash = xxhash.xxh3_64_hexdigest(line.data)
            seg_ends[number] = (last_at, last_hash)
            if row.get("kind") == "reset" or fmt.readable_row_is_reset(line.data, row):
                window = seq
                db.execute("INSERT OR REPLACE INTO wins VALUES (?)", (seq,))
                continue
            indexed = indexed_terms(row, calls, new_calls)
            if indexed is None:
                continue
            tfs, length = indexed
            docs += 1
            total += length
            pairs = array("I")
            for t, n in tfs.items():
                tid = tid_of(t)
                df[tid] = df.get(tid, 0) + 1
                post_rows.append((tid, -round(ranking.impact(n, length) * 1000), -seq, n))
                pairs.append(tid)
                pairs.append(min(n, 0xFFFFFFFF))
            doc_rows.append((seq, window, length, pairs.tobytes(), number, line.offset))
            if len(post_rows) > CHUNK_POSTINGS:
                # Commit a consistent prefix (a long build survives a crash and
                # its WAL stays small), then go on if no other reader did.
                self._flush(db, doc_rows, post_rows, df, new_calls)
                self._save_segs(db, st, seg_ends)
                saved = Mark(st.epoch, layout, upto, window, segment, offset, last_at,
                             last_hash, docs, total, lines)
                _save(db, saved)
                db.execute("COMMIT")
                db.execute("BEGIN IMMEDIATE")
                if self._mark(db) != saved:
                    raise _Raced()
        self._flush(db, doc_rows, post_rows, df, new_calls)
        self._save_segs(db, st, seg_ends)
        return Mark(st.epoch, layout, upto, window, segment, offset, last_at, last_hash,
                    docs, total, lines)

    @staticmethod
    def _save_segs(db: sqlite3.Connection, st: Any, seg_ends: dict[int, tuple[int, str]]) -> None:
        stamps = _stamps(st)
        db.executemany("INSERT OR REPLACE INTO segs VALUES (?, ?, ?, ?)",
                       [(n, at, h, stamps.get(n, "")) for n, (at, h) in seg_ends.items()])

    @staticmethod
    def _flush(
        db: sqlite3.Connection,
        doc_rows: list[tuple[int, int, int, bytes, int, int]],
        post_rows: list[tuple[int, int, int, int]],
        df: dict[int, int],
        new_calls: list[str],
    ) -> None:
        db.executemany("INSERT OR REPLACE INTO docs VALUES (?, ?, ?, ?, ?, ?)", doc_rows)
        db.executemany("INSERT OR REPLACE INTO post VALUES (?, ?, ?, ?)", post_rows)
        db.executemany("UPDATE df SET n = n + ? WHERE tid = ?",
                       [(n, tid) for tid, n in df.items()])
        db.executemany("INSERT OR IGNORE INTO echo VALUES (?)", [(c,) for c in new_calls])
        doc_rows.clear()
        post_rows.clear()
        df.clear()
        new_calls.clear()

    # -- answering -------------------------------------------------------------

    def candidates(
        self, mark: Mark, query: ranking.Query, after: int, high: int, window: int | None
    ) -> list[tuple[int, int, float, tuple[int, int]]]:
        """The ranked candidates (seq, window, score, where the row's line was
        when indexed: segment and offset, a hint), best first: for each
        query term (the rarest ``MAX_TERMS``) its best postings, ``SCAN_ROWS``
        in all, with seq in (after, high], then ``ranking.rank`` over them."""
        db = self._open()
        dfs: dict[str, int] = {}
        tid: dict[str, int] = {}
        for t in query.terms:
            got = db.execute("SELECT tid, n FROM df WHERE term = ?", (t,)).fetchone()
            if got and got[1] > 0:
                tid[t], dfs[t] = int(got[0]), int(got[1])
        if not dfs:
            return []
        kept, per_term = ranking.postings_plan(dfs)
        if window is not None:  # a window is the seq range up to the next boundary
            after = max(after, window)
            nxt = db.execute("SELECT min(win) FROM wins WHERE win > ?", (window,)).fetchone()
            if nxt and nxt[0] is not None:
                high = min(high, int(nxt[0]) - 1)
        # Candidates: the best postings of each term; each candidate's
        # frequencies of every query term then come from its docs entry.
        found: dict[int, dict[str, int]] = {}
        for t in kept:
            for seq, tf in db.execute(
                "SELECT -neg, tf FROM post WHERE tid = ? AND neg < ? AND neg >= ? "
                "ORDER BY imp, neg LIMIT ?", (tid[t], -after, -high, per_term)):
                found.setdefault(seq, {})[t] = tf
        if not found:
            return []
        docs: list[ranking.Doc] = []
        marks = ",".join("?" * len(found))
        term_of = {tid[t]: t for t in kept}
        where: dict[int, tuple[int, int]] = {}
        for seq, win, length, blob, seg, off in db.execute(
            f"SELECT seq, win, len, tids, seg, off FROM docs WHERE seq IN ({marks})",
            sorted(found),
        ):
            where[seq] = (seg, off)
            pairs = array("I")
            pairs.frombytes(blob)
            tfs = found[seq]
            if len(tfs) < len(kept):
                for i in range(0, len(pairs), 2):
                    term = term_of.get(pairs[i])
                    if term is not None:
                        tfs[term] = pairs[i + 1]
            docs.append(ranking.Doc(seq, win, length, tfs))
        corpus = ranking.Corpus(mark.docs, mark.total, dfs)
        win_of = {d.seq: d.window for d in docs}
        q = ranking.Query(tuple(kept), query.phrases)
        return [(s, win_of[s], score, where[s]) for s, score in ranking.rank(docs, q, corpus)]

    def stats(self) -> dict[str, int]:
        db = self._open()
        mark = self._mark(db)
        size = 0
        for suffix in ("", "-wal"):
            try:
                size += os.path.getsize(index_path(self.wsdir) + suffix)
            except OSError:
                pass
        return {"docs": mark.docs, "upto": mark.upto, "bytes": size}


class _Raced(Exception):
    """Another process indexed between two chunks of ours."""


def _save(db: sqlite3.Connection, mark: Mark) -> None:
    db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", [
        ("version", VERSION), ("epoch", str(mark.epoch)), ("layout", mark.layout),
        ("upto", str(mark.upto)), ("window", str(mark.window)),
        ("segment", str(mark.segment)), ("offset", str(mark.offset)),
        ("last_at", str(mark.last_at)), ("last_hash", mark.last_hash),
        ("docs", str(mark.docs)), ("total", str(mark.total)),
        ("lines", str(mark.lines)),
    ])


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
    Compares the mark with the log and up to SAMPLE indexed rows (spread over
    the seqs) with what the log says of them now."""
    path = index_path(wsdir)
    if not os.path.exists(path):
        return []
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error as exc:
        return [("recall_index_damaged", f"the recall index cannot be opened: {exc}")]
    try:
        ok = db.execute("PRAGMA quick_check").fetchone()
        if not ok or ok[0] != "ok":
            return [("recall_index_damaged", f"the recall index fails its check: {ok}")]
        index = RecallIndex(wsdir)
        mark = index._mark(db)
        if mark.epoch != st.epoch or mark.upto > st.next_seq - 1:
            return [("recall_index_stale", "the recall index was built for another state of "
                     "the log (a rewrite or a lost tail since)")]
        if mark.layout == layout_of(st) and mark.segment in st.segments \
                and index._line_hash(mark) != mark.last_hash:
            return [("recall_index_stale", "the row the recall index ends at is not in the log")]
        rows = db.execute("SELECT seq, len FROM docs ORDER BY random() LIMIT ?", (SAMPLE,))
        for seq, length in rows.fetchall():
            row = read_row(seq)
            if row is None or hidden(row):
                return [("recall_index_disagrees", f"the recall index holds row {seq}, which "
                         "the log does not show")]
            if ranking.term_counts(row_text(row))[1] != length:
                return [("recall_index_disagrees", f"row {seq} differs from its index entry")]
    except sqlite3.Error as exc:
        return [("recall_index_damaged", f"the recall index cannot be read: {exc}")]
    finally:
        db.close()
    return []


def rebuild(wsdir: str, st: Any) -> Mark:
    """Delete the index and build it again from the log (under the lock)."""
    index = RecallIndex(wsdir)
    index.discard()
    try:
        return index.refresh(st, layout_of(st))
    finally:
        index.close()
