"""Tests of ledger.storage.postgres on PostgreSQL and on Citus."""
