"""Tests of ledger.tokens: token counting, encodings and models."""
