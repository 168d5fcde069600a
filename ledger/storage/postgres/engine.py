"""The workspaces of one PostgreSQL database (``ledger.storage.engine.Engine``)."""

from __future__ import annotations

from ledger.storage.engine import StoreOptions
from ledger.storage.postgres import keys
from ledger.storage.postgres.connect import Database
from ledger.storage.postgres.lineage import materialise_forks, materialise_own
from ledger.storage.postgres.workspace import PgWorkspace

TABLES = ("tl_recall_post", "tl_recall_docs", "tl_recall_terms", "tl_recall_echo",
          "tl_recall_state", "tl_vec", "tl_vec_state",
          "tl_rows", "tl_batches", "tl_quarantine", "tl_lineage", "tl_forks", "tl_head")


class PostgresEngine:
    """Every workspace of the database ``options.root`` names."""

    def __init__(self, options: StoreOptions) -> None:
        self.options = options
        self.db = Database(options.root)

    def open(self, workspace: str) -> PgWorkspace:
        return PgWorkspace(self.db, self.options, workspace)

    def workspaces(self) -> list[str]:
        """Ids with a head row, sorted (the one query that spans workspaces;
        on Citus a fork's head row is under its key, its id holds the pointer:
        ``keys.py``)."""
        with self.db.read("list workspaces") as conn:
            got = conn.execute("SELECT workspace FROM tl_head " + (
                f"WHERE strpos(workspace, '{keys.SEPARATOR}') = 0 " if self.db.citus else "")
                + "ORDER BY workspace").fetchall()
        return [ws for (ws,) in got]

    def delete(self, workspace: str) -> bool:
        """Delete a workspace in one transaction; the head row goes last under
        its own lock, so a concurrent writer either commits before (and its
        rows go too) or creates a new, empty history after. The forks that
        share its rows get their own copy of them first (``lineage.py``). On
        Citus a fork's rows go under its key, then its pointer (``keys.py``)."""
        with self.db.write(f"delete workspace {workspace!r}") as conn:
            head = conn.execute("SELECT alias FROM tl_head WHERE workspace = %s FOR UPDATE",
                                (workspace,)).fetchone()
            if head is None:
                return False
            key = workspace
            if head[0] is not None:  # a pointer: the head row under the key, locked too
                key = keys.check(head[0], self.db.where)
                conn.execute("SELECT 1 FROM tl_head WHERE workspace = %s FOR UPDATE", (key,))
            # its forks keep every byte they read, and its source forgets it (lineage.py)
            materialise_forks(conn, key, citus=self.db.citus)
            if self.db.citus:
                materialise_own(conn, key, citus=True, copy=False)
            for table in TABLES:
                conn.execute(f"DELETE FROM {table} WHERE workspace = %s", (key,))
            if key != workspace:
                conn.execute("DELETE FROM tl_head WHERE workspace = %s", (workspace,))
            return True
