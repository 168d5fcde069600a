"""Tests of ledger.transcript: windows, privacy floors and the provider view."""
