"""Tests of ledger.rollover: the rules, the transaction, the runtime object and the tool policy."""
