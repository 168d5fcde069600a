"""Tests of ledger.storage.files: the file engine."""
