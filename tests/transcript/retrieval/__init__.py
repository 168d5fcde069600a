"""Tests of ledger.transcript.retrieval: session_history on the file engine."""
