"""Counting rows as a provider API receives them (``ledger.tokens.counting.RowShape``).

OpenAI APIs (:class:`BodyShape`): a guard renders the whole request body --
the system text (with the memory text after a blank line, as
``Request.openai_chat`` sends it), the rows, the advertised tools -- with the
API's adapter and counts it by OpenAI's published rules
(``ledger.tokens.bodies``): the count is the count of what is sent, exact for
an exact model unless media or schema keywords outside the rules are present.

Other APIs (:class:`AdapterShape`, Anthropic's): each row is rendered by the
API's adapter, with the bytes of genuine media parts taken out first; the
rendered JSON is then charged as JSON and each media part gets its documented
allowance instead of being counted as text. A tool call is rendered with its
result and a result with its call, the way the adapter pairs them; both are
charged where they stand, so a pair is counted about twice its framing:
conservative, never short. Anthropic publishes no tokenizer: an estimate.

Hostile rows: a part ``type`` or a row ``kind`` that is no string, also one
that cannot be hashed (``[]``, ``{}``), is a type or kind this build does not
know, treated exactly as an unknown string is (the adapters drop such a part
and do not send such a row; the cuts of :func:`_blocks` never separate at
it): counting measures rows, it does not judge them (the store refuses such
a row when it is appended). A row that is no object, or whose ``parts`` is no
list, is no row at all: :class:`InvalidRow` naming its index among the rows
given (``ledger.adapters.common.row_shape_error``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import msgspec
import xxhash

from ledger.adapters import ADAPTERS
from ledger.adapters.common import is_visible, row_shape_error
from ledger.core.errors import InvalidRow
from ledger.tokens.bodies import REPLY_TOKENS, BodyCounter, ByteBound
from ledger.tokens.counting import (
    CANONICAL,
    Accountant,
    Count,
    InvalidTools,
    RowShape,
    _normalize_tools,
    media_info,
)

if TYPE_CHECKING:
    from ledger.tokens.bodies import BodyCounter
    from ledger.tokens.counting import TokenCounter
    from ledger.tokens.units import TokenCount

__all__ = [
    "BODY_APIS",
    "FAMILY_API",
    "AdapterShape",
    "BodyShape",
    "api_tool",
    "count_view",
    "neutral_tool",
    "shape_for",
]

# The API a model family's requests go to (others use Chat Completions, the
# most common wire shape).
FAMILY_API = {"openai": "openai-chat", "anthropic": "anthropic"}
BODY_APIS = frozenset({"openai-chat", "openai-responses"})
_PLACEHOLDER = "AAAA"
_RECENT = 16
_BLOCKS = 8192


def _parts(row: Mapping[str, Any]) -> list[Any]:
    parts = row.get("parts")
    return parts if isinstance(parts, list) else []


def _is_map(part: Any) -> bool:
    return type(part) is dict or isinstance(part, Mapping)


def _end_role(row: Mapping[str, Any], kinds: set[Any]) -> str | None:
    """The role of the last turn a visible row surely renders, else None."""
    role = row.get("role")
    if role == "tool" and kinds == {"tool_result"}:
        return "tool"
    if role == "user" and kinds == {"text"}:
        return "user"
    if role == "assistant" and "text" in kinds and "tool_call" not in kinds and (
            "tool_result" not in kinds):
        return "assistant"
    return None


def _start_role(row: Mapping[str, Any], kinds: set[Any]) -> str | None:
    """The role of the first turn a visible row surely renders, else None."""
    if row.get("kind", "message") != "message":
        return None
    role = row.get("role")
    if role == "user" and kinds == {"text"}:
        return "user"
    if role == "assistant" and ("text" in kinds or "tool_call" in kinds):
        return "assistant"
    return None


_NO_TYPE = object()
"""What a part's ``type`` that cannot be hashed (a list, an object) stands as
among a row's part types: no type this module knows (module doc)."""


def _kinds(parts: list[Any]) -> set[Any]:
    """The part types of a row as :func:`_blocks` reads them, an unhashable
    ``type`` standing as :data:`_NO_TYPE` (the slow path, taken only then)."""
    kinds: set[Any] = set()
    for part in parts:
        kind = part.get("type") if _is_map(part) else None
        kinds.add(kind if kind is None or isinstance(kind, str) else _NO_TYPE)
    return kinds


# Turn roles a cut may separate: never equal roles (the adapters merge them),
# never tool -> user (Chat Completions merges a tool result's media message
# with the next user message).
_CUTS = frozenset({("assistant", "user"), ("user", "assistant"), ("tool", "assistant")})


def _blocks(rows: list[Mapping[str, Any]], first: int = 0) -> list[list[Mapping[str, Any]]]:
    """``rows`` cut where the adapters render each side on its own: between
    two visible rows whose turns surely differ in role (:data:`_CUTS`), when
    no result from there on names a call made before it. The rendered body is
    then the concatenation of the blocks' renderings (no merge, no pairing
    crosses a cut), so each block's count is cached and a grown request
    renders only its last block (tests/tokens/test_bodies.py checks the sum
    against the whole body over random histories). A row that is no row
    (``row_shape_error``) raises :class:`InvalidRow` naming its index less
    ``first`` (the caller's index: ``rows[:first]`` is the system message)."""
    later_results: dict[str, int] = {}
    for index, row in enumerate(rows):
        if (error := row_shape_error(row)) is not None:
            raise InvalidRow(f"row {index - first}: {error}", index - first)
        for part in _parts(row):
            if _is_map(part) and part.get("type") == "tool_result":
                key = str(part.get("id"))
                later_results[key] = later_results.get(key, 0) + 1
    answered_later: set[str] = set()  # calls made so far that a later result names
    blocks: list[list[Mapping[str, Any]]] = [[]]
    end: str | None = None
    for row in rows:
        parts = _parts(row)
        visible = is_visible(row)
        try:  # no test per part: only an unhashable ``type`` raises here
            kinds = {p.get("type") if _is_map(p) else None for p in parts}
        except TypeError:
            kinds = _kinds(parts)
        if visible and end is not None and not answered_later and (
                end, _start_role(row, kinds)) in _CUTS:
            blocks.append([])
        blocks[-1].append(row)
        if "tool_result" not in kinds and "tool_call" not in kinds:
            if visible:
                end = _end_role(row, kinds)
            continue
        for part in parts:
            if not _is_map(part):
                continue
            if part.get("type") == "tool_result":
                key = str(part.get("id"))
                later_results[key] -= 1
                if not later_results[key]:
                    del later_results[key]
                    answered_later.discard(key)
            elif part.get("type") == "tool_call" and str(part.get("id")) in later_results:
                answered_later.add(str(part.get("id")))
        if visible:
            end = _end_role(row, kinds)
    return [b for b in blocks if b]


_encoder = msgspec.json.Encoder()


def _memo_key(counter: TokenCounter, value: Any) -> bytes | None:
    """The key of ``value``'s count by ``counter`` in a ``BodyShape`` memo
    (its profile and ``value``, encoded and hashed), or None: nothing is kept
    when the counter has no cache (``cache=None`` means no caching at all)
    or ``value`` cannot be encoded."""
    if counter.cache is None:
        return None
    try:
        return xxhash.xxh3_128_digest(_encoder.encode((counter.profile_key, value)))
    except (TypeError, ValueError, OverflowError):
        return None


def neutral_tool(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A tool schema in the neutral form (``name``, ``description``,
    ``parameters``) from the neutral, Chat Completions, Responses or
    Anthropic form; another shape (a built-in tool) is returned as it is."""
    inner = schema.get("function")
    if isinstance(inner, Mapping):
        schema = inner
    if not isinstance(schema.get("name"), str):
        return dict(schema)
    out: dict[str, Any] = {"name": schema["name"]}
    if "description" in schema:
        out["description"] = schema["description"]
    params = schema.get("parameters", schema.get("input_schema"))
    if params is not None:
        out["parameters"] = params
    return out


def api_tool(api: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    """A neutral tool schema as ``api`` advertises it (``Request``'s forms)."""
    tool = neutral_tool(schema)
    if "name" not in tool or (schema.get("type") not in (None, "function")):
        return dict(schema)
    if api == "openai-chat":
        return {"type": "function", "function": tool}
    if api == "openai-responses":
        return {"type": "function", **tool}
    return {"name": tool["name"], "description": tool.get("description", ""),
            "input_schema": tool.get("parameters", {"type": "object"})}


class BodyShape:
    """Rows in a whole OpenAI request body, counted by the published rules
    (``ledger.tokens.bodies``). Guards call :meth:`request_parts`; ``measure``
    (one row alone in a body) serves per-row callers."""

    def __init__(self, api: str) -> None:
        if api not in BODY_APIS:
            raise ValueError(f"no published counting rules for API {api!r}: one of "
                             f"{sorted(BODY_APIS)}")
        self.api = api
        self.key = f"body-{api}-1"
        self._items = "messages" if api == "openai-chat" else "input"
        # One send counts the same request more than once (the decision, then
        # the check of the request it returns): the last few are kept.
        self._recent: OrderedDict[bytes, dict[str, Count]] = OrderedDict()
        self._done: OrderedDict[bytes, tuple[Count, Count]] = OrderedDict()
        self._tool_counts: OrderedDict[bytes, int] = OrderedDict()
        self._lock = threading.Lock()

    def measure(self, row: Mapping[str, Any], acct: Accountant) -> Count:
        if (error := row_shape_error(row)) is not None:
            raise InvalidRow(error)  # counter.raw_rows names the row
        body = ADAPTERS[self.api].to_request([row])
        counter = BodyCounter(acct.text, encoding="", media_profile=acct.media_profile)
        return counter.messages(body[self._items])

    def request_parts(
        self,
        counter: TokenCounter,
        rows: Iterable[Mapping[str, Any]],
        *,
        system: str = "",
        memory: str = "",
        tools: Any = None,
        advertised: Collection[str] | None = None,
    ) -> dict[str, Count]:
        """The parts of the request body's count: ``framing`` (reply priming),
        ``system`` (the first message, when there is system text), ``tools``
        (the function rules) and ``rows`` (every other message); ``memory`` is
        sent inside the system message and is counted there."""
        rows = list(rows)
        key = _memo_key(counter, (rows, system, memory, tools,
                                  None if advertised is None else list(advertised)))
        if key is not None and (found := self._recent.get(key)) is not None:
            return dict(found)
        parts = self._request_parts(counter, rows, system, memory, tools, advertised)
        if key is not None:
            self._remember(self._recent, key, parts, _RECENT)
        return dict(parts)

    def _remember(self, memo: OrderedDict[bytes, Any], key: bytes, value: Any,
                  most: int) -> None:
        """Keep ``value`` in ``memo`` under ``key``, the newest, with at most
        ``most`` entries (the oldest go first)."""
        with self._lock:
            memo[key] = value
            while len(memo) > most:
                memo.popitem(last=False)

    def _request_parts(
        self,
        counter: TokenCounter,
        rows: list[Mapping[str, Any]],
        system: str,
        memory: str,
        tools: Any,
        advertised: Collection[str] | None,
    ) -> dict[str, Count]:
        head, schemas = self._head(system, memory), self._schemas(tools, advertised)
        bodies = counter.body_counter()
        system_count = Count(0, True)
        total = Count(0, True)
        for index, block in enumerate(_blocks([*head, *rows], len(head))):
            first, counted = self._block(counter, bodies, block)
            if index == 0 and head:
                system_count = first
                counted = Count(counted.tokens - first.tokens, counted.exact)
            total += counted
        return {
            "framing": Count(REPLY_TOKENS, True),
            "system": system_count,
            "memory": Count(0, True),
            "tools": bodies.tools(schemas),
            "rows": total,
        }

    @staticmethod
    def _head(system: str, memory: str) -> list[dict[str, Any]]:
        """The system message as a row (none without text): the system text
        with the memory text after a blank line."""
        text = f"{system}\n\n{memory}" if system and memory else (system or memory)
        return ([{"kind": "message", "role": "system", "parts": [{"type": "text", "text": text}]}]
                if text else [])

    def _schemas(self, tools: Any, advertised: Collection[str] | None) -> list[dict[str, Any]]:
        """The advertised tool schemas in this API's form."""
        table = _normalize_tools(tools)
        names = list(table) if advertised is None else list(dict.fromkeys(advertised))
        missing = [name for name in names if name not in table]
        if missing:
            raise InvalidTools(f"advertised tools without a schema: {', '.join(sorted(missing))}")
        return [api_tool(self.api, table[name]) for name in names]

    def request_bound(
        self,
        counter: TokenCounter,
        rows: Iterable[Mapping[str, Any]],
        *,
        system: str = "",
        memory: str = "",
        tools: Any = None,
        advertised: Collection[str] | None = None,
    ) -> int | None:
        """A number of tokens the raw total of :meth:`request_parts` (before
        the safety factor) is surely not above, found without the
        tokenizer: the same blocks rendered the same way, each message
        walked by the count's own rules with every string at its UTF-8
        length (``ledger.tokens.bodies.ByteBound``) -- a byte-level BPE
        token is at least one byte, and a string no longer than the
        counter's chunk is encoded whole, never cut. The tools are counted
        exactly (cached). None when a message holds media (its allowance
        is no function of its bytes) or a string that could be cut or is no
        valid UTF-8: then only the count itself can say.

        What it is for: a guard that only asks "above the ceiling?" (the
        fresh-window check of ``Conversation.record``, rule B5) counts only
        when the bound is above it."""
        if counter.mode != "encoding":
            return None  # an approximation's counts are no function of bytes
        bound = ByteBound(counter.chunk_chars)
        total = REPLY_TOKENS + self._tools(counter, tools, advertised)
        render = ADAPTERS[self.api].to_request
        head = self._head(system, memory)
        for block in _blocks([*head, *rows], len(head)):
            found = bound.messages(render(block)[self._items])
            if found is None:
                return None
            total += found
        return total

    def _tools(self, counter: TokenCounter, tools: Any,
               advertised: Collection[str] | None) -> int:
        """The tools' exact count (``BodyCounter.tools`` of the advertised schemas),
        kept per tool map: a conversation advertises the same tools on
        every request."""
        key = _memo_key(counter, (tools, None if advertised is None else list(advertised)))
        if key is not None and (found := self._tool_counts.get(key)) is not None:
            return found
        tokens = counter.body_counter().tools(self._schemas(tools, advertised)).tokens
        if key is not None:
            self._remember(self._tool_counts, key, tokens, _RECENT)
        return tokens

    def _block(self, counter: TokenCounter, bodies: BodyCounter,
               block: list[Mapping[str, Any]]) -> tuple[Count, Count]:
        """(first message, all messages) of one independent block, cached."""
        key = _memo_key(counter, block)
        if key is not None and (found := self._done.get(key)) is not None:
            return found
        items = list(ADAPTERS[self.api].to_request(block)[self._items])
        result = (bodies.message(items[0]) if items else Count(0, True), bodies.messages(items))
        if key is not None:
            self._remember(self._done, key, result, _BLOCKS)
        return result


class AdapterShape:
    """Rows as the adapter of ``api`` renders them."""

    def __init__(self, api: str) -> None:
        if api not in ADAPTERS:
            raise ValueError(f"unknown API {api!r}: one of {sorted(ADAPTERS)}")
        self.api = api
        self.key = f"adapter-{api}-1"

    def measure(self, row: Mapping[str, Any], acct: Accountant) -> Count:
        if (error := row_shape_error(row)) is not None:
            raise InvalidRow(error)  # counter.raw_rows names the row
        parts = row.get("parts")
        media: list[dict[str, Any]] = []
        if isinstance(parts, list):
            stripped = []
            for part in parts:
                info = media_info(part) if isinstance(part, Mapping) else None
                if info is not None:
                    media.append(info)
                    part = {**part, "data": _PLACEHOLDER} if "data" in part else part
                stripped.append(part)
            row = {**row, "parts": stripped}
        body = ADAPTERS[self.api].to_request([row])
        body.pop("model", None)
        total = acct.json(body)
        for info in media:
            total += acct.media(info)
        return total


def shape_for(api: str | None = None, family: str | None = None) -> RowShape:
    """The row shape of ``api``, or of a model ``family``'s usual API
    (OpenAI's two APIs: :class:`BodyShape`, others :class:`AdapterShape`);
    ``"canonical"`` counts the canonical JSON row; ``"adapter-<api>"`` the
    per-row rendered JSON even for an OpenAI API (the pre-body estimate)."""
    if api is not None and api.startswith("adapter-"):
        return AdapterShape(api[len("adapter-"):])
    if api == "canonical":
        return CANONICAL
    if api is None:
        api = FAMILY_API.get(family or "", "openai-chat")
    return _BODY_SHAPES[api] if api in BODY_APIS else AdapterShape(api)


_BODY_SHAPES = {api: BodyShape(api) for api in sorted(BODY_APIS)}


def count_view(counter: TokenCounter, rows: Iterable[Mapping[str, Any]],
               shape: RowShape) -> TokenCount:
    """Rows as ``shape`` sends them, without a request's fixed parts: with a
    :class:`BodyShape` the messages of the rendered body (so calls and results
    are paired as sent), else the per-row sum."""
    if isinstance(shape, BodyShape):
        parts = shape.request_parts(counter, rows)
        return counter.scaled(parts["rows"])
    return counter.rows(rows, shape)
