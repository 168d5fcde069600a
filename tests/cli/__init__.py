"""Tests of ledger.cli: the tledger commands."""
