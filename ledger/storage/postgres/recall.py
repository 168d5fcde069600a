"""The recall index of a PostgreSQL workspace: a projection of ``tl_rows`` for
ranked ``session_history`` search, never its source of truth (the tables and
why they are btree tables are in ``schema.py``).

It holds what the file engine's index holds (``ledger.storage.files.recall``),
computed by the same pure functions (``ledger.core.ranking``: terms, impact,
BM25 and the window context; ``ledger.core.searchable``: which rows are
searchable), so the two engines give the same candidates and the same scores
for the same history: for every searchable row its window, its length in
terms and its (term id, frequency) pairs; for every term its document
frequency and its postings ordered by impact (the BM25 frequency part at a
fixed length, rounded to thousandths), newest first among equals. A query
reads the best ``SCAN_ROWS / terms`` postings of each of its (at most
``MAX_TERMS``, rarest) terms and the doc entries of those rows: the work of a
call is bounded whatever the size of the history.

Maintenance is lazy: an append never touches these tables (its cost is
unchanged); the first ranked search after appends indexes the rows the index
has not seen (``catch_up``), in transactions of at most ``CHUNK_ROWS`` rows,
``CHUNK_BYTES`` of stored rows or ``CHUNK_POSTINGS`` postings, each ending at
a consistent mark, so a long build keeps its progress and never holds a lock
an append needs (it reads ``tl_rows``, locks only its own state row, and
writes only ``tl_recall_*``). The mark is the head's epoch, the head's next
seq when the index read it (``seen``: every row before it is indexed), the
last row read and an xxh3 of its bytes. A rewrite (reject, truncate, purge,
repair, rebaseline, a workspace deleted and made again) takes a new epoch, and
the next catch-up rebuilds the index; a last row that changed or vanished
behind the store's back does too. Rows at or before the floor, or after the
query's high-water mark, are never candidates (the SQL bounds them), and the
tool reads every row it returns again from ``tl_rows`` in its own snapshot.

The index is written with ``synchronous_commit`` off: it is a projection, and
the WAL's order means a server crash can only lose its newest chunks, never
keep index entries for rows that were lost.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import xxhash

from ledger.core import ranking
from ledger.core.errors import CommitFailed, CommitUncertain, Unavailable
from ledger.core.format import rows as fmt
from ledger.core.searchable import indexed_terms
from ledger.storage.postgres.lineage import PG, rows_sql

VERSION = 2  # of what the tables hold; another value is rebuilt (2: from the floor on)
CHUNK_ROWS = 2_000  # rows per committed chunk of a catch-up, at most
CHUNK_BYTES = 8 << 20  # stored bytes per chunk, at most (one row more when it is larger)
CHUNK_POSTINGS = 200_000  # postings per chunk, at most (checked after each row)
VALUES_ROWS = 1_000  # rows per multi-row VALUES statement
SWAP = sys.byteorder == "big"  # the (term id, frequency) pairs are stored little-endian
TABLES = ("tl_recall_post", "tl_recall_docs", "tl_recall_terms", "tl_recall_echo")
STATE = "version, epoch, seen, upto, win, last_hash, docs, total, next_tid, floor"
_NSTATE = len(STATE.split(", "))
_STATE_OF_S = ", ".join("s." + c for c in STATE.split(", "))  # STATE read through alias s
# The head and the index's state of a workspace in one row (state NULL: no index yet).
_HEAD_WITH_MARK = ("FROM tl_head h LEFT JOIN tl_recall_state s ON s.workspace = h.workspace "
                   "WHERE h.workspace = %s")
# The index is a projection: no WAL flush wait (see the module doc); on Citus
# the setting goes along to the worker.
SYNC_OFF = ("SET LOCAL citus.propagate_set_commands = 'local'; "
            "SET LOCAL synchronous_commit TO off")


# A ranked search's statements (the postings, the neighbours, the rows read
# back) are the same few texts every call, prepared by psycopg after a few
# runs; PostgreSQL's default plans them again for each call's values for a
# while and whenever it guesses that pays. The plan does not depend on the
# values (every one is an index scan by workspace and term or seq), so a
# generic plan saves that work: at 1 GiB about a tenth of the server's CPU
# a query (bench/RESULTS.md, issue 31, catchup3). For the call's
# transaction only; not on Citus, whose distributed planner plans prepared
# statements its own way.
GENERIC_PLANS = "SET LOCAL plan_cache_mode = force_generic_plan"


@dataclass(frozen=True)
class Mark:
    """How far the index has read, and the collection's statistics."""

    version: int
    epoch: int
    seen: int  # the head's next seq when read: every row before it is indexed
    upto: int  # the last row read (0: none)
    win: int  # the window that row is in
    last_hash: int  # xxh3-64 of that row's stored bytes (as a signed bigint)
    docs: int
    total: int
    next_tid: int
    floor: int  # the seq of the floor it starts at (0: none)

    def covers(self, epoch: int, next_seq: int, floor: int) -> bool:
        """Whether it answers for a head at ``epoch`` with ``next_seq`` and
        its floor at ``floor``."""
        return (self.version == VERSION and self.epoch == epoch and self.seen >= next_seq
                and self.floor == floor)


def row_hash(raw: bytes) -> int:
    h = xxhash.xxh3_64_intdigest(raw)
    return h - (1 << 64) if h >= 1 << 63 else h


def _mark(got: Iterable[Any] | None) -> Mark | None:
    return None if got is None else Mark(*(int(v) for v in got))


# A query's rows, as the file engine reads them (``files.recall._NEAR_SQL``):
# the hits, the rows just before and after each within (after, high], the
# same for those, and the entries of every row named, with (prev, next) for
# the rows that may be ranked. Only rows still in ``tl_rows`` count: an index
# that claims to be current but still holds a removed row (a crash or a bug:
# the tests' ``pretend_current``) never lends that row's words to another.
# Every table is read for one workspace (on Citus: one shard).
def _live(link: str | None) -> str:
    return "EXISTS (SELECT 1 FROM " + rows_sql(link, where="seq = {s}") + " r)"


# The two rows before and the two after each hit: the first of each pair is
# the hit's neighbour, the second that neighbour's other neighbour (the hit
# is its nearest on the near side: no indexed live row lies between them),
# so one ordered scan per side gives what a probe per row and side gave.
_TWO = ("ARRAY(SELECT d.seq FROM tl_recall_docs d WHERE d.workspace = %(ws)s AND d.seq < h.s "
        "AND d.seq > %(after)s AND {live_d} ORDER BY d.seq DESC LIMIT 2) AS ps, "
        "ARRAY(SELECT d.seq FROM tl_recall_docs d WHERE d.workspace = %(ws)s AND d.seq > h.s "
        "AND d.seq <= %(high)s AND {live_d} ORDER BY d.seq LIMIT 2) AS ns")


@lru_cache(maxsize=256)  # a key per source on Citus (keys.py): bounded
def _near_sql(link: str | None) -> str:
    """A query's rows (the comment above); ``link``: a fork's rows include
    its source's (``lineage.py``). ``l1``: each live hit with its (prev,
    next); ``l2``: each neighbour that is no hit with its own."""
    live = _live(link)
    two = _TWO.replace("{live_d}", live.format(s="d.seq"))
    return (  # no CTE column lists: Citus's planner loses them
    "WITH h AS (SELECT x.s FROM unnest(%(hits)s::bigint[]) AS x(s) WHERE "
    + live.format(s="x.s") + "), "
    "nb AS (SELECT h.s, " + two + " FROM h), "
    "l1 AS (SELECT nb.s, nb.ps[1] AS p, nb.ns[1] AS n FROM nb), "
    "r AS (SELECT nb.ps[1] AS s, nb.ps[2] AS p, nb.s AS n FROM nb WHERE nb.ps[1] IS NOT NULL "
    "UNION ALL SELECT nb.ns[1], nb.s, nb.ns[2] FROM nb WHERE nb.ns[1] IS NOT NULL), "
    "l2 AS (SELECT DISTINCT ON (r.s) r.s, r.p, r.n FROM r WHERE NOT EXISTS "
    "(SELECT 1 FROM h WHERE h.s = r.s) ORDER BY r.s, r.p, r.n), "
    "l AS (SELECT l1.s, l1.p, l1.n FROM l1 UNION ALL SELECT l2.s, l2.p, l2.n FROM l2), "
    "w AS (SELECT l.s FROM l UNION SELECT l.p FROM l WHERE l.p IS NOT NULL "
    "UNION SELECT l.n FROM l WHERE l.n IS NOT NULL) "
    "SELECT d.seq, d.win, d.len, d.tids, l.p, l.n FROM w "
    "JOIN tl_recall_docs d ON d.workspace = %(ws)s AND d.seq = w.s LEFT JOIN l ON l.s = w.s "
    "ORDER BY d.seq")


class _Raced(Exception):
    """A rewrite committed between two statements of one chunk."""


class PgRecall:
    """The recall index of one workspace (module doc)."""

    def __init__(self, db: Any, workspace: str, link: str | None = PG,
                 handle: Any = None) -> None:
        self.db = db
        self._workspace = workspace
        self._link = link
        self._handle = handle  # a workspace handle: its key and link (keys.py)

    @property
    def workspace(self) -> str:
        """The key the workspace's rows and index are stored under."""
        return self._handle.key if self._handle is not None else self._workspace

    @property
    def shared(self) -> str | None:
        """How a fork's rows include its source's (``lineage.rows_sql``)."""
        return self._handle.link if self._handle is not None else self._link

    # -- the state -----------------------------------------------------------------

    def mark(self, conn: Any) -> Mark | None:
        got = conn.execute(f"SELECT {STATE} FROM tl_recall_state WHERE workspace = %s",
                           (self.workspace,)).fetchone()
        return _mark(got)

    def current(self, conn: Any) -> tuple[int, int, int, Mark | None] | None:
        """The head's epoch, next seq and floor with the index's mark, in one
        statement (one snapshot); None when the workspace has no head row."""
        got = conn.execute(
            f"SELECT h.epoch, h.next_seq, coalesce(h.floor_seq, 0), {_STATE_OF_S} "
            f"{_HEAD_WITH_MARK}", (self.workspace,)).fetchone()
        if got is None:
            return None
        return (int(got[0]), int(got[1]), int(got[2]),
                None if got[3] is None else _mark(got[3:]))

    def head_and_mark(self, conn: Any) -> tuple[tuple[Any, ...], Mark | None] | None:
        """The head row under the key (its ``HEAD_COLUMNS`` and alias: what
        ``PgWorkspace.head_in`` reads) with the index's mark, in one
        statement; None when there is no head row under the key."""
        got = conn.execute(
            f"SELECT h.next_seq, h.epoch, h.window_seq, h.window_reason, h.floor_seq, h.alias, "
            f"{_STATE_OF_S} {_HEAD_WITH_MARK}", (self.workspace,)).fetchone()
        if got is None:
            return None
        return tuple(got[:6]), None if got[6] is None else _mark(got[6:])

    # -- bringing it up to date ------------------------------------------------------

    def catch_up(self, now: tuple[int, int, int, Mark | None] | None = None) -> Mark | None:
        """Index every row the index has not seen (rebuilding it when the log
        was rewritten), one committed chunk at a time; returns the mark, None
        when the workspace has no history. ``now``: the head's epoch, next
        seq and floor with the mark, as ``current`` gives them, when the
        caller read them already (nothing is read again when the index
        covers them)."""
        if now is None:
            with self.db.read("ranked search") as conn:
                now = self.current(conn)
        if now is None:
            return None
        epoch, next_seq, floor, mark = now
        if mark is not None and mark.covers(epoch, next_seq, floor):
            return mark
        races = 0
        while True:
            try:
                mark, more = self._chunk()
            except (CommitFailed, CommitUncertain) as exc:
                if not _is_race(exc) or races >= 8:
                    raise Unavailable(f"{self.db.where}: bringing the recall index of "
                                      f"{self.workspace!r} up to date failed: {exc}") from exc
                races += 1
                continue
            except _Raced:
                races += 1
                if races > 8:
                    raise Unavailable("the history kept changing while the recall index was "
                                      "brought up to date; retry") from None
                continue
            if not more:
                return mark

    def rebuild(self) -> Mark | None:
        """Discard the index and build it again from ``tl_rows``."""
        with self.db.write(f"discard the recall index of {self.workspace!r}") as conn:
            conn.execute(SYNC_OFF)
            self._lock(conn)
            self._discard(conn, 0, 0)
        return self.catch_up()

    def _lock(self, conn: Any) -> Mark:
        """The state row, locked (created when missing): catch-ups of one
        workspace run one chunk at a time."""
        sql = f"SELECT {STATE} FROM tl_recall_state WHERE workspace = %s FOR UPDATE"
        got = _mark(conn.execute(sql, (self.workspace,)).fetchone())
        if got is None:
            conn.execute(
                f"INSERT INTO tl_recall_state (workspace, {STATE}) VALUES "
                "(%s, %s, 0, 0, 0, 0, 0, 0, 0, 1, 0) ON CONFLICT (workspace) DO NOTHING",
                (self.workspace, VERSION))
            got = _mark(conn.execute(sql, (self.workspace,)).fetchone())
        assert got is not None
        return got

    def _discard(self, conn: Any, epoch: int, floor: int) -> Mark:
        """Empty the index; it is built again from the floor's row (nothing
        before the floor, not even statistics)."""
        for table in TABLES:
            conn.execute(f"DELETE FROM {table} WHERE workspace = %s", (self.workspace,))
        mark = Mark(VERSION, epoch, floor, 0, 0, 0, 0, 0, 1, floor)
        self._save(conn, mark)
        return mark

    def _save(self, conn: Any, mark: Mark) -> None:
        conn.execute(
            "UPDATE tl_recall_state SET version = %s, epoch = %s, seen = %s, upto = %s, "
            "win = %s, last_hash = %s, docs = %s, total = %s, next_tid = %s, floor = %s "
            "WHERE workspace = %s", (*mark.__dict__.values(), self.workspace))

    def _chunk(self) -> tuple[Mark | None, bool]:
        """One transaction of a catch-up: returns the mark and whether rows
        remain beyond it."""
        ws = self.workspace
        with self.db.write(f"bring the recall index of {ws!r} up to date") as conn:
            conn.execute(SYNC_OFF)
            mark = self._lock(conn)
            head = conn.execute("SELECT epoch, next_seq, coalesce(floor_seq, 0) FROM tl_head "
                                "WHERE workspace = %s", (ws,)).fetchone()
            if head is None:  # the workspace is gone: so is its index
                self._discard(conn, 0, 0)
                return None, False
            epoch, next_seq, floor = int(head[0]), int(head[1]), int(head[2])
            if mark.covers(epoch, next_seq, floor):
                return mark, False  # another reader did it meanwhile
            if mark.version != VERSION or mark.epoch != epoch or mark.floor != floor:
                mark = self._discard(conn, epoch, floor)
            start = mark.upto if mark.upto > 0 else mark.seen
            lengths = conn.execute(
                "SELECT h.epoch, h.next_seq, r.seq, octet_length(r.raw) FROM tl_head h "
                "LEFT JOIN LATERAL " + rows_sql(
                    self.shared, where="seq >= %(start)s AND seq < h.next_seq", order="seq",
                    limit="%(n)s") + " r ON true WHERE h.workspace = %(ws)s ORDER BY r.seq "
                "LIMIT %(n)s", {"start": start, "ws": ws, "n": CHUNK_ROWS}).fetchall()
            if not lengths or int(lengths[0][0]) != epoch:
                raise _Raced()
            next_seq = int(lengths[0][1])
            # At least one new row per chunk (the row the index ended at, read
            # again to check its bytes, is not counted).
            free = 1 if mark.upto > 0 and lengths[0][2] == mark.upto else 0
            picked, size = 0, 0
            for _, _, seq, n in lengths:
                if seq is None or (picked > free and size + n > CHUNK_BYTES):
                    break
                picked += 1
                size += n if picked > free else 0
            last = lengths[picked - 1][2] if picked else None
            rows: list[tuple[int, bytes]] = []
            if last is not None:
                got = conn.execute(
                    "SELECT h.epoch, r.seq, r.raw FROM tl_head h LEFT JOIN LATERAL "
                    + rows_sql(self.shared, where="seq >= %(start)s AND seq <= %(last)s")
                    + " r ON true WHERE h.workspace = %(ws)s ORDER BY r.seq",
                    {"start": start, "last": last, "ws": ws}, binary=True).fetchall()
                if not got or int(got[0][0]) != epoch:
                    raise _Raced()
                rows = [(int(seq), bytes(raw)) for _, seq, raw in got if seq is not None]
            if mark.upto > 0:
                if not rows or rows[0][0] != mark.upto or row_hash(rows[0][1]) != mark.last_hash:
                    # The row the index ended at changed or vanished without a
                    # new epoch (behind the store's back): start again.
                    return self._discard(conn, epoch, floor), True
                rows = rows[1:]
            mark, stopped = self._index(conn, mark, rows)
            real = sum(1 for r in lengths if r[2] is not None)
            if stopped is not None:  # the postings bound: go on after that row
                seen = stopped + 1
            elif picked == real and real < CHUNK_ROWS:
                seen = next_seq  # every row before the head's next seq is read
            else:  # picked > 0 here: with no row picked, real is 0 too (the branch above)
                assert last is not None
                seen = int(last) + 1
            mark = Mark(mark.version, epoch, max(seen, mark.seen), mark.upto, mark.win,
                        mark.last_hash, mark.docs, mark.total, mark.next_tid, mark.floor)
            self._save(conn, mark)
            return mark, mark.seen < next_seq

    def _index(self, conn: Any, mark: Mark, rows: list[tuple[int, bytes]]
               ) -> tuple[Mark, int | None]:
        """Index ``rows`` (in seq order) into the tables. Returns the new mark
        and, when it stopped early (CHUNK_POSTINGS postings), the last seq read."""
        ws = self.workspace
        decoded = [(seq, raw, fmt.decode_line(raw)) for seq, raw in rows]
        results = [pid for _, _, row in decoded for p in _parts(row)
                   if p.get("type") == "tool_result" and isinstance(pid := p.get("id"), str)]
        calls: set[str] = set()
        if results:
            calls = {c for (c,) in conn.execute(
                "SELECT call FROM tl_recall_echo WHERE workspace = %s AND call = ANY(%s)",
                (ws, sorted(set(results)))).fetchall()}
        upto, win, last_hash = mark.upto, mark.win, mark.last_hash
        new_calls: list[str] = []
        doc_rows: list[tuple[int, int, int, bytes]] = []
        counts: list[tuple[int, dict[str, int], int]] = []  # (seq, tfs, length)
        postings = 0
        stopped: int | None = None
        for seq, raw, row in decoded:
            upto = seq
            last_hash = row_hash(raw)
            if row is None or row.get("seq") != seq:
                continue  # unreadable rows are never results (check reports them)
            if row.get("kind") == "reset" or fmt.readable_row_is_reset(raw, row):
                win = seq
                continue
            indexed = indexed_terms(row, calls, new_calls, len(raw))
            if indexed is None:
                continue
            tfs, length = indexed
            counts.append((seq, dict(tfs), length))
            doc_rows.append((seq, win, length, b""))
            postings += len(tfs)
            if postings >= CHUNK_POSTINGS and seq != decoded[-1][0]:
                stopped = seq
                break
        tids = self._tids(conn, mark, counts)
        next_tid = max([mark.next_tid, *(t + 1 for t in tids.values())])
        df: dict[str, int] = {}
        with conn.cursor().copy("COPY tl_recall_post (workspace, tid, imp, seq, tf) "
                                "FROM STDIN") as copy:
            for i, (seq, freqs, length) in enumerate(counts):
                pairs = array("I")
                for t, n in freqs.items():
                    tid = tids[t]
                    df[t] = df.get(t, 0) + 1
                    copy.write_row((ws, tid, round(ranking.impact(n, length) * 1000), seq, n))
                    pairs.append(tid)
                    pairs.append(min(n, 0xFFFFFFFF))
                if SWAP:
                    pairs.byteswap()
                s, w, ln, _ = doc_rows[i]
                doc_rows[i] = (s, w, ln, pairs.tobytes())
        with conn.cursor().copy("COPY tl_recall_docs (workspace, seq, win, len, tids) "
                                "FROM STDIN") as copy:
            for seq, w, ln, blob in doc_rows:
                copy.write_row((ws, seq, w, ln, blob))
        terms = sorted(df)
        for i in range(0, len(terms), VALUES_ROWS):
            part = terms[i : i + VALUES_ROWS]
            conn.execute(
                "INSERT INTO tl_recall_terms (workspace, term, tid, df) VALUES "
                + ", ".join(["(%s, %s, %s, %s)"] * len(part))
                + " ON CONFLICT (workspace, term) DO UPDATE SET df = tl_recall_terms.df + "
                "EXCLUDED.df", [v for t in part for v in (ws, t, tids[t], df[t])])
        for i in range(0, len(new_calls), VALUES_ROWS):
            part = new_calls[i : i + VALUES_ROWS]
            conn.execute("INSERT INTO tl_recall_echo (workspace, call) VALUES "
                         + ", ".join(["(%s, %s)"] * len(part))
                         + " ON CONFLICT DO NOTHING", [v for c in part for v in (ws, c)])
        docs = mark.docs + len(counts)
        total = mark.total + sum(length for _, _, length in counts)
        return Mark(VERSION, mark.epoch, mark.seen, upto, win, last_hash, docs, total,
                    next_tid, mark.floor), stopped

    def _tids(self, conn: Any, mark: Mark, counts: list[tuple[int, dict[str, int], int]]
              ) -> dict[str, int]:
        """Each term's id: the index's, else a new one."""
        wanted = sorted({t for _, tfs, _ in counts for t in tfs})
        known: dict[str, int] = {}
        if wanted and mark.next_tid > 1:
            known = {t: int(i) for t, i in conn.execute(
                "SELECT term, tid FROM tl_recall_terms WHERE workspace = %s AND term = ANY(%s)",
                (self.workspace, wanted)).fetchall()}
        nxt = mark.next_tid
        for t in wanted:
            if t not in known:
                known[t] = nxt
                nxt += 1
        return known

    # -- answering ---------------------------------------------------------------------

    def lookup(self, conn: Any, query: ranking.Query
               ) -> tuple[Mark | None, dict[str, tuple[int, int]]]:
        """The mark and each query term's (id, document frequency), in one
        statement; on PostgreSQL (not Citus) sent in the same round trip as
        ``GENERIC_PLANS`` for the rest of the call's transaction."""
        sql = (f"SELECT {_STATE_OF_S}, t.term, t.tid, t.df "
               "FROM tl_recall_state s LEFT JOIN tl_recall_terms t ON t.workspace = "
               "s.workspace AND t.term = ANY(%s) WHERE s.workspace = %s")
        args = (list(query.terms), self.workspace)
        if self.db.citus:
            got = conn.execute(sql, args).fetchall()
        else:
            with conn.pipeline():
                conn.execute(GENERIC_PLANS)
                cur = conn.execute(sql, args)
            got = cur.fetchall()
        if not got:
            return None, {}
        terms = {t: (int(tid), int(n)) for *_, t, tid, n in got if t is not None and n > 0}
        return _mark(got[0][:_NSTATE]), terms

    def candidates(
        self, conn: Any, mark: Mark, query: ranking.Query, after: int, high: int,
        window: int | None, found_terms: dict[str, tuple[int, int]],
    ) -> list[tuple[int, int, float, tuple[int, int]]]:
        """The ranked candidates (seq, window, score, (0, 0)), best first, read
        in ``conn``'s snapshot (``found_terms`` from ``lookup`` there): for each
        query term (the rarest MAX_TERMS) its best postings, SCAN_ROWS in all,
        with seq in (after, high], their doc entries, then ``ranking.rank`` (as
        ``files.recall.candidates``)."""
        ws = self.workspace
        dfs = {t: found_terms[t][1] for t in query.terms if t in found_terms}
        if not dfs:
            return []
        kept, per_term, examine = ranking.postings_plan(dfs)
        if window is not None:  # a window is the seq range up to the next boundary
            after = max(after, window)
            nxt = conn.execute(
                "SELECT min(seq) FROM " + rows_sql(
                    self.shared, where="boundary IS NOT NULL AND seq > %(win)s", order="seq",
                    limit="1") + " t", {"ws": ws, "win": window}).fetchone()
            if nxt and nxt[0] is not None:
                high = min(high, int(nxt[0]) - 1)
        one = ("(SELECT tid, seq, tf FROM (SELECT tid, imp, seq, tf FROM tl_recall_post "
               "WHERE workspace = %s AND tid = %s ORDER BY imp DESC, seq DESC LIMIT %s) e "
               "WHERE seq > %s AND seq <= %s ORDER BY imp DESC, seq DESC LIMIT %s)")
        params: list[Any] = []
        for t in kept:
            params += [ws, found_terms[t][0], examine, after, high, per_term]
        term_of = {found_terms[t][0]: t for t in kept}
        found: dict[int, dict[str, int]] = {}
        entries: dict[int, tuple[int, int, bytes]] = {}
        taken: dict[int, int] = {}
        for tid, seq, tf, win, length, blob in conn.execute(
                "SELECT p.tid, p.seq, p.tf, d.win, d.len, d.tids FROM ("
                + " UNION ALL ".join([one] * len(kept)) + ") p JOIN tl_recall_docs d "
                "ON d.workspace = %s AND d.seq = p.seq", [*params, ws], binary=True).fetchall():
            seq = int(seq)
            tfs = found.get(seq)
            if tfs is None:  # the row's entry comes with each of its postings: kept once
                found[seq] = tfs = {}
                entries[seq] = (int(win), int(length), blob)
            tfs[term_of[tid]] = int(tf)
            taken[tid] = taken.get(tid, 0) + 1
        if not found:
            return []
        # The frequencies a row's postings did not give come from its entry,
        # for the terms whose postings in range were not all read.
        term_of = {i: t for i, t in term_of.items()
                   if not ranking.complete(dfs[t], taken.get(i, 0), per_term, examine)}
        keys = _keys(term_of)
        by: dict[int, ranking.Doc] = {}
        for seq in sorted(entries):
            by[seq] = _doc(seq, *entries[seq], found, keys, len(kept))
        corpus = ranking.Corpus(mark.docs, mark.total, dfs)
        q = ranking.Query(tuple(kept), query.phrases)
        stage = ranking.widen(list(by.values()), q, corpus)
        for seq, win, length, blob, prev, nxt in conn.execute(
                _near_sql(self.shared), {"ws": ws, "hits": sorted(stage.wide), "after": after,
                            "high": high}, binary=True).fetchall():
            d = by.get(seq)
            if d is None:
                d = by[seq] = _doc(int(seq), int(win), int(length), blob, found, keys,
                                   len(kept))
            if prev or nxt:
                d.prev, d.next = int(prev or 0), int(nxt or 0)
        docs = [by[s] for s in sorted(by)]
        return [(s, by[s].window, score, (0, 0))
                for s, score in ranking.rank(docs, q, corpus, found, stage=stage)]


def _keys(term_of: dict[int, str]) -> list[tuple[bytes, str]]:
    """Each term id as its bytes in a docs entry (little-endian ``array("I")``)
    with its term: what ``_doc`` looks for in an entry."""
    return [(tid.to_bytes(4, "little"), term) for tid, term in term_of.items()
            if 0 <= tid <= 0xFFFFFFFF]


def _doc(seq: int, win: int, length: int, blob: bytes, found: dict[int, dict[str, int]],
         keys: list[tuple[bytes, str]], nterms: int) -> ranking.Doc:
    """What ranking needs of one row: its frequencies of the query terms (from
    its postings in ``found``, the rest from its entry's pairs: each wanted
    term id its postings did not give searched for in C at a pair's start,
    the last such pair counts)."""
    tfs = found.get(seq)
    if tfs is None:
        tfs = {}
    if keys and len(tfs) < nterms:
        raw = bytes(blob)
        if len(raw) % 8:
            raise Unavailable(f"the recall index entry of row {seq} is {len(raw)} bytes, not "
                              "whole (term id, frequency) pairs: the index is damaged "
                              "(`tledger check` reports it, `repair` rebuilds it)")
        for key, term in keys:
            if term in tfs:  # its postings gave it (a row's terms are distinct in its entry)
                continue
            at = raw.rfind(key)
            while at >= 0 and at % 8:
                at = raw.rfind(key, 0, at + 3)
            if at >= 0:
                tfs[term] = int.from_bytes(raw[at + 4 : at + 8], "little")
    return ranking.Doc(seq, win, length, tfs)


def _parts(row: dict[str, Any] | None) -> list[dict[str, Any]]:
    parts = row.get("parts") if row is not None else None
    return [p for p in parts if isinstance(p, dict)] if isinstance(parts, list) else []


def _is_race(exc: BaseException) -> bool:
    """A failure another catch-up of the same workspace caused (a duplicate
    key when two built the same rows before the state row existed, a
    serialization failure, a deadlock): retried."""
    cause = exc.__cause__
    state = getattr(cause, "sqlstate", None)
    return state in ("23505", "40001", "40P01")
