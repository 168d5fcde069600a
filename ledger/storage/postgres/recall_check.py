"""``check`` and ``repair`` of a PostgreSQL workspace's recall index
(``recall.py``): what ``verify`` reports of it, read-only, in the snapshot it
verifies the rows in.

The index is a projection, so everything found here is a *notice*, never
damage of the log (nothing stored is lost with it), and ``repair`` rebuilds
it (so does the next ranked search, for a stale one):

- ``recall_index_stale``: built by another version, for another epoch (a
  rewrite or a new floor since, which the next ranked search would rebuild
  anyway), past the
  head's next seq, or ending at a row the log no longer holds with the same
  bytes;
- ``recall_index_damaged``: its statistics disagree with its own tables (doc
  count and total length against the docs, the sum of document frequencies
  against the postings, a term id past the counter, a doc past its mark);
- ``recall_index_disagrees``: one of up to SAMPLE doc entries (spread at
  random) names a row the log does not show, or whose length or distinct
  terms differ from what the row's text gives now.
"""

from __future__ import annotations

from array import array
from typing import Any

from ledger.core import ranking
from ledger.core.bounds import LINE_CAP
from ledger.core.format import rows as fmt
from ledger.core.searchable import hidden, row_text
from ledger.storage.postgres.lineage import PG, rows_sql
from ledger.storage.postgres.recall import SWAP, VERSION, PgRecall, row_hash

SAMPLE = 64  # doc entries compared with the log by ``inspect``
ACTION = ("tledger repair {ws} rebuilds it (so does the next ranked search, for a stale "
          "one)")


def inspect(conn: Any, workspace: str, epoch: int, next_seq: int, floor: int = 0,
            link: str | None = PG) -> list[tuple[str, str]]:
    """(code, message) findings about the index against the head (``epoch``,
    ``next_seq``, the ``floor``'s seq) and the rows, read in ``conn``'s
    snapshot (module doc); ``link``: how a fork's rows include its source's
    (``lineage.rows_sql``); ``workspace`` is the key the rows are stored under."""
    mark = PgRecall(None, workspace).mark(conn)
    if mark is None:
        return []
    if mark.version != VERSION:
        return [("recall_index_stale", f"the recall index has format {mark.version}, this "
                 f"version reads {VERSION}")]
    if mark.epoch != epoch or mark.seen > next_seq or mark.floor != floor:
        return [("recall_index_stale", "the recall index was built for another state of the "
                 "log (a rewrite or a new privacy floor since)")]
    if mark.upto > 0:
        got = conn.execute(
            f"SELECT raw FROM {rows_sql(link, where='seq = %(seq)s')} t",
            {"ws": workspace, "seq": mark.upto}, binary=True).fetchone()
        if got is None or row_hash(bytes(got[0])) != mark.last_hash:
            return [("recall_index_stale", f"the row the recall index ends at ({mark.upto}) "
                     "is not in the log with the bytes it read")]
    docs, total, last = conn.execute(
        "SELECT count(*), coalesce(sum(len), 0), coalesce(max(seq), 0) FROM tl_recall_docs "
        "WHERE workspace = %s", (workspace,)).fetchone()
    if (int(docs), int(total)) != (mark.docs, mark.total) or int(last) > mark.upto:
        return [("recall_index_damaged", f"the recall index counts {mark.docs} rows of "
                 f"{mark.total} terms up to row {mark.upto}; its tables hold {docs} rows of "
                 f"{total} terms up to row {last}")]
    postings = conn.execute("SELECT count(*) FROM tl_recall_post WHERE workspace = %s",
                            (workspace,)).fetchone()[0]
    dfs, top = conn.execute("SELECT coalesce(sum(df), 0), coalesce(max(tid), 0) FROM "
                            "tl_recall_terms WHERE workspace = %s", (workspace,)).fetchone()
    if int(postings) != int(dfs) or int(top) >= mark.next_tid:
        return [("recall_index_damaged", f"the recall index's document frequencies add up to "
                 f"{dfs} but it holds {postings} postings (or a term id is past its counter)")]
    sample = conn.execute(
        "SELECT d.seq, d.len, d.tids, octet_length(r.raw), CASE WHEN octet_length(r.raw) <= "
        "%(cap)s THEN r.raw END FROM (SELECT seq, len, tids FROM tl_recall_docs WHERE "
        "workspace = %(ws)s ORDER BY random() LIMIT %(n)s) d LEFT JOIN LATERAL "
        + rows_sql(link, where="seq = d.seq") + " r ON true",
        {"cap": LINE_CAP, "ws": workspace, "n": SAMPLE}, binary=True).fetchall()
    for seq, length, blob, n, raw in sample:
        if n is not None and raw is None:
            continue  # a row longer than LINE_CAP: not read here
        row = fmt.decode_line(bytes(raw)) if raw is not None else None
        if row is None or row.get("seq") != seq or hidden(row):
            return [("recall_index_disagrees", f"the recall index holds row {seq}, which the "
                     "log does not show")]
        tfs, want = ranking.term_counts(row_text(row))
        pairs = array("I")
        pairs.frombytes(bytes(blob))
        if SWAP:
            pairs.byteswap()
        if want != length or len(pairs) != 2 * len(tfs):
            return [("recall_index_disagrees", f"row {seq} differs from its recall index "
                     "entry")]
    return []


def rebuild(db: Any, workspace: str, link: str | None) -> None:
    """Discard the index and build it again from the rows (``repair``)."""
    PgRecall(db, workspace, link).rebuild()


def exists(conn: Any, workspace: str) -> bool:
    return PgRecall(None, workspace).mark(conn) is not None
