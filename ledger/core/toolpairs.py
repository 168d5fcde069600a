"""Tool calls paired with their results: the rule, and the code most layers
use (``History.rollover``'s split check, the rollover engine's carry and
admission, ``Conversation``'s and the Agents SDK session's open calls, the
row engines' ``check``; the file engine's check streams the same rule in
``ledger.storage.files.pairs``, and the provider view counts open calls per
id in ``ledger.core.windows``). Which rows hold calls and results at all is
:func:`holds_tool_parts` (the provider adapters ask it too; the view's and
the file check's hot loops test the same ``kind`` inline).

Pure: rows in (canonical dicts or ``Row`` objects), pairs out.

Rules
=====
- Only ``message`` rows hold calls and results (a missing ``kind`` is a
  message); parts of type ``tool_call`` and ``tool_result`` are read by ``id``.
  Such a part in a lead-in or a warning pairs with nothing: the provider
  view and the adapters (``ledger.adapters.common``) send it as text, and
  the file engine's check skips it too.
- **A call id is scoped to its step.** A result answers the newest call
  before it with the same id that has no result yet. So a provider that
  reuses ``call_0`` in every step pairs each result with its own step's call,
  and an older step's results are never pulled along with a newer one.
- A result that answers no call (its call is in an earlier window, or its
  call already has a result: it came late) is *unmatched*.
- A **step** is a run of adjacent assistant message rows, one of them holding
  a call: the model's output of one turn (one row from ``Conversation``; one
  row per item from the Agents SDK, whose parallel calls are separate items).
  Rows of another kind (warnings) neither join nor end a run. A rollover that
  settles a step carries the step whole: every row of it and every row
  holding one of its results.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Call", "Pairing", "SplitCheck", "holds_tool_parts", "pair", "split_check"]


def holds_tool_parts(row: Mapping[str, Any]) -> bool:
    """Whether the ``tool_call`` and ``tool_result`` parts of ``row`` (a
    canonical row) are calls and results (module rules): only a message's
    are, a row without ``kind`` being a message. Another kind's (a lead-in's,
    a warning's) pair with nothing and are sent as text."""
    return row.get("kind", "message") == "message"


@dataclass
class Call:
    """One tool call: where it is (row index, part index), its id and name,
    the step it belongs to, and the row index of its result (None: open)."""

    row: int
    part: int
    id: str
    name: str | None
    step: int
    result: int | None = None


@dataclass
class Pairing:
    """The calls, results and steps of a list of rows (:func:`pair`)."""

    calls: list[Call] = field(default_factory=list)
    # (row index, result id, index into ``calls`` or None when unmatched)
    results: list[tuple[int, str, int | None]] = field(default_factory=list)
    steps: list[list[int]] = field(default_factory=list)  # row indexes of each step

    def open_calls(self) -> list[Call]:
        """Calls without a result, in order."""
        return [c for c in self.calls if c.result is None]

    def unmatched(self) -> list[tuple[int, str]]:
        """(row index, id) of each result that answers no call."""
        return [(row, rid) for row, rid, call in self.results if call is None]


def _data(row: Any) -> Mapping[str, Any]:
    # A dict first: an ABC check costs several times a type check, and
    # pairing runs over every row of a window (bench/RESULTS.md, turns4).
    if isinstance(row, dict) or isinstance(row, Mapping):
        return row
    data = getattr(row, "data", None)
    return data if isinstance(data, Mapping) else row.to_dict()


def pair(rows: Iterable[Any], *, step_break: int | None = None) -> Pairing:
    """Pair the calls and results of ``rows`` (module doc). ``step_break`` is
    a row index where a step may not continue (the first row of a trigger)."""
    out = Pairing()
    waiting: dict[str, list[int]] = {}  # id -> indexes into out.calls, open, oldest first
    run: list[int] | None = None  # the assistant run being read
    run_step: int | None = None  # its step index, once it holds a call
    for i, item in enumerate(rows):
        row = _data(item)
        if i == step_break:
            run, run_step = None, None
        if not holds_tool_parts(row):
            continue
        parts = row.get("parts")
        parts = parts if isinstance(parts, list) else []
        if not parts:
            continue  # an empty record (a rejected request) joins nothing
        if row.get("role") == "assistant":
            if run is None:
                run, run_step = [], None
            run.append(i)
        else:
            run, run_step = None, None
        for j, part in enumerate(parts):
            if not (isinstance(part, dict) or isinstance(part, Mapping)):
                continue
            kind = part.get("type")
            if kind == "tool_call":
                if run is None:  # a call outside an assistant row: its own step
                    run, run_step = [i], None
                if run_step is None:
                    run_step = len(out.steps)
                    out.steps.append(run)
                pid = str(part.get("id"))
                name = part.get("name")
                waiting.setdefault(pid, []).append(len(out.calls))
                out.calls.append(Call(i, j, pid, name if isinstance(name, str) else None,
                                      run_step))
            elif kind == "tool_result":
                pid = str(part.get("id"))
                open_ = waiting.get(pid)
                if open_:
                    k = open_.pop()  # the newest open call with this id
                    out.calls[k].result = i
                    out.results.append((i, pid, k))
                else:
                    out.results.append((i, pid, None))
        if row.get("role") != "assistant":
            run, run_step = None, None
    return out


@dataclass(frozen=True)
class SplitCheck:
    """What a rollover of ``view`` with ``trigger`` would split
    (:func:`split_check`): ids of calls in the view left without a result,
    of calls in the trigger without one, and of results in the trigger whose
    call would stay sealed in the view."""

    open_view: tuple[str, ...]
    open_trigger: tuple[str, ...]
    split: tuple[str, ...]


def split_check(view: Sequence[Any], trigger: Sequence[Any]) -> SplitCheck:
    """Pair ``[*view, *trigger]`` and say what a boundary between them splits.
    View rows the trigger carries (a trigger row's ``meta.carried_from`` is
    their seq) move to the new window with it: they are left out of the view."""
    carried = set()
    for row in trigger:
        meta = _data(row).get("meta")
        if isinstance(meta, Mapping) and isinstance(meta.get("carried_from"), int):
            carried.add(meta["carried_from"])
    if carried:
        view = [r for r in view if _data(r).get("seq") not in carried]
    n = len(view)
    p = pair([*view, *trigger], step_break=n)
    open_view = tuple(c.id for c in p.calls if c.result is None and c.row < n)
    open_trigger = tuple(c.id for c in p.calls if c.result is None and c.row >= n)
    split = tuple(rid for row, rid, k in p.results
                  if row >= n and k is not None and p.calls[k].row < n)
    return SplitCheck(open_view, open_trigger, split)
