"""What every provider adapter shares: which rows the model sees, and in which turns.

The adapters are pure functions over canonical row dicts (DESIGN.md 3). Before an
adapter maps anything to an API shape, :func:`conversation` turns the rows into
*turns* that every API accepts:

- Rows the model must never see are dropped: ``reset`` rows, empty assistant
  records (rejected requests; their original sits in ``meta.quarantine``), any row
  with ``meta.quarantine``, and rows of kinds this build does not know (a
  ``kind`` that is no string among them, also an unhashable one). A row that is
  no object or whose ``parts`` is no list is refused: :class:`InvalidRow`
  naming its index (:func:`row_shape_error`).
  ``lead_in`` and ``warning`` rows are sent as ordinary messages in their own role:
  the runtime wrote their text for the model. ``truncation`` rows are transcript
  markers, never sent (as in ``History.provider_view``).
- Consecutive rows of the same role become one turn (the APIs carry messages, not
  our rows; Claude Code, for one, writes each block of one API message as its own
  row).
- ``tool_result`` parts form a ``tool`` turn wherever they were stored; the other
  parts of that row follow as a ``user`` turn.
- Tool calls and results stay paired and in order: right after an assistant turn
  that calls tools comes one ``tool`` turn with a result for each call, in call
  order, taken from wherever it was stored later. A call with no stored result gets
  :data:`MISSING_RESULT` (an error result), since no API accepts an unanswered call
  in the middle of a conversation. A result whose call is not before it becomes
  user text in the provider view's words and with the view's reason
  (``ledger.core.windows.orphan_result_parts``: ``[result of tool call ID;
  WHY]``, media parts kept as media), so nothing silently disappears and the
  model reads the same whether the rows came raw or through the view.
- A ``tool_call`` part outside an assistant row becomes user-visible text.
- Only message rows hold calls and results (``ledger.core.toolpairs``, the
  rule every layer pairs by): a lead-in's or a warning's ``tool_call`` and
  ``tool_result`` parts are sent as text in their own row's turn, answering
  and awaiting nothing, in the provider view's words for them
  (``ledger.core.windows.other_kind_parts``), so raw rows and their view send
  such a row alike.

Each adapter documents what it does with reasoning, media and parts it cannot carry.
"""

from __future__ import annotations

import base64
import json
import mimetypes
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ledger.core.errors import InvalidRow
from ledger.core.toolpairs import holds_tool_parts
from ledger.core.windows import (
    EARLIER,
    LATE,
    PROVIDER_KINDS,
    call_sat_in,
    orphan_result_parts,
    other_kind_parts,
)
from ledger.core.windows import is_parts_output as is_parts_output  # the adapters' name for it

VISIBLE_KINDS = PROVIDER_KINDS  # the kinds the provider view serves: one set for both
KNOWN_PART_TYPES = frozenset({"text", "reasoning", "tool_call", "tool_result", "media"})
MISSING_RESULT = "[no result was recorded for this tool call]"

Row = Mapping[str, Any]
Part = dict[str, Any]


@dataclass
class Turn:
    """One message-to-be: ``role`` is ``system``, ``user``, ``assistant`` or ``tool``."""

    role: str
    parts: list[Part] = field(default_factory=list)


def is_rejected(row: Row) -> bool:
    """True for an empty, non-partial assistant record (a rejected request's husk)
    or any row holding a quarantined original in ``meta.quarantine``."""
    meta = row.get("meta")
    if meta is not None and (isinstance(meta, dict) or isinstance(meta, Mapping)) \
            and "quarantine" in meta:
        return True
    return (row.get("role") == "assistant" and row.get("kind", "message") == "message"
            and not row.get("parts") and not row.get("partial", False))


def is_visible(row: Row) -> bool:
    """Whether an API request may contain ``row`` (see the module docstring).
    A ``kind`` that is no string is a kind this build does not know, also
    when it cannot be hashed (a list, an object): not sent."""
    try:  # no test of the kind's type: only an unhashable one raises here
        known = row.get("kind", "message") in VISIBLE_KINDS
    except TypeError:
        return False
    return known and not is_rejected(row)


def visible_rows(rows: Iterable[Row]) -> Iterator[Row]:
    """The rows an API request may contain, in order (see the module docstring)."""
    for row in rows:
        if is_visible(row):
            yield row


def json_text(value: Any) -> str:
    """Compact JSON, non-ASCII kept, the form tool arguments are sent in."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def parse_arguments(text: str) -> Any:
    """Tool arguments as JSON; text that is not JSON is kept as the string itself."""
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return text


def output_text(output: Any) -> str:
    """A tool output as one string: itself, or JSON when it is not a string."""
    return output if isinstance(output, str) else json_text(output)


def data_url(part: Mapping[str, Any]) -> str | None:
    """``data:`` URL of a media part holding base64 data, else its ``url``."""
    if isinstance(part.get("data"), str):
        return f"data:{part.get('mime', 'application/octet-stream')};base64,{part['data']}"
    url = part.get("url")
    return url if isinstance(url, str) else None


def input_part(
    api: str,
    part: Mapping[str, Any],
    text: Callable[[str], dict[str, Any]],
    media: Callable[[Mapping[str, Any], str, str], dict[str, Any]],
) -> dict[str, Any] | None:
    """One canonical input part in an API's shape: ``text(text)`` for text,
    ``media(part, mime, url)`` for a media part that has data or a URL (None
    when it has neither), and any other part as kept raw for ``api``."""
    kind = part.get("type")
    if kind == "text":
        return text(part.get("text", ""))
    if kind == "media":
        url = data_url(part)
        return None if url is None else media(part, str(part.get("mime", "")), url)
    return raw_of(api, part)


_DATA_URL = re.compile(r"^data:([^;,]+)(?:;[^,]*)?;base64,(.*)$", re.DOTALL)


def media_from_url(url: str, default_mime: str) -> Part:
    """A media part from an API's URL field: ``data:`` URLs become mime + data."""
    m = _DATA_URL.match(url)
    if m:
        return {"type": "media", "mime": m.group(1), "data": m.group(2)}
    guessed, _ = mimetypes.guess_type(url.split("?", 1)[0])
    return {"type": "media", "mime": guessed or default_mime, "url": url}


def b64_text(part: Mapping[str, Any]) -> str | None:
    """The decoded text of a ``text/plain`` media part with base64 data."""
    try:
        return base64.b64decode(part["data"], validate=True).decode("utf-8")
    except (KeyError, TypeError, ValueError):
        return None


def placeholder(part: Mapping[str, Any]) -> Part:
    """Text that stands for a media part an API cannot carry at that place."""
    where = part.get("url") if isinstance(part.get("url"), str) else None
    suffix = f" {where}" if where and not where.startswith("data:") else ""
    return {"type": "text", "text": f"[media {part.get('mime', '?')} not sent{suffix}]"}


def raw_part(api: str, obj: Mapping[str, Any]) -> Part:
    """Keep an API object we do not map (``{"type": "<api>:<its type>", "raw": obj}``)."""
    return {"type": f"{api}:{obj.get('type', 'unknown')}", "raw": dict(obj)}


def raw_of(api: str, part: Mapping[str, Any]) -> dict[str, Any] | None:
    """The API object kept by :func:`raw_part` when ``part`` belongs to ``api``."""
    kind = part.get("type")
    if isinstance(kind, str) and kind.startswith(api + ":") and isinstance(part.get("raw"), dict):
        return dict(part["raw"])
    return None


def carried_media(part: Mapping[str, Any]) -> bool:
    """A media part with something to send (``data`` or ``url``)."""
    return isinstance(part.get("data"), str) or isinstance(part.get("url"), str)


def _stray_call_text(part: Mapping[str, Any]) -> Part:
    return {
        "type": "text",
        "text": f"[tool call {part.get('name')} {part.get('id')}] {json_text(part.get('input'))}",
    }


def _as_text(part: Part, kind: str) -> list[Part]:
    """A part of a row of ``kind`` that holds no calls or results (a
    lead-in's, a warning's: ``holds_tool_parts``) as it is sent: a tool part
    as the provider view's parts for it (``ledger.core.windows.other_kind_parts``,
    the one wording), any other part as it is."""
    if part.get("type") in ("tool_call", "tool_result"):
        return other_kind_parts(part, kind)
    return [part]


class _Why:
    """Why each result that answers no call is sent as text, in the provider
    view's words (``ledger.core.windows.provider_rows``): its call had its
    result already (``LATE``), sat in a lead-in or warning
    (``call_sat_in``), or none comes before it (``EARLIER``: the rows are
    a window, its call in an earlier one). Counted as the rows come, the
    way the adapters pair, which differs from the view in two places that
    stay: an assistant row's calls count before its own results (the view
    counts a row's results first), and a call in a user row is text here
    (``_stray_call_text``) where the view lets it wait for a result."""

    def __init__(self) -> None:
        self.waiting: dict[object, int] = {}
        self.gone: dict[object, str] = {}
        self.of: dict[int, str] = {}  # id() of a result part -> why, if it is an orphan

    def calls(self, parts: list[Part]) -> None:
        for p in parts:
            if p.get("type") == "tool_call":
                pid = p.get("id")
                self.waiting[pid] = self.waiting.get(pid, 0) + 1

    def results(self, parts: list[Part]) -> None:
        for p in parts:
            pid = p.get("id")
            if self.waiting.get(pid):
                self.waiting[pid] -= 1
                self.gone[pid] = LATE
            else:
                self.of[id(p)] = self.gone.get(pid, EARLIER)

    def other_kind(self, parts: list[Part], kind: str) -> None:
        for p in parts:
            if p.get("type") == "tool_call":
                self.gone[p.get("id")] = call_sat_in(kind)


def row_shape_error(row: Any) -> str | None:
    """What makes ``row`` no row at all, else None: not an object, or
    ``parts`` (when present) not a list. Every layer that renders or counts
    rows refuses such a row with :class:`~ledger.core.errors.InvalidRow`
    naming it; anything inside a well-shaped row is rendered as the adapters
    document (an unknown kind is not sent, an unknown part type dropped)."""
    if type(row) is not dict and not isinstance(row, Mapping):
        return f"a row must be an object, not {type(row).__name__}"
    parts = row.get("parts")
    if parts is not None and type(parts) is not list:
        return f"'parts' must be a list, not {type(parts).__name__}"
    return None


def _segments(rows: Iterable[Row], keep: Callable[[Part], bool], why: _Why) -> list[Turn]:
    out: list[Turn] = []
    for index, row in enumerate(rows):
        if (error := row_shape_error(row)) is not None:
            raise InvalidRow(f"row {index}: {error}", index)
        if not is_visible(row):
            continue
        role = row.get("role")
        parts = [dict(p) for p in row.get("parts") or [] if isinstance(p, Mapping)]
        parts = [p for p in parts if p.get("type") in ("tool_call", "tool_result") or keep(p)]
        if not holds_tool_parts(row):
            why.other_kind(parts, str(row.get("kind")))
            parts = [q for p in parts for q in _as_text(p, str(row.get("kind")))]
        results = [p for p in parts if p.get("type") == "tool_result"]
        rest = [p for p in parts if p.get("type") != "tool_result"]
        if role == "assistant":
            why.calls(rest)
            why.results(results)
            out.append(Turn("assistant", rest))
            if results:
                out.append(Turn("tool", results))
            continue
        why.results(results)
        rest = [_stray_call_text(p) if p.get("type") == "tool_call" else p for p in rest]
        if results:
            out.append(Turn("tool", results))
        if rest:
            out.append(Turn("system" if role == "system" else "user", rest))
    return out


def _merge(turns: Iterable[Turn]) -> list[Turn]:
    out: list[Turn] = []
    for turn in turns:
        if not turn.parts:
            continue
        if out and out[-1].role == turn.role:
            out[-1] = Turn(turn.role, [*out[-1].parts, *turn.parts])
        else:
            out.append(Turn(turn.role, list(turn.parts)))
    return out


def _pair(turns: list[Turn], why: dict[int, str]) -> list[Turn]:
    claimed: set[int] = set()
    out: list[Turn] = []
    for index, turn in enumerate(turns):
        if turn.role == "tool":
            leftover = [p for p in turn.parts if id(p) not in claimed]
            # A result that answers no call: user text, in the provider
            # view's words (``ledger.core.windows.orphan_result_parts``).
            orphans = [q for p in leftover
                       for q in orphan_result_parts(p, why.get(id(p), EARLIER))]
            if orphans:
                out.append(Turn("user", orphans))
            continue
        out.append(turn)
        calls = [p for p in turn.parts if turn.role == "assistant" and p.get("type") == "tool_call"]
        if not calls:
            continue
        results: list[Part] = []
        for call in calls:
            found = None
            for later in turns[index + 1 :]:
                if later.role != "tool":
                    continue
                for p in later.parts:
                    if id(p) not in claimed and p.get("id") == call.get("id"):
                        found = p
                        break
                if found is not None:
                    break
            if found is None:
                results.append(
                    {"type": "tool_result", "id": call.get("id"), "output": MISSING_RESULT,
                     "error": True}
                )
            else:
                claimed.add(id(found))
                results.append(found)
        out.append(Turn("tool", results))
    return out


def conversation(rows: Iterable[Row], keep: Callable[[Part], bool] | None = None) -> list[Turn]:
    """The turns an API request carries for ``rows`` (see the module docstring).

    ``keep`` says which parts other than calls and results the API can carry; the
    others are dropped *before* turns are formed, so that what the API cannot see
    never separates two turns it would otherwise merge."""
    why = _Why()
    turns = _merge(_segments(rows, keep or (lambda _part: True), why))
    while True:
        paired = _merge(_pair(turns, why.of))
        if [(t.role, t.parts) for t in paired] == [(t.role, t.parts) for t in turns]:
            return paired
        turns = paired


def message_row(role: str, parts: list[Part]) -> dict[str, Any]:
    """A canonical input row (kind, role, parts) as ``from_*`` functions return it."""
    return {"kind": "message", "role": role, "parts": parts}


def append_row(rows: list[dict[str, Any]], role: str, parts: list[Part]) -> None:
    """Append ``parts`` to ``rows``, extending the last row when it has the same role."""
    if not parts:
        return
    if rows and rows[-1]["role"] == role:
        rows[-1]["parts"].extend(parts)
    else:
        rows.append(message_row(role, list(parts)))
