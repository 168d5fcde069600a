"""Reports for a person at a terminal: short tables drawn by rich.

Commands print tables only when stdout is a terminal; piped, they keep their
stable plain or JSON forms for scripts. ``NO_COLOR`` is honoured by rich.
Every cell, the title and the caption have their control characters written
out (:func:`ledger.core.terminal.visible`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ledger.core.terminal import visible

__all__ = ["is_terminal", "print_table"]


def is_terminal(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


def print_table(
    stream: Any,
    columns: Sequence[str],
    rows: Sequence[Sequence[object]],
    *,
    title: str | None = None,
    caption: str | None = None,
    numeric: Sequence[str] = (),
) -> None:
    """Draw ``rows`` under ``columns`` on ``stream`` (a terminal); the columns
    named in ``numeric`` are right-aligned."""
    from rich.console import Console
    from rich.table import Table

    title = visible(title) if title is not None else None
    caption = visible(caption) if caption is not None else None
    table = Table(title=title, caption=caption, box=None, header_style="bold",
                  pad_edge=False, caption_justify="left", title_justify="left")
    for name in columns:
        table.add_column(name, justify="right" if name in numeric else "left",
                         overflow="fold")
    for row in rows:
        table.add_row(*("-" if cell is None else visible(str(cell)) for cell in row))
    Console(file=stream, force_terminal=True, highlight=False).print(table)
