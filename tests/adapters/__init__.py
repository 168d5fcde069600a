"""Tests of ledger.adapters: the provider adapters."""
