"""Forks that share their source's rows, on plain PostgreSQL (schema version 5).

A fork made on a plain PostgreSQL database copies no row of its prefix: one
row of ``tl_lineage`` -- ``(workspace, source, upto)`` -- says that the fork's
rows with ``seq <= upto`` are ``source``'s own rows (``tl_rows`` under the
source's id), and the fork stores only what follows: its origin event and its
own appends. Every read of a workspace's rows goes through ``rows_sql``: the
workspace's own rows UNION ALL its source's rows up to ``upto``, in one
statement (one snapshot). The two branches are each an index range scan on
``tl_rows``'s primary key (the source and ``upto`` come from two InitPlans on
``tl_lineage``'s primary key; with no lineage row they are NULL and the
second branch reads nothing), so a read of a fork costs what it costs on its
source. Batch ids (idempotent retries, the origin events) are read the same
way (``batches_sql``).

One source, one range, always: a fork of a fork that stops at or before its
source's ``upto`` refers to the same source; one that reaches past it refers
to the same source up to ``upto`` and copies the rows in between (the
intermediate fork's own rows up to the fork point: its own turns, the
"copied tail"). So ``source`` always holds the referenced rows as its own,
and no read follows more than one link.

What keeps the shared rows safe (the other side never loses a byte): the
referenced rows are immutable while a reference exists. Every rewrite of a
workspace -- reject, truncate, purge, repair, rebaseline -- and ``Store.delete``
first *materialises* (``materialise_forks``): each fork referring to rows the
rewrite may change (or to any row, for a delete) gets its own copy of them in
the rewrite's transaction, and its reference is dropped. A rewrite of a fork
that touches its shared prefix first copies that prefix in
(``materialise_own``). The copy costs what a fork cost before schema 4, and
only when a rewrite actually reaches shared rows. Appends never touch rows at
or below any reference (they go above the head), nor does ``rewind`` (an
appended boundary event).

Locks: a fork takes its source's head row lock (as every write of the source
does), then the head row lock of the workspace it will refer to when that is
another one, so a concurrent rewrite of that workspace, which materialises
its forks under its own head lock, either commits first (and the fork reads
the result) or sees the new reference. ``DELETE ... RETURNING`` on the
lineage row is the claim that makes two materialisations of one fork never
copy the same rows twice.

On Citus (schema version 6) forks are references too, colocated with their
source: a statement that reads two workspaces' rows is one task when both
ids hash into the same shard, so a fork's rows are stored under a *storage
key* -- its id, a ``/`` (which no workspace id holds) and a random salt,
chosen so that the key hashes into its source's shard (``citus_keys.py``) --
and its id holds only a pointer head row (``tl_head.alias``). The reference
is the same ``tl_lineage`` row, by keys; since Citus routes by a constant,
the source key is read when a handle first resolves its key and goes into
the statement as a literal (``link``), and the fork point is still read in
the statement (``upto`` NULL once a rewrite materialised the fork: the branch
reads nothing, and the fork's own copy answers). ``tl_forks`` indexes the
references by source, in the source's shard (a query by ``source`` alone on
``tl_lineage`` would go to every shard).
"""

from __future__ import annotations

from typing import Any

COLUMNS = "seq, batch_id, boundary, raw"
PG = "pg"  # the link on plain PostgreSQL: the source is read in the statement


def _ref(link: str, ws: str) -> tuple[str, str]:
    """(source, fork point) SQL of the workspace ``ws`` names, by ``link``:
    ``PG`` reads both from ``tl_lineage`` (two InitPlans); a literal (Citus)
    is the source key itself, which Citus prunes by, and the fork point is
    read for that source (NULL once the reference is gone)."""
    if link == PG:
        return (f"(SELECT source FROM tl_lineage WHERE workspace = {ws})",
                f"(SELECT upto FROM tl_lineage WHERE workspace = {ws})")
    return link, f"(SELECT upto FROM tl_lineage WHERE workspace = {ws} AND source = {link})"


def rows_sql(link: str | None, ws: str = "%(ws)s", where: str = "", order: str = "",
             limit: str = "") -> str:
    """A derived table ``(seq, batch_id, boundary, raw)`` of the rows of the
    workspace the placeholder ``ws`` names (its storage key), its own and
    (``link``: ``PG``, or on Citus the literal of its source's key; None: it
    has no source) its source's up to the fork point. ``where`` (over those columns), ``order``
    and ``limit`` are applied inside each branch, so each stays an ordered
    index range scan (PostgreSQL pulls no UNION ALL member with a WHERE clause
    up into the outer query, so an outer ORDER BY ... LIMIT alone would sort
    the whole prefix); the caller orders and limits the union again."""
    tail = (f" AND {where}" if where else "") + (f" ORDER BY {order}" if order else "") + (
        f" LIMIT {limit}" if limit else "")
    own = f"SELECT {COLUMNS} FROM tl_rows WHERE workspace = {ws}{tail}"
    if link is None:
        return f"({own})"
    source, upto = _ref(link, ws)
    return (f"(({own}) UNION ALL (SELECT {COLUMNS} FROM tl_rows WHERE workspace = "
            f"{source} AND seq <= {upto}{tail}))")


def batches_sql(link: str | None, ws: str = "%(ws)s", where: str = "") -> str:
    """A derived table ``(batch_id, first_seq, n)`` of the batches of the
    workspace ``ws`` names: its own and (``link``, as ``rows_sql``) its
    source's that start at or before the fork point."""
    tail = f" AND {where}" if where else ""
    own = f"SELECT batch_id, first_seq, n FROM tl_batches WHERE workspace = {ws}{tail}"
    if link is None:
        return f"({own})"
    source, upto = _ref(link, ws)
    return (f"(({own}) UNION ALL (SELECT batch_id, first_seq, n FROM tl_batches WHERE "
            f"workspace = {source} AND first_seq <= {upto}{tail}))")


def copy_rows(conn: Any, source: str, target: str, first: int, last: int) -> None:
    """Copy ``source``'s own rows and batches with ``first <= seq <= last``
    into ``target``, server-side."""
    args = {"s": source, "t": target, "lo": first, "hi": last}
    conn.execute(
        "INSERT INTO tl_rows (workspace, seq, batch_id, boundary, raw) SELECT %(t)s, seq, "
        "batch_id, boundary, raw FROM tl_rows WHERE workspace = %(s)s AND seq BETWEEN "
        "%(lo)s AND %(hi)s", args)
    conn.execute(
        "INSERT INTO tl_batches (workspace, batch_id, first_seq, n) SELECT %(t)s, batch_id, "
        "first_seq, n FROM tl_batches WHERE workspace = %(s)s AND first_seq BETWEEN %(lo)s "
        "AND %(hi)s ON CONFLICT (workspace, batch_id) DO NOTHING", args)


def materialise_forks(conn: Any, source: str, first: int | None = None,
                      citus: bool = False) -> list[str]:
    """Give every fork that refers to ``source``'s rows at or after ``first``
    (None: any) its own copy of them and drop the reference; the caller holds
    ``source``'s head row lock. Returns the forks (their storage keys). On
    Citus the forks are found in ``tl_forks`` (in ``source``'s shard), and
    each reference is claimed by deleting its ``tl_lineage`` row."""
    low = first if first is not None else -(1 << 62)
    if not citus:
        got = conn.execute(
            "DELETE FROM tl_lineage WHERE source = %s AND upto >= %s RETURNING workspace, upto",
            (source, low)).fetchall()
    else:
        got = []
        for (fork,) in conn.execute(
                "DELETE FROM tl_forks WHERE workspace = %s AND upto >= %s RETURNING fork",
                (source, low)).fetchall():
            claim = conn.execute(
                "DELETE FROM tl_lineage WHERE workspace = %s AND source = %s RETURNING upto",
                (fork, source)).fetchone()
            if claim is not None:
                got.append((fork, claim[0]))
    for fork, upto in got:
        copy_rows(conn, source, fork, -(1 << 62), int(upto))
    return [fork for fork, _ in got]


def materialise_own(conn: Any, workspace: str, first: int | None = None,
                    citus: bool = False, copy: bool = True) -> bool:
    """Copy the shared prefix of the fork ``workspace`` into its own rows when
    a rewrite may reach it (its ``upto`` at or after ``first``; None: always)
    and drop the reference (``copy`` false: a delete, which only drops it);
    the caller holds the fork's head row lock. Whether there was one."""
    low = first if first is not None else -(1 << 62)
    if citus:  # the index row first: the lock order of materialise_forks (no deadlock)
        ref = conn.execute("SELECT source FROM tl_lineage WHERE workspace = %s AND upto >= %s",
                           (workspace, low)).fetchone()
        if ref is None:
            return False
        conn.execute("DELETE FROM tl_forks WHERE workspace = %s AND fork = %s",
                     (ref[0], workspace))
    got = conn.execute(
        "DELETE FROM tl_lineage WHERE workspace = %s AND upto >= %s RETURNING source, upto",
        (workspace, low)).fetchone()
    if got is None:
        return False
    if copy:
        copy_rows(conn, got[0], workspace, -(1 << 62), int(got[1]))
    return True


def reference_of(conn: Any, workspace: str) -> tuple[str, int] | None:
    """The fork ``workspace``'s (source, upto), or None."""
    got = conn.execute("SELECT source, upto FROM tl_lineage WHERE workspace = %s",
                       (workspace,)).fetchone()
    return (str(got[0]), int(got[1])) if got is not None else None

