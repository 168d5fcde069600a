"""Hard preflight guards: does a request fit the model's context window?

A guard counts with the model's resolved encoding (:class:`ledger.tokens.counting.TokenCounter`
in ``"encoding"`` mode; there is no mode argument, so a guard can never use the
approximation) and returns a :class:`Verdict`. An encoding that cannot be
loaded raises :class:`~ledger.core.errors.TokenizerError`: there is no fallback.

An assembled request counts ``REQUEST_FRAMING``, the system text and memory
text (each framed like a row), the *advertised* tool schemas (with tool search,
only those; the caller keeps the full tool map for execution) and the rows.
``tokens = ceil(raw x safety_factor)``; the request fits when
``tokens + output_reserve <= context_limit``, and ``headroom`` is what is left
(negative: over by that much).

Three guards, each with a checking form (returns the verdict) and a raising
form (raises :class:`RequestTooLarge`, a :class:`~ledger.core.errors.BudgetExceeded`
carrying the verdict):

- :func:`fits_fresh_window` / :func:`require_fresh_window`: the payload rows
  (a new message, a rollover's trigger and lead-in) with only the fixed parts
  of a request, as in a brand-new window. Failing this, no rollover can help:
  reject before any provider request.
- :func:`check_request` / :func:`require_request`: the whole assembled request.
- :func:`check_tool_output` / :func:`require_tool_output`: one settled tool
  output as the only row of a fresh window.

Besides the rows, every guard takes the request's fixed parts as keywords,
typed once (:class:`RequestParts`: ``system``, ``memory``, ``tools``,
``advertised``, ``output_reserve``, ``registry``, ``context_limit``).

:func:`estimate_request` is the ordinary, cheap estimate (``mode="approx"`` by
default); it is never a guard. Pure: no I/O besides loading an encoding.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypedDict

import msgspec

from ledger.core.errors import BudgetExceeded
from ledger.tokens.counting import (
    CANONICAL,
    DEFAULT_CACHE,
    MESSAGE_FRAMING,
    REQUEST_FRAMING,
    Count,
    Mode,
    RowShape,
    RowTokenCache,
    TokenCounter,
)
from ledger.tokens.models import ModelConfigError, ModelRegistry, ModelSpec

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack from Python 3.11

__all__ = [
    "RequestParts",
    "RequestTooLarge",
    "Verdict",
    "check_request",
    "check_tool_output",
    "estimate_request",
    "fits_fresh_window",
    "request_bound",
    "request_counter",
    "require_fresh_window",
    "require_request",
    "require_tool_output",
]


class Verdict(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of one guard.

    ``tokens`` is the counted request (safety factor applied, output reserve not
    included); ``limit`` the model's context window; ``headroom`` is
    ``limit - output_reserve - tokens``. ``exact`` is true only when every part
    was counted with the model's own tokenizer and no allowance (framing, JSON
    punctuation, media, forced cut, safety factor) was needed. ``breakdown`` has
    the raw tokens of each part before the safety factor.
    """

    ok: bool
    check: str
    model: str
    encoding: str
    tokens: int
    limit: int
    output_reserve: int
    headroom: int
    exact: bool
    safety_factor: float
    mode: str
    reason: str
    breakdown: dict[str, int]

    def require(self) -> Verdict:
        """Return self when it fits, else raise :class:`RequestTooLarge`."""
        if not self.ok:
            raise RequestTooLarge(self)
        return self


class RequestTooLarge(BudgetExceeded):
    """A request over the model's window; ``.verdict`` says by how much."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.reason)
        self.verdict = verdict


def _framed_text(counter: TokenCounter, text: str) -> Count:
    if not text:
        return Count(0, True)
    return Count(MESSAGE_FRAMING, False) + counter.raw_text(text)


class RequestParts(TypedDict, total=False):
    """The keywords every guard takes besides the rows: the request's fixed
    parts and how to count them, each optional.

    ``system`` and ``memory``: texts counted as framed rows (default "");
    ``tools``: the full tool map (a name -> schema map or a list of schemas);
    ``advertised``: the names the request advertises (tool search; None: all);
    ``output_reserve``: tokens kept for the answer (None: the model's, or 0
    under a ``context_limit``); ``registry``: where the model is looked up;
    ``context_limit``: the caller's token budget, used instead of the model's
    window."""

    system: str
    memory: str
    tools: Any
    advertised: Collection[str] | None
    output_reserve: int | None
    registry: ModelRegistry | None
    context_limit: int | None


_PARTS = frozenset(RequestParts.__annotations__)


def _verdict(
    check: str,
    model: str | ModelSpec,
    rows: Iterable[Mapping[str, Any]],
    fixed: RequestParts,
    *,
    cache: RowTokenCache | None,
    shape: RowShape | None,
    mode: Mode = "encoding",
) -> Verdict:
    unknown = sorted(set(fixed) - _PARTS)
    if unknown:
        raise TypeError(f"{check} guard got unexpected keyword argument(s) {unknown}")
    system, memory = fixed.get("system", ""), fixed.get("memory", "")
    tools, advertised = fixed.get("tools"), fixed.get("advertised")
    output_reserve, registry = fixed.get("output_reserve"), fixed.get("registry")
    context_limit = fixed.get("context_limit")
    counter = TokenCounter(model, mode=mode, registry=registry, cache=cache)
    spec = counter.spec
    limit = spec.context_limit
    if context_limit is not None:
        if isinstance(context_limit, bool) or not isinstance(context_limit, int) or (
            context_limit <= 0
        ):
            raise ModelConfigError(
                f"context_limit must be a positive number of tokens, got {context_limit!r}"
            )
        limit = context_limit
    if shape is None:
        # Rows are counted as the family's API receives them (the adapters).
        from ledger.tokens.shapes import shape_for

        shape = shape_for(family=spec.family)
    request_parts = getattr(shape, "request_parts", None)
    if request_parts is not None:
        # The whole request body as the API receives it (OpenAI: published rules).
        parts = request_parts(counter, rows, system=system, memory=memory, tools=tools,
                              advertised=advertised)
    else:
        parts = {
            "framing": Count(REQUEST_FRAMING, False),
            "system": _framed_text(counter, system),
            "memory": _framed_text(counter, memory),
            "tools": counter.raw_tools(tools, advertised),
            "rows": counter.raw_rows(rows, shape),
        }
    raw = Count(0, True)
    for part in parts.values():
        raw += part
    scaled = counter.scaled(raw)
    if output_reserve is not None:
        reserve = output_reserve
    else:
        # A caller's budget is the room a request may take; the model's output
        # reserve belongs to the model's own window.
        reserve = spec.output_reserve if context_limit is None else 0
    if not 0 <= reserve < limit:
        raise ModelConfigError(
            f"output_reserve {reserve} for model {counter.model!r} must be >= 0 and below "
            f"its context limit {limit}"
        )
    allowed = limit - reserve
    headroom = allowed - scaled.tokens
    estimate = "" if scaled.exact else " (estimate)"
    factor = f" x {spec.safety_factor:g} safety factor" if spec.safety_factor != 1.0 else ""
    what_limit = "context" if context_limit is None else "token budget"
    window = f"{limit:,} {what_limit} - {reserve:,} output reserve for {counter.model!r}"
    if headroom >= 0:
        reason = (
            f"fits: {scaled.tokens:,} tokens{estimate}{factor} of {allowed:,} "
            f"({window}); headroom {headroom:,}"
        )
    else:
        what = {
            "fresh_window": "the payload cannot fit even a fresh context window",
            "tool_output": "the tool output cannot fit even a fresh context window",
            "request": "the assembled request does not fit the context window",
            "estimate": "the request is estimated not to fit the context window",
        }[check]
        reason = (
            f"{what}: {scaled.tokens:,} tokens{estimate}{factor} > {allowed:,} "
            f"({window}); over by {-headroom:,}"
        )
    return Verdict(
        ok=headroom >= 0,
        check=check,
        model=counter.model,
        encoding=spec.encoding,
        tokens=scaled.tokens,
        limit=limit,
        output_reserve=reserve,
        headroom=headroom,
        exact=scaled.exact,
        safety_factor=spec.safety_factor,
        mode=mode,
        reason=reason,
        breakdown={name: part.tokens for name, part in parts.items()},
    )


def check_request(
    model: str | ModelSpec,
    *,
    rows: Iterable[Mapping[str, Any]] = (),
    cache: RowTokenCache | None = DEFAULT_CACHE,
    shape: RowShape | None = None,
    **fixed: Unpack[RequestParts],
) -> Verdict:
    """The assembled-request guard: system + memory + advertised tool schemas +
    rows + output reserve against the context limit.

    ``tools`` is a name -> schema map or a list of schemas (the full tool map);
    ``advertised`` the names the request actually advertises (tool search), or
    None for all of them. ``shape`` defaults to the rows as the model family's
    API adapter renders them (``ledger.tokens.shapes``). ``context_limit`` is
    the caller's token budget, used instead of the model's window (the output
    reserve then defaults to 0: the budget is the room the request may take).
    """
    return _verdict("request", model, rows, fixed, cache=cache, shape=shape)


def fits_fresh_window(
    model: str | ModelSpec,
    rows: Iterable[Mapping[str, Any]],
    *,
    cache: RowTokenCache | None = DEFAULT_CACHE,
    shape: RowShape | None = None,
    **fixed: Unpack[RequestParts],
) -> Verdict:
    """Would ``rows`` fit a brand-new window (with the request's fixed parts)?
    ``ok=False`` means no rollover can help: reject before any provider call.
    ``context_limit``: the caller's budget, as in :func:`check_request`."""
    return _verdict("fresh_window", model, rows, fixed, cache=cache, shape=shape)


def check_tool_output(
    model: str | ModelSpec,
    output: Any,
    *,
    call_id: str = "",
    error: bool = False,
    **fixed: Unpack[RequestParts],
) -> Verdict:
    """Would one settled tool output fit a fresh window on its own?"""
    row = {
        "kind": "message",
        "role": "tool",
        "parts": [{"type": "tool_result", "id": call_id, "output": output, "error": error}],
    }
    return _verdict("tool_output", model, [row], fixed, cache=None, shape=CANONICAL)


def require_request(model: str | ModelSpec, **kwargs: Any) -> Verdict:
    """:func:`check_request`, raising :class:`RequestTooLarge` when it does not fit."""
    return check_request(model, **kwargs).require()


def require_fresh_window(
    model: str | ModelSpec, rows: Iterable[Mapping[str, Any]], **kwargs: Any
) -> Verdict:
    """:func:`fits_fresh_window`, raising :class:`RequestTooLarge` when it does not fit."""
    return fits_fresh_window(model, rows, **kwargs).require()


def require_tool_output(model: str | ModelSpec, output: Any, **kwargs: Any) -> Verdict:
    """:func:`check_tool_output`, raising :class:`RequestTooLarge` when it does not fit."""
    return check_tool_output(model, output, **kwargs).require()


def estimate_request(
    model: str | ModelSpec,
    *,
    rows: Iterable[Mapping[str, Any]] = (),
    mode: Mode = "approx",
    cache: RowTokenCache | None = DEFAULT_CACHE,
    **fixed: Unpack[RequestParts],
) -> Verdict:
    """An ordinary estimate (``check="estimate"``); cheap by default. Not a guard."""
    return _verdict("estimate", model, rows, fixed, cache=cache, shape=CANONICAL, mode=mode)


def _request_fields(request: Any) -> tuple[list[Mapping[str, Any]], str, str, list[Any]]:
    """What :func:`request_counter` and :func:`request_bound` read from a
    request: its ``messages`` as rows (canonical rows or objects with
    ``to_dict()``), and its ``system``, ``memory`` and ``tools`` (the
    advertised schemas)."""
    rows = [m if isinstance(m, dict) or isinstance(m, Mapping) else m.to_dict()
            for m in request.messages]
    return (rows, getattr(request, "system", "") or "", getattr(request, "memory", "") or "",
            list(getattr(request, "tools", ()) or ()))


def request_counter(
    *,
    registry: ModelRegistry | None = None,
    cache: RowTokenCache | None = DEFAULT_CACHE,
) -> Callable[[Any], tuple[int, bool]]:
    """A ``count(request) -> (tokens, exact)`` for ``ledger.rollover.engine``: reads
    ``model``, ``system``, ``memory``, ``tools`` (the advertised schemas) and
    ``messages`` (canonical rows or objects with ``to_dict()``) from the request
    and counts them like :func:`check_request`."""

    def count(request: Any) -> tuple[int, bool]:
        rows, system, memory, tools = _request_fields(request)
        verdict = check_request(request.model, rows=rows, system=system, memory=memory,
                                tools=tools, registry=registry, cache=cache)
        return verdict.tokens, verdict.exact

    return count


def request_bound(
    *,
    registry: ModelRegistry | None = None,
    cache: RowTokenCache | None = DEFAULT_CACHE,
) -> Callable[[Any], int | None]:
    """A ``bound(request) -> tokens | None`` beside :func:`request_counter`:
    a number the counter's tokens for the same request are surely not
    above, found without the tokenizer (``BodyShape.request_bound``, safety
    factor applied), or None when there is no such bound (a model family
    whose requests are not counted by OpenAI's body rules, media, a very
    long string). A caller that only asks whether a request is above a
    ceiling counts it only when the bound is above the ceiling."""

    def bound(request: Any) -> int | None:
        counter = TokenCounter(request.model, registry=registry, cache=cache)
        from ledger.tokens.shapes import BodyShape, shape_for

        shape = shape_for(family=counter.spec.family)
        if not isinstance(shape, BodyShape):
            return None
        rows, system, memory, tools = _request_fields(request)
        raw = shape.request_bound(counter, rows, system=system, memory=memory, tools=tools)
        return None if raw is None else counter.scaled(Count(raw, False)).tokens

    return bound
