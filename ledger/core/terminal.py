"""Stored text made safe for a terminal: control characters shown, not obeyed.

Transcript text is untrusted (tool output, web pages, imported files). Written
to a terminal as is, an ESC or a C1 control starts a sequence the terminal
executes: OSC 8 links to other targets, cursor moves that overwrite earlier
lines, OSC 52 clipboard writes, status queries whose answers arrive as typed
input. Every human-facing output of transcript-ledger (``tledger show``, the
tables, report and error lines) passes its text through :func:`visible`; JSON
and JSONL output never does (it stays byte-faithful).

:func:`visible` replaces, one for one:

- C0 controls except tab and newline (U+0000..U+001F, so ESC and CR too), DEL
  (U+007F) and C1 controls (U+0080..U+009F) with ``\\xNN`` (``\\x1b`` for ESC);
- the bidirectional embedding, override and isolate controls (U+202A..U+202E,
  U+2066..U+2069), which reorder what is shown, with ``\\uNNNN``.

Everything else, tab and newline included, is kept. A backslash in the text is
not doubled, so ``\\x1b`` may also be those four characters typed literally:
the output is for people to read; scripts read ``--json``.
"""

from __future__ import annotations

import re

__all__ = ["visible", "visible_line"]

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _shown(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """``text`` with every control character above written out (module doc)."""
    return _CONTROL.sub(_shown, text)


def visible_line(text: str) -> str:
    """``text`` on one line: controls written out, then every run of
    whitespace (newlines too) folded into one space (for stderr error lines)."""
    return " ".join(visible(text).split())
