"""Transcript semantics over any engine: the store, the history facade
(batches, windows, floors, rollover batches) and the session_history tool."""
