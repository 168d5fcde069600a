"""Tests of ledger.recovery: check, repair, salvage and imports."""
