"""The PostgreSQL engine as the registry knows it: ``postgresql://`` and
``postgres://`` URLs (psycopg is imported only when one is opened)."""

from __future__ import annotations

from ledger.storage.engine import Engine, EngineSpec, StoreOptions
from ledger.storage.postgres.connect import is_postgres_root


def _open(options: StoreOptions) -> Engine:
    from ledger.storage.postgres.engine import PostgresEngine

    return PostgresEngine(options)


SPEC = EngineSpec(
    name="postgresql",
    forms="a postgresql:// or postgres:// URL (PostgreSQL)",
    matches=is_postgres_root,
    open=_open,
)
