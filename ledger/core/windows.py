"""Context windows, boundaries and privacy floors: pure rules over rows.

A *boundary* is a reset row (or an unreadable line that may be one). It opens
a window named by its seq. A boundary is *crossable* by retrieval only when it
is part of a valid rollover (a committed batch whose row 0 is a rollover reset
and row 1 its lead-in) or a valid compaction (row 0 of a batch is a compaction
reset). Every other boundary is a *privacy floor*: nothing at or before the
newest one is ever retrievable (fail closed).

Nothing here touches a file: callers feed rows in log order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from ledger.core.format import files as ffmt
from ledger.core.format import rows as fmt
from ledger.core.rows import Row

UNKNOWN_SEQ = ffmt.FLOOR_UNREADABLE
PROVIDER_KINDS = frozenset({"message", "lead_in", "warning"})
# How provider_rows serves a row changed for the model: item, its data, the
# new parts, whether no result is left (_served_copy, _served_in_place).
_Serve = Callable[[Any, dict[str, Any], list[Any], bool], Any]


@dataclass(frozen=True)
class Boundary:
    """A window start: its seq (or UNKNOWN_SEQ), position and reason."""

    seq: int
    segment: int
    offset: int
    reason: str  # "manual" | "rollover" | "compaction"
    readable: bool = True
    after: int = 0  # the last readable seq before an unreadable boundary

    @property
    def is_floor(self) -> bool:
        return self.reason == "manual"

    @property
    def damaged(self) -> bool:
        """A floor that damage may have made (or a recorded floor that is
        missing): it blocks window reads and retrieval until repair."""
        return self.seq == ffmt.FLOOR_DAMAGED


def classify_reset(row: dict[str, Any], next_row: dict[str, Any] | None) -> str:
    """The effective reason of a readable reset row given the row after it.

    A rollover is valid only with its lead-in right behind it in the same
    batch; a compaction only as row 0 of its batch. Anything else is manual.
    """
    info = row.get("reset")
    reason = info.get("reason") if isinstance(info, dict) else None
    batch = batch_raw if isinstance(batch_raw := row.get("batch"), dict) else {}
    if reason == "rollover":
        if batch.get("i") != 0 or not isinstance(batch.get("n"), int) or batch["n"] < 2:
            return "manual"
        if next_row is None or next_row.get("kind") != "lead_in":
            return "manual"
        nb = nb_raw if isinstance(nb_raw := next_row.get("batch"), dict) else {}
        if nb.get("id") != batch.get("id") or nb.get("i") != 1:
            return "manual"
        return "rollover"
    if reason == "compaction" and batch.get("i") == 0:
        return "compaction"
    return "manual"


@dataclass
class Entry:
    """One line of the log as a scanner sees it."""

    segment: int
    offset: int
    line: bytes
    row: dict[str, Any] | None  # None: the line does not verify or decode
    is_reset: bool  # readable reset (duplicate-key resets included)
    candidate: bool  # unreadable and may be a reset (a candidate or damage, see damaged)
    damaged: bool = False  # unreadable, no candidate, but damage may hide a reset


def boundaries(entries: Iterable[Entry]) -> Iterator[Boundary]:
    """Yield every boundary in log order (one line of look-ahead)."""
    pending: Entry | None = None
    last_seq = 0
    for entry in entries:
        if pending is not None:
            assert pending.row is not None
            reason = classify_reset(pending.row, entry.row)
            yield Boundary(int(pending.row["seq"]), pending.segment, pending.offset, reason)
            pending = None
        if entry.row is not None:
            seq = entry.row.get("seq")
            if isinstance(seq, int):
                last_seq = seq
            if entry.is_reset:
                if entry.row.get("kind") == "reset" and isinstance(seq, int):
                    pending = entry
                else:
                    yield Boundary(last_seq, entry.segment, entry.offset, "manual")
        elif entry.candidate:
            seq = ffmt.FLOOR_DAMAGED if entry.damaged else UNKNOWN_SEQ
            yield Boundary(
                seq, entry.segment, entry.offset, "manual", readable=False, after=last_seq
            )
    if pending is not None:
        assert pending.row is not None
        yield Boundary(
            int(pending.row["seq"]),
            pending.segment,
            pending.offset,
            classify_reset(pending.row, None),
        )


def batch_boundaries(rows: list[dict[str, Any]]) -> list[tuple[int, str]]:
    """(index in batch, reason) of each reset in one batch about to be written."""
    out = []
    for i, row in enumerate(rows):
        if row.get("kind") == "reset":
            nxt = rows[i + 1] if i + 1 < len(rows) else None
            out.append((i, classify_reset(row, nxt)))
    return out


LATE = "it came after its call was settled"  # why a result is text: its call had its result
EARLIER = "its call is in an earlier context window"  # ... or none with its id comes before it


def call_sat_in(kind: str) -> str:
    """Why a result is text: its call sat in a row of ``kind`` (a lead-in, a
    warning), which holds no calls (``ledger.core.toolpairs``)."""
    return f"its call sat in a {kind} row, not a message row"


def orphan_result_parts(part: Mapping[str, Any], why: str) -> list[dict[str, Any]]:
    """The parts a tool result served as text stands as (``why`` it is not
    served as a result): ``[result of tool call ID (error); WHY]`` and its
    output, in one text part; an output of text and media parts
    (:func:`is_parts_output`) with a media part is the label, then those
    parts, so an image reaches the model as an image, not as its base64 in
    text. The one wording of the provider view and of the adapters given
    raw rows (``ledger.adapters.common``): the model reads the same whatever
    path served the row. (The tests run first are the cheap ones: a string,
    a list of text parts; ``provider_rows`` calls this for every orphan.)"""
    output = part.get("output")
    if isinstance(output, str):
        text = output
    elif isinstance(output, list) and all(
        isinstance(p, dict) and isinstance(p.get("text"), str) for p in output
    ):
        text = "\n".join(p["text"] for p in output)
    elif _has_media(output):
        return [{"type": "text", "text": _label(part, why)}, *[dict(p) for p in output]]
    else:
        text = fmt.encode_json(output).decode("utf-8")
    # _label's wording, written out: a call to it cost the view 0.5% more
    # instructions (bench.instr_ab, its 200 orphans a window).
    error = " (error)" if part.get("error") else ""
    return [{"type": "text",
             "text": f"[result of tool call {part.get('id')}{error}; {why}]\n{text}"}]


def _has_media(output: Any) -> TypeGuard[list[Mapping[str, Any]]]:
    return is_parts_output(output) and any(p.get("type") == "media" for p in output)


def is_parts_output(output: Any) -> TypeGuard[list[Mapping[str, Any]]]:
    """Whether a tool output is a list of canonical text/media parts (else it is JSON)."""
    return (
        isinstance(output, list)
        and bool(output)
        and all(
            isinstance(p, Mapping)
            and (
                (p.get("type") == "text" and isinstance(p.get("text"), str))
                or (p.get("type") == "media" and isinstance(p.get("mime"), str)
                    and (isinstance(p.get("data"), str) or isinstance(p.get("url"), str)))
            )
            for p in output
        )
    )


def _label(part: Mapping[str, Any], why: str) -> str:
    """``[result of tool call ID (error); WHY]``; ``orphan_result_parts``
    writes the same out for a text output (the view's hot path)."""
    return f"[result of tool call {part.get('id')}{' (error)' if part.get('error') else ''}; {why}]"


def provider_rows(rows: Iterable[Any], *, owned: bool = False) -> list[Any]:
    """Filter the rows after the newest boundary into what the model sees.

    ``rows`` are :class:`ledger.core.rows.Row` objects (or dicts). Drops reset rows,
    empty assistant records (rejected requests), unknown and internal kinds
    (a kind that is no string too).
    Tool calls and results are never split: a tool result whose call is not in
    the window (a manual clear or an older writer put the boundary between
    them) would be rejected by every provider, so it is served as user text
    (:func:`orphan_result_parts`) in a copy of its row -- never dropped.
    Only message rows hold calls and results, here as in
    :func:`ledger.core.toolpairs.pair`: a tool part in a lead-in or a warning
    (a caller's, an older build's or hostile bytes) is served as text in a
    copy of its row (:func:`call_text`, the orphan text), so the view and the
    pairing agree on which calls are open; a result in a message row that
    names such a call says where its call is, not that it is in an earlier
    window.

    ``owned``: the caller hands over ``rows`` -- read afresh for this call,
    held by no one else, dropped once the view is made (``History.provider_view``)
    -- so a row served as text is changed in place (:func:`_served_in_place`)
    instead of copied: the same rows come out, without a copy of each
    orphan's row dict (one more dict the cyclic collector counts, and a
    touch of every value of a row decoded a megabyte earlier).
    """
    serve = _served_in_place if owned else _served_copy
    out: list[Any] = []
    append = out.append
    waiting: dict[str, int] = {}  # call id -> calls with that id that have no result yet
    # Call id -> why a result naming it is an orphan when no call with it
    # waits: its newest call has a result already (LATE) or sat in a
    # lead-in or warning; an id not here: its call is in an earlier window.
    # (A dict where a set of answered ids was, so an orphan's reason is one
    # lookup: a longer test there pushed the single-part branch's jump past
    # 255 code units, an EXTENDED_ARG for every message row, instr_ab
    # turns 1.002; bench/RESULTS.md, issue 31 tenth round, req10.)
    gone: dict[str, str] = {}
    kinds = PROVIDER_KINDS
    for item in rows:
        row = item if isinstance(item, dict) else item.data
        kind = row.get("kind", "message")
        if kind != "message":
            # A lead-in or a warning (any other kind is not served, nor is
            # a kind that is no string: hostile bytes): its tool parts are
            # text, never a call or a result (module rule).
            if isinstance(kind, str) and kind in kinds:
                append(_other_kind(item, row, kind, gone, serve))
            continue
        parts = row.get("parts")
        if not parts:
            if row.get("role") == "assistant" and not row.get("partial", False):
                continue  # is_empty_assistant, inlined: this loop runs for every row of a view
            append(item)
            continue
        if not isinstance(parts, list):
            append(item)
            continue
        if len(parts) == 1:
            # One part (nearly every row): no order within the row to keep.
            p = parts[0]
            if isinstance(p, dict):
                t = p.get("type")
                if t == "tool_result":
                    pid = str(p.get("id"))
                    if not _answers(pid, waiting, gone):
                        # An orphan (200 of the bench window's 635 rows):
                        # served as text, its row left with no result.
                        item = serve(item, row, orphan_result_parts(
                            p, gone[pid] if pid in gone else EARLIER), True)
                elif t == "tool_call":
                    pid = str(p.get("id"))
                    waiting[pid] = waiting.get(pid, 0) + 1
            append(item)
            continue
        # One pass over the parts: the results that answer no waiting call
        # (``orphans``), and whether the row makes calls, which count only
        # after its own results (a second pass adds them). Most rows hold
        # neither, and allocate nothing here.
        orphans: dict[int, str] | None = None  # part index -> why it is an orphan
        calls = False
        i = -1
        for p in parts:
            i += 1
            if not isinstance(p, dict):
                continue
            t = p.get("type")
            if t == "tool_result":
                pid = str(p.get("id"))
                if not _answers(pid, waiting, gone):
                    if orphans is None:
                        orphans = {}
                    orphans[i] = gone[pid] if pid in gone else EARLIER
            elif t == "tool_call":
                calls = True
        if orphans is not None:
            item = _served_as_text(item, row, parts, orphans, serve)
        if calls:
            for p in parts:
                if isinstance(p, dict) and p.get("type") == "tool_call":
                    pid = str(p.get("id"))
                    waiting[pid] = waiting.get(pid, 0) + 1
        append(item)
    return out


def _other_kind(item: Any, row: dict[str, Any], kind: str, gone: dict[str, str],
                serve: _Serve) -> Any:
    """``item``, a provider-visible row that is not a message (a lead-in, a
    warning), as served: its tool calls and results, which only message rows
    hold (``ledger.core.toolpairs``), as text parts in a copy of it
    (:func:`call_text`, :func:`orphan_result_parts`; ``serve`` makes the copy, or
    changes a row handed over in place); as it is when it holds none.
    A result naming one of its calls later answers nothing: ``gone`` (call
    id -> why, ``provider_rows``) says its call sat in a row of this kind."""
    parts = row.get("parts")
    if not isinstance(parts, list):
        return item
    new: list[Any] | None = None
    i = -1
    for p in parts:
        i += 1
        t = p.get("type") if isinstance(p, dict) else None
        if t == "tool_result" or t == "tool_call":
            if new is None:
                new = [[q] for q in parts[:i]]
            new.append(other_kind_parts(p, kind))
            if t == "tool_call":
                gone[str(p.get("id"))] = call_sat_in(kind)
        elif new is not None:
            new.append([p])
    return item if new is None else serve(item, row, [q for ps in new for q in ps], True)


def other_kind_parts(part: Mapping[str, Any], kind: str) -> list[dict[str, Any]]:
    """The parts a ``tool_call`` or ``tool_result`` part of a row of ``kind``
    that is not a message (a lead-in, a warning) is sent as (text; a
    result's media parts after its label, :func:`orphan_result_parts`): the
    one wording of the provider view and of the adapters given raw rows
    (``ledger.adapters.common``), so both send such a row alike."""
    why = f"it sat in a {kind} row, not a message row"
    if part.get("type") == "tool_call":
        return [call_text(part, why)]
    return orphan_result_parts(part, why)


def call_text(part: Mapping[str, Any], why: str) -> dict[str, Any]:
    """A text part standing for a tool call that is not served as a call
    (``why``): its id, name and input as JSON."""
    return {"type": "text", "text": f"[tool call {part.get('id')} to {part.get('name')}; "
                                    f"{why}]\n{fmt.encode_json(part.get('input')).decode('utf-8')}"}


def _answers(pid: str, waiting: dict[str, int], gone: dict[str, str]) -> bool:
    """Whether a tool result with call id ``pid`` answers a call still
    waiting for one; it then answers that call (a result answers one call,
    ``ledger.core.toolpairs``), and a later result naming it comes late
    (``gone``, ``provider_rows``). False: the result is an orphan."""
    if waiting.get(pid):
        waiting[pid] -= 1
        gone[pid] = LATE
        return True
    return False


def _served_as_text(item: Any, row: dict[str, Any], parts: list[Any],
                    orphans: dict[int, str], serve: _Serve) -> Any:
    """``item`` served (``serve``: a copy, or in place) with its orphan
    results (part index -> why it is one) as text parts
    (:func:`orphan_result_parts`); a tool row left without any result becomes
    a user row."""
    new_parts: list[Any] = []
    for i, p in enumerate(parts):
        if i in orphans:
            new_parts.extend(orphan_result_parts(p, orphans[i]))
        else:
            new_parts.append(p)
    # Every part an orphan leaves no result; otherwise look at the parts
    # that were not replaced.
    return serve(item, row, new_parts, len(orphans) == len(parts) or not any(
        [isinstance(p, dict) and p.get("type") == "tool_result" for p in new_parts]))


_CHECKSUM_KEY = fmt.CHECKSUM_KEY


def _served_copy(item: Any, row: dict[str, Any], parts: list[Any], no_result: bool) -> Any:
    """A copy of ``item``'s data ``row`` with ``parts`` (a tool row a user
    row when ``no_result``: no result is left in it), in ``item``'s form: a dict
    for a dict, a Row at the same place for a Row; without the stored
    checksum, which no longer matches it. (One copy of the row changed in
    place, not ``{**row, "parts": parts}``, which builds and merges a second
    dict, and one call fewer an orphan: ``provider_rows`` of the bench's
    window 5.62 -> 5.35 M instructions; bench/RESULTS.md, issue 31, eighth
    round.)"""
    new = dict(row)  # a dict, as {**row} made, whatever mapping row is
    new["parts"] = parts
    if no_result and new.get("role") == "tool":
        new["role"] = "user"
    new.pop(_CHECKSUM_KEY, None)
    return new if isinstance(item, dict) else Row(item.line, item.segment, item.offset, new)


def _served_in_place(item: Any, row: dict[str, Any], parts: list[Any], no_result: bool
                      ) -> Any:
    """:func:`_served_copy` for rows the caller has handed over
    (``provider_rows(owned=True)``): ``row`` itself takes ``parts`` (and the
    user role, the checksum dropped) and ``item`` is served, holding it."""
    row["parts"] = parts
    if no_result and row.get("role") == "tool":
        row["role"] = "user"
    row.pop(_CHECKSUM_KEY, None)
    return item


def window_marker(b: Boundary | None) -> int:
    """The window marker of a boundary: its seq, or for an unreadable reset
    candidate the seq it most likely had (one past the last readable row)."""
    if b is None:
        return 0
    return b.seq if b.seq >= 0 else b.after + 1
