"""Tests of ledger.storage.memory: the in-memory engine."""
