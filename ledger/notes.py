"""The rollover notes file (``workspace/context-notes.md``): the public names of
:mod:`ledger.rollover.notes`, where the code and its documentation live."""

from ledger.rollover.notes import (
    NOTES_MAX_BYTES,
    NOTES_MAX_TOKENS,
    NOTES_PATH,
    ORDINARY_MAX_ENTRIES,
    TRUNCATION_MARK,
    MemoryEntry,
    NotesError,
    TextCounter,
    check_notes_write,
    is_notes_path,
    notes_excerpt,
    render_notes,
    select_with_notes,
)

__all__ = [
    "NOTES_MAX_BYTES",
    "NOTES_MAX_TOKENS",
    "NOTES_PATH",
    "ORDINARY_MAX_ENTRIES",
    "TRUNCATION_MARK",
    "MemoryEntry",
    "NotesError",
    "TextCounter",
    "check_notes_write",
    "is_notes_path",
    "notes_excerpt",
    "render_notes",
    "select_with_notes",
]
