"""The PostgreSQL engine's tables, in one place, with the reason for each choice.

``tl_rows`` -- one row per transcript row:

- ``(workspace, seq)`` is the primary key. Workspace leads every key and every
  query names one workspace, so a Citus cluster can distribute every table by
  ``workspace`` (colocated) and keep each query on one shard (docs/how-to/citus.md).
- ``raw bytea`` is the stored line exactly as the file engine frames it (JSON
  body with its ``_c`` xxhash checksum, no newline): unknown fields, key order
  and the bytes of imports survive unchanged, and ``check`` verifies each row
  with the same function the file engine uses. ``bytea``, not ``jsonb``:
  jsonb would reorder keys and drop duplicates.
- ``batch_id`` keeps a batch's rows together for ``truncate_after`` and the
  idempotency table.
- ``boundary`` is the boundary projection: ``manual`` / ``rollover`` /
  ``compaction`` on a reset row, else NULL, decided when the batch is written
  (``ledger.core.windows.batch_boundaries``). The partial index on it finds the
  newest boundary and any window's start without reading other rows, so the
  provider view reads O(window) rows by index.

``tl_head`` -- one row per workspace, the writer lock and the state: next seq,
epoch, newest boundary (window) and newest manual reset (floor). Every write
transaction takes ``SELECT ... FOR UPDATE`` on it first, so seqs are assigned
gap-free and commit order equals seq order: a reader polling ``after_seq``
never skips a row that commits later with a lower seq.

``tl_batches`` -- (workspace, batch_id) -> first seq and row count, unique: a
retry with the same batch id finds its batch by index, whatever its age (the
file engine looks back 1 MiB).

``tl_quarantine`` -- what rewrites take out of the log (truncated rows), with
the reason, kept until purged.

``tl_quarantine.id`` is assigned by the engine (the workspace's largest id
plus one, under the head row's lock), never by the ``bigserial`` sequence of
the column's default: an INSERT ... SELECT with ``nextval()`` in it cannot run
on one Citus shard (the coordinator would pull the rows through itself).

``tl_recall_*`` (schema version 2) -- the recall index of ranked
``session_history`` search, a projection of ``tl_rows`` that is never its
source of truth (``recall.py`` says how it is kept and read):
``tl_recall_state`` (one row per workspace: how far the index has read and
the collection's statistics; its row lock serializes catch-ups),
``tl_recall_terms`` (each term's id and document frequency),
``tl_recall_docs`` (each searchable row's window, length in terms and
(term id, frequency) pairs), ``tl_recall_post`` (each term's postings, keyed
so that a backward scan reads them best impact first, newest first among
equals; its columns in the order that wastes no alignment padding: one row
per posting is most of the index) and ``tl_recall_echo`` (the ids of
``session_history``'s own calls).
Btree tables, not ``tsvector`` + GIN: the ranking needs each term's few best
postings by BM25 impact (GIN returns every matching row, so work would grow
with the history) and the same terms, statistics and candidates as the file
engine's index, so both engines rank alike.

``tl_lineage`` (schema version 5) -- one row per fork that shares its
source's rows: its rows up to ``upto`` are ``source``'s own (``lineage.py`` says
how reads union them and how sharing survives rewrites and deletes); indexed
by ``source`` too, for the rewrites that must find a workspace's forks.

``tl_head.alias`` and ``tl_forks`` (schema version 6) -- forks by reference
on Citus (``keys.py``): a fork made there is stored under a key that hashes
into its source's shard, and its id's head row is a pointer whose ``alias``
is that key (NULL on every other head row, and on plain PostgreSQL);
``tl_forks`` lists each source's forks in the source's shard (on Citus a
query by ``tl_lineage.source`` would go to every shard; plain PostgreSQL uses
the index and leaves ``tl_forks`` empty).

``tl_schema`` -- the schema version. A database written by a newer version of
the package refuses to open (``FormatError``), like the file engine's FORMAT.
An older version is upgraded when a store opens it, in one transaction under
the schema lock: version 1 databases get the (empty) recall tables, version 2
ones the recall state's ``floor`` column (the index then rebuilds from the
floor, its format being older), version 3 ones the (empty) vector tables,
version 4 ones the (empty) ``tl_lineage`` table (their forks stay the full
copies they are), version 5 ones ``tl_head.alias`` and the (empty)
``tl_forks`` (on Citus, the forks made before stay the full copies they
are; on plain PostgreSQL nothing else changes), and the index is built
lazily by the first ranked search, never at the upgrade.

On a database with the ``citus`` extension the tables are created
distributed, in the same transaction (``citus.py``): the four workspace
tables hash-distributed by ``workspace`` and colocated with ``tl_rows``,
``tl_schema`` a reference table. A plain schema found on a Citus database is
refused until ``tledger db distribute`` converts it.
"""

from __future__ import annotations

from typing import Any

from ledger.core.errors import FormatError

SCHEMA_VERSION = 6  # 2: the recall tables (tl_recall_*); 3: tl_recall_state.floor;
# 4: the semantic channel's vectors (tl_vec_state, tl_vec: ``vectors.py``); 5: tl_lineage;
# 6: tl_head.alias and tl_forks (forks by reference on Citus: ``keys.py``)

# Taken while creating the tables: concurrent first connections must not race
# CREATE TABLE IF NOT EXISTS (it is not atomic against itself).
SCHEMA_LOCK_KEY = 0x746C_6564_6765_72  # "tledger"

DDL = """
CREATE TABLE IF NOT EXISTS tl_schema (
    version integer NOT NULL
);
CREATE TABLE IF NOT EXISTS tl_head (
    workspace   text PRIMARY KEY,
    next_seq    bigint NOT NULL,
    epoch       bigint NOT NULL,
    window_seq  bigint NOT NULL DEFAULT 0,
    window_reason text,
    floor_seq   bigint,
    created_ms  bigint NOT NULL,
    updated_ms  bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS tl_rows (
    workspace text NOT NULL,
    seq       bigint NOT NULL,
    batch_id  text NOT NULL,
    boundary  text,
    raw       bytea NOT NULL,
    PRIMARY KEY (workspace, seq)
);
CREATE INDEX IF NOT EXISTS tl_rows_boundaries ON tl_rows (workspace, seq)
    WHERE boundary IS NOT NULL;
CREATE TABLE IF NOT EXISTS tl_batches (
    workspace text NOT NULL,
    batch_id  text NOT NULL,
    first_seq bigint NOT NULL,
    n         integer NOT NULL,
    PRIMARY KEY (workspace, batch_id)
);
CREATE TABLE IF NOT EXISTS tl_quarantine (
    workspace text NOT NULL,
    id        bigserial,
    ts_ms     bigint NOT NULL,
    seq       bigint,
    reason    text NOT NULL,
    raw       bytea NOT NULL,
    PRIMARY KEY (workspace, id)
);
CREATE TABLE IF NOT EXISTS tl_recall_state (
    workspace text PRIMARY KEY,
    version   integer NOT NULL,
    epoch     bigint NOT NULL,
    seen      bigint NOT NULL,
    upto      bigint NOT NULL,
    win       bigint NOT NULL,
    last_hash bigint NOT NULL,
    docs      bigint NOT NULL,
    total     bigint NOT NULL,
    next_tid  integer NOT NULL,
    floor     bigint NOT NULL DEFAULT 0
);
ALTER TABLE tl_recall_state ADD COLUMN IF NOT EXISTS floor bigint NOT NULL DEFAULT 0;
CREATE TABLE IF NOT EXISTS tl_recall_terms (
    workspace text NOT NULL,
    term      text NOT NULL,
    tid       integer NOT NULL,
    df        integer NOT NULL,
    PRIMARY KEY (workspace, term)
);
CREATE TABLE IF NOT EXISTS tl_recall_docs (
    workspace text NOT NULL,
    seq       bigint NOT NULL,
    win       bigint NOT NULL,
    len       integer NOT NULL,
    tids      bytea NOT NULL,
    PRIMARY KEY (workspace, seq)
);
CREATE TABLE IF NOT EXISTS tl_recall_post (
    seq       bigint NOT NULL,
    tid       integer NOT NULL,
    imp       integer NOT NULL,
    tf        integer NOT NULL,
    workspace text NOT NULL,
    PRIMARY KEY (workspace, tid, imp, seq)
);
CREATE TABLE IF NOT EXISTS tl_lineage (
    workspace text PRIMARY KEY,
    source    text NOT NULL,
    upto      bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS tl_lineage_source ON tl_lineage (source, upto);
ALTER TABLE tl_head ADD COLUMN IF NOT EXISTS alias text;
CREATE TABLE IF NOT EXISTS tl_forks (
    workspace text NOT NULL,
    fork      text NOT NULL,
    upto      bigint NOT NULL,
    PRIMARY KEY (workspace, fork)
);
CREATE TABLE IF NOT EXISTS tl_recall_echo (
    workspace text NOT NULL,
    call      text NOT NULL,
    PRIMARY KEY (workspace, call)
);
CREATE TABLE IF NOT EXISTS tl_vec_state (
    workspace text PRIMARY KEY,
    key       text NOT NULL,
    dim       integer NOT NULL,
    epoch     bigint NOT NULL,
    floor     bigint NOT NULL,
    nonce     bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS tl_vec (
    workspace text NOT NULL,
    seq       bigint NOT NULL,
    rec       bytea NOT NULL,
    PRIMARY KEY (workspace, seq)
);
"""


def ensure_schema(conn: Any, where: str) -> bool:
    """Create the tables when missing and check the version, in one
    transaction under an advisory lock; on a Citus database, create them
    distributed, and refuse a plain schema (module doc). ``where`` names the
    database in errors. Whether the database is Citus's."""
    from psycopg.errors import UndefinedTable

    from ledger.storage.postgres import citus

    try:  # the common case: the tables exist; two small queries, no lock
        with conn.transaction():
            got = conn.execute("SELECT max(version) FROM tl_schema").fetchone()
            on_citus = citus.installed(conn)
        if got is not None and got[0] is not None:
            _check_version(got[0], where)
            if got[0] == SCHEMA_VERSION:
                if on_citus:
                    citus.require_distributed(conn, where)
                return bool(on_citus)
    except UndefinedTable:
        pass  # a new database: create everything below
    # A new database, or an older schema to upgrade (CREATE ... IF NOT EXISTS
    # adds what it lacks; nothing is rebuilt here: the recall index is built
    # lazily by the first ranked search).
    create_schema(conn, where, fresh=True)
    with conn.transaction():
        return citus.installed(conn)


def create_schema(conn: Any, where: str, *, fresh: bool) -> list[str]:
    """The one schema transaction, under the advisory lock: create what is
    missing, lay the tables out for Citus when it is installed
    (``citus.distribute_tables``; ``fresh``: a store creating them, which
    refuses a plain schema holding rows, else ``tledger db distribute``
    converting one in place), and record or upgrade the version (a newer one
    is refused). Returns the tables it distributed."""
    from ledger.storage.postgres import citus

    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK_KEY,))
        conn.execute(DDL)
        if citus.installed(conn):
            _materialise_all(conn)
            converted = citus.distribute_tables(conn, where, fresh)
        else:
            converted = []
        got = conn.execute("SELECT max(version) FROM tl_schema").fetchone()
        version = got[0] if got else None
        if version is None:
            conn.execute("INSERT INTO tl_schema (version) VALUES (%s)", (SCHEMA_VERSION,))
        else:
            _check_version(version, where)
            if version < SCHEMA_VERSION:
                conn.execute("UPDATE tl_schema SET version = %s", (SCHEMA_VERSION,))
    return converted


def _materialise_all(conn: Any) -> None:
    """Before the tables go to Citus, give every fork its own copy of the rows
    it shares with its source (``lineage.py``): a fork made on plain
    PostgreSQL is stored under its id, which hashes into any shard, and a
    Citus statement is one task only over one shard."""
    if conn.execute("SELECT to_regclass('tl_lineage') IS NOT NULL AND NOT EXISTS (SELECT "
                    "FROM pg_dist_partition WHERE logicalrelid = to_regclass('tl_lineage'))"
                    ).fetchone()[0] is not True:
        return
    conn.execute(
        "INSERT INTO tl_rows (workspace, seq, batch_id, boundary, raw) SELECT l.workspace, "
        "r.seq, r.batch_id, r.boundary, r.raw FROM tl_lineage l JOIN tl_rows r ON "
        "r.workspace = l.source AND r.seq <= l.upto")
    conn.execute(
        "INSERT INTO tl_batches (workspace, batch_id, first_seq, n) SELECT l.workspace, "
        "b.batch_id, b.first_seq, b.n FROM tl_lineage l JOIN tl_batches b ON b.workspace = "
        "l.source AND b.first_seq <= l.upto ON CONFLICT (workspace, batch_id) DO NOTHING")
    conn.execute("DELETE FROM tl_lineage")


def _check_version(version: int, where: str) -> None:
    if version > SCHEMA_VERSION:
        raise FormatError(
            f"{where}: schema version {version} was written by a newer transcript-ledger "
            f"(this one reads version {SCHEMA_VERSION}); upgrade the package"
        )
