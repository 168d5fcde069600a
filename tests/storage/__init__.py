"""Tests of ledger.storage: the engine registry, and each engine in its folder."""
