"""Tests of ledger.core: rows, rules, cursors, nesting and terminal-safe text."""
