"""The engine's tables on Citus: distributed by ``workspace``, colocated.

When the database has the ``citus`` extension, ``ensure_schema`` creates the
tables distributed in the transaction that creates them:

- ``tl_rows`` hash-distributed by ``workspace``; ``tl_head``, ``tl_batches``
  and ``tl_quarantine`` the same, colocated with ``tl_rows``, and so are the
  recall index's ``tl_recall_*`` tables: one workspace's rows, head row,
  batches, quarantine and recall index live in the same shard group, on one
  worker, so every statement that names one workspace runs there as one task,
  and a transaction over one workspace is a single-node transaction;
- ``tl_schema`` a reference table (a copy on every node);
- ``tl_lineage`` and ``tl_forks`` distributed and colocated like the rest: a
  fork on Citus is a reference to its source's rows, stored under a key that
  hashes into its source's shard (``keys.py``), so the statements that read
  both are one task too.

A schema created before the extension (plain tables) is refused when a store
opens it (``NotDistributed``): every query would run on the coordinator
alone, and nothing would say so. ``tledger db distribute``
(``ledger.storage.postgres.admin``) converts it in place, in the schema's one
transaction (``schema.create_schema``): Citus copies each table's rows into
its shards.

This module is the layout alone, over a connection it is given: it opens
none and imports nothing of the engine's.

Only ``tledger ls`` (the list of workspaces) spans shards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ledger.core.errors import LedgerError

__all__ = ["DISTRIBUTED", "REFERENCE", "NotDistributed", "distribute_tables", "installed",
           "layout", "require_distributed", "status_of"]

DISTRIBUTED = ("tl_rows", "tl_head", "tl_batches", "tl_quarantine",  # colocated with tl_rows
               "tl_recall_state", "tl_recall_terms", "tl_recall_docs", "tl_recall_post",
                "tl_recall_echo", "tl_vec_state", "tl_vec", "tl_lineage", "tl_forks")
REFERENCE = ("tl_schema",)
COLUMN = "workspace"
COMMAND = "tledger --root URL db distribute"


class NotDistributed(LedgerError):
    """A Citus database whose transcript tables are not (all) distributed."""


@dataclass(frozen=True)
class TableLayout:
    """How Citus holds one table: ``distributed`` (hash, by ``column``),
    ``reference``, ``local`` (a Citus local table), ``plain`` (not a Citus
    table) or ``missing``."""

    kind: str
    column: str | None = None
    colocation: int | None = None


def installed(conn: Any) -> bool:
    """Whether the database has the ``citus`` extension."""
    got = conn.execute("SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')")
    return bool(got.fetchone()[0])


def layout(conn: Any) -> dict[str, TableLayout]:
    """Each engine table's layout (Citus must be installed)."""
    rows = conn.execute(
        "SELECT t.name, to_regclass(t.name) IS NOT NULL, p.partmethod, p.repmodel, "
        "p.colocationid, CASE WHEN p.partmethod = 'h' THEN "
        "column_to_column_name(p.logicalrelid, p.partkey) END "
        "FROM unnest(%s::text[]) AS t(name) "
        "LEFT JOIN pg_dist_partition p ON p.logicalrelid = to_regclass(t.name)",
        (list(DISTRIBUTED + REFERENCE),)).fetchall()
    out: dict[str, TableLayout] = {}
    for name, exists, method, repmodel, colocation, column in rows:
        if not exists:
            out[name] = TableLayout("missing")
        elif method is None:
            out[name] = TableLayout("plain")
        elif method == "h":
            out[name] = TableLayout("distributed", column, colocation)
        elif repmodel == "t":
            out[name] = TableLayout("reference")
        else:
            out[name] = TableLayout("local")
    return out


def problems(tables: dict[str, TableLayout]) -> list[str]:
    """How ``tables`` differs from the layout the engine wants (empty: fine)."""
    out: list[str] = []
    rows = tables["tl_rows"]
    for name in DISTRIBUTED:
        t = tables[name]
        if t.kind != "distributed":
            out.append(f"{name} is {t.kind}, not distributed by {COLUMN}")
        elif t.column != COLUMN:
            out.append(f"{name} is distributed by {t.column}, not by {COLUMN}")
        elif name != "tl_rows" and t.colocation != rows.colocation:
            out.append(f"{name} is not colocated with tl_rows")
    for name in REFERENCE:
        if tables[name].kind != "reference":
            out.append(f"{name} is {tables[name].kind}, not a reference table")
    return out


def require_distributed(conn: Any, where: str) -> None:
    """Refuse a Citus database whose tables are not laid out as distributed."""
    found = problems(layout(conn))
    if found:
        raise NotDistributed(
            f"{where}: the citus extension is installed but the transcript tables are not "
            f"distributed ({'; '.join(found)}), so every query would run on the coordinator "
            f"alone. Convert them in place (one transaction, rows kept): {COMMAND}"
        )


def distribute_tables(conn: Any, where: str, fresh: bool) -> list[str]:
    """Distribute every engine table that is plain, inside the caller's
    transaction; returns their names. ``fresh``: the tables were created in
    this transaction (a plain table holding rows is then refused, since that
    is a schema made before Citus, to convert on purpose with ``COMMAND``).
    A table already distributed some other way is refused: converting it is
    not this command's to decide."""
    tables = layout(conn)
    for name, t in tables.items():
        want = "reference" if name in REFERENCE else "distributed"
        if t.kind in ("plain", "missing") or (
                t.kind == want and (want == "reference" or t.column == COLUMN)):
            continue
        raise LedgerError(f"{where}: {name} is already a Citus {t.kind} table"
                          f"{' by ' + t.column if t.column else ''}; the engine needs it "
                          f"{want}{' by ' + COLUMN if want == 'distributed' else ''}: "
                          "undistribute it (undistribute_table) first")
    converted: list[str] = []
    for name in DISTRIBUTED + REFERENCE:
        if tables[name].kind != "plain":
            continue
        if fresh and conn.execute(f"SELECT EXISTS (SELECT FROM {name})").fetchone()[0]:
            require_distributed(conn, where)
        if name in REFERENCE:
            conn.execute("SELECT create_reference_table(%s)", (name,))
        elif name == "tl_rows":
            conn.execute("SELECT create_distributed_table(%s, %s)", (name, COLUMN))
        else:
            conn.execute("SELECT create_distributed_table(%s, %s, colocate_with => 'tl_rows')",
                         (name, COLUMN))
        if not fresh:  # the rows are in the shards now; drop the coordinator's copy
            conn.execute("SELECT truncate_local_data_after_distributing_table(%s)", (name,))
        converted.append(name)
    rest = problems(layout(conn))
    if rest:  # e.g. a table distributed by workspace but in another colocation group
        raise LedgerError(f"{where}: cannot lay out the tables for Citus: {'; '.join(rest)}")
    return converted


def status_of(conn: Any, where: str) -> dict[str, Any]:
    """The database's Citus layout: each table's, and the nodes with their
    share of ``tl_rows`` shards."""
    out: dict[str, Any] = {"database": where, "citus": installed(conn)}
    if not out["citus"]:
        return out
    tables = layout(conn)
    fresh = all(t.kind == "missing" for t in tables.values())  # a store creates them
    out["tables"] = {} if fresh else {name: {"kind": t.kind, "column": t.column}
                                      for name, t in tables.items()}
    out["problems"] = [] if fresh else problems(tables)
    nodes = conn.execute(
        "SELECT n.nodename, n.nodeport, n.isactive, count(s.shardid) FILTER "
        "(WHERE p.logicalrelid = to_regclass('tl_rows')) "
        "FROM pg_dist_node n LEFT JOIN pg_dist_placement pl ON pl.groupid = n.groupid "
        "LEFT JOIN pg_dist_shard s ON s.shardid = pl.shardid "
        "LEFT JOIN pg_dist_partition p ON p.logicalrelid = s.logicalrelid "
        "GROUP BY 1, 2, 3 ORDER BY 2, 1").fetchall()
    out["nodes"] = [{"node": f"{host}:{port}", "active": active, "tl_rows_shards": n}
                    for host, port, active, n in nodes]
    return out
