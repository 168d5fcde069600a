"""Context notes: the conventional ``workspace/context-notes.md`` file. Pure.

Two jobs, both from the design record:

* :func:`check_notes_write` -- the budget warning offers one settled tool step
  that writes the notes file: at most 8 KiB (UTF-8), and only when the file is
  writable.
* :func:`select_with_notes` -- while token-budget mode is active (and Memory /
  Memory Hot Set are on), existing notes are appended *after* the unchanged
  ordinary hot-memory selection (up to 8 entries) as a ninth entry with their
  own allowance of 8 KiB and 2,000 tokens, formatting included. Notes that the
  ordinary selection already holds are not duplicated; when the mode is
  inactive the file follows the ordinary selection rules (nothing is added).

Token counts come from a caller-supplied ``count_text(str) -> int`` (the
runtime's resolved encoding); this module never guesses a character ratio.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ledger.core.errors import LedgerError

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

NOTES_PATH = "workspace/context-notes.md"
NOTES_MAX_BYTES = 8 * 1024
NOTES_MAX_TOKENS = 2_000
ORDINARY_MAX_ENTRIES = 8
TRUNCATION_MARK = "\n[context notes truncated]"

TextCounter = Callable[[str], int]


class NotesError(LedgerError):
    """A context-notes write that the budget warning may not offer or perform."""


@dataclass(frozen=True)
class MemoryEntry:
    """One hot-memory entry as the runtime renders it into the request."""

    path: str
    text: str


def _norm(path: str) -> str:
    parts = [p for p in path.replace("\\", "/").split("/") if p not in ("", ".")]
    return "/".join(parts)


def is_notes_path(path: str) -> bool:
    return _norm(path) == NOTES_PATH


def check_notes_write(content: str, *, writable: bool) -> bytes:
    """The bytes to write for a notes tool step, or :class:`NotesError`.

    Refused when the file is not writable or the UTF-8 text is above 8 KiB; the
    caller shortens its notes rather than having them cut silently.
    """
    if not writable:
        raise NotesError(f"{NOTES_PATH} is not writable; no notes step is offered")
    data = content.encode("utf-8")
    if len(data) > NOTES_MAX_BYTES:
        raise NotesError(
            f"context notes are {len(data)} bytes, above the {NOTES_MAX_BYTES}-byte limit of "
            f"{NOTES_PATH}; shorten them and write again"
        )
    return data


def render_notes(text: str) -> str:
    """The notes excerpt as it appears in the request (formatting included)."""
    return f"## Context notes ({NOTES_PATH})\n\n{text}"


def _fits(rendered: str, count_text: TextCounter) -> bool:
    return (
        len(rendered.encode("utf-8")) <= NOTES_MAX_BYTES
        and count_text(rendered) <= NOTES_MAX_TOKENS
    )


def notes_excerpt(text: str, count_text: TextCounter) -> str | None:
    """The rendered excerpt cut to the allowance, or None when even the header
    does not fit. Cuts fall on code-point boundaries; a cut is marked."""
    whole = render_notes(text)
    if _fits(whole, count_text):
        return whole
    # Binary search on code points: both bytes and tokens grow with the prefix.
    lo, hi = 0, len(text)
    best: str | None = None
    while lo <= hi:
        mid = (lo + hi) // 2
        candidate = render_notes(text[:mid]) + TRUNCATION_MARK
        if _fits(candidate, count_text):
            best = candidate
            lo = mid + 1
        else:
            hi = mid - 1
    return best


def select_with_notes(
    ordinary: Sequence[MemoryEntry],
    notes_text: str | None,
    *,
    token_budget_mode: bool,
    hot_set_enabled: bool,
    count_text: TextCounter,
) -> tuple[MemoryEntry, ...]:
    """The hot-memory selection, with context notes as a ninth entry when due.

    ``ordinary`` is the unchanged ordinary selection (at most 8 entries); it is
    returned first and untouched. ``notes_text`` is the notes file's content, or
    None when it does not exist.
    """
    if len(ordinary) > ORDINARY_MAX_ENTRIES:
        raise NotesError(
            f"the ordinary hot-memory selection has {len(ordinary)} entries, "
            f"above {ORDINARY_MAX_ENTRIES}"
        )
    selection = tuple(ordinary)
    if not (token_budget_mode and hot_set_enabled) or not notes_text:
        return selection
    if any(is_notes_path(entry.path) for entry in selection):
        return selection
    excerpt = notes_excerpt(notes_text, count_text)
    if excerpt is None:
        return selection
    return (*selection, MemoryEntry(NOTES_PATH, excerpt))
