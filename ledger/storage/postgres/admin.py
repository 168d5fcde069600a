"""``tledger db``: the schema commands, each on one connection of its own
outside the pool (a pool's first connection runs ``ensure_schema``, which
refuses the plain schema ``distribute`` is there to convert).

- ``distribute``: convert the database to the Citus layout in place, in the
  schema's one transaction (``schema.create_schema``: the advisory lock, the
  DDL, the tables distributed, the version); running it again changes
  nothing;
- ``status``: the Citus layout of each table and the nodes' share of shards.
"""

from __future__ import annotations

from typing import Any

from ledger.core.errors import LedgerError
from ledger.storage.postgres import citus
from ledger.storage.postgres.connect import direct
from ledger.storage.postgres.schema import create_schema


def distribute(url: str) -> dict[str, Any]:
    """Convert the database ``url`` names to the Citus layout (module doc);
    returns its status and the tables converted."""
    with direct(url, "distributing the tables", write=True) as (conn, where):
        if not citus.installed(conn):
            raise LedgerError(f"{where}: the citus extension is not installed in this "
                              "database: CREATE EXTENSION citus and add the worker nodes "
                              "(citus_add_node) first")
        converted = create_schema(conn, where, fresh=False)
        report = citus.status_of(conn, where)
    report["converted"] = converted
    return report


def status(url: str) -> dict[str, Any]:
    """The database's Citus layout (``citus.status_of``)."""
    with direct(url, "reading the layout") as (conn, where):
        return citus.status_of(conn, where)
