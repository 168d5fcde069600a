"""Counting an OpenAI request body the way OpenAI counts it.

OpenAI publishes how a Chat Completions request is counted (the cookbook "How
to count tokens with tiktoken", ``num_tokens_from_messages`` and
``num_tokens_for_tools``); this module applies those rules to the exact body
the adapters send (``ledger.adapters.openai_chat`` / ``openai_responses``):

- **Messages**: ``MESSAGE_TOKENS`` (3) per message, plus every string value of
  the message encoded (``role``, ``content``, ``name``, ``tool_call_id`` and,
  nested, the text of content parts and each tool call's ``id``, ``name`` and
  ``arguments``), ``NAME_TOKENS`` (1) more for a top-level ``name``; the values
  of ``type`` keys are structure, not text, and are not counted. The cookbook
  has no rule of its own for tool calls; counting each of their strings like a
  message value is its rule applied as written, and never short of it.
- **A ``type`` that is no string**, also one that cannot be hashed
  (``{"type": []}``, ``{"type": {...}}``: in a part kept from an import, a
  role, a tool output), is a type the rules do not know, like an unknown
  string: the node is walked like any node (never media) and the value is
  skipped like every ``type`` value. No error: counting measures a body, it
  does not judge it (a provider refuses such a body; the store refuses a row
  whose part has no string ``type``, ``ledger.core.rows``). Only an
  unhashable value makes the media test raise, so the walk catches that
  ``TypeError`` rather than testing each node's type.
- **Reply priming**: ``REPLY_TOKENS`` (3) per request.
- **Function schemas** (:data:`FUNCTION_RULES`, the cookbook's constants per
  encoding): per function ``func_init`` + ``name:description`` (one trailing
  period dropped); when it has properties ``prop_init``, and per property
  ``prop_key`` + ``key:type:description``, an enum ``enum_init`` plus
  ``enum_item`` + the item per item; ``func_end`` once after all functions.
  Schema keywords the rules do not cover (``minimum``, ``items``, nested
  ``properties``...) are charged as JSON (``ledger.tokens.costs.json_cost``)
  and make the count ``exact: false``.
- **Responses** bodies: ``instructions`` and each ``input`` item are counted
  like messages; function tools (flat, ``{"type": "function", "name", ...}``)
  by the same function rules.
- **Media** parts (``image_url``, ``input_audio``, ``file``, ``input_image``,
  ``input_file``) get the media allowance of ``ledger.tokens.costs`` instead of
  their text and make the count ``exact: false``.

Each message's and each schema's count is cached (a :class:`RowTokenCache`
keyed by the xxh3-128 digest of its JSON), so re-counting a grown request
encodes only what is new. Pure: no I/O.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import msgspec
import xxhash

from ledger.tokens.costs import TextFn, json_cost, media_tokens
from ledger.tokens.rows import RowTokenCache
from ledger.tokens.units import ZERO, Count

__all__ = [
    "FUNCTION_RULES",
    "MESSAGE_TOKENS",
    "NAME_TOKENS",
    "REPLY_TOKENS",
    "BodyCounter",
    "ByteBound",
    "FunctionRules",
]

MESSAGE_TOKENS = 3
"""Per message (the cookbook's ``tokens_per_message``)."""

NAME_TOKENS = 1
"""Per top-level ``name`` of a message (``tokens_per_name``)."""

REPLY_TOKENS = 3
"""Per request: every reply is primed with ``<|start|>assistant<|message|>``."""


@dataclass(frozen=True)
class FunctionRules:
    """The cookbook's function-schema constants for one encoding."""

    func_init: int
    prop_init: int
    prop_key: int
    enum_init: int
    enum_item: int
    func_end: int


FUNCTION_RULES: dict[str, FunctionRules] = {
    # gpt-4o, gpt-4o-mini (and the later o200k models)
    "o200k_base": FunctionRules(7, 3, 3, -3, 3, 12),
    # gpt-4, gpt-3.5-turbo; also the rule for any other encoding (the larger one)
    "cl100k_base": FunctionRules(10, 3, 3, -3, 3, 12),
}

_MEDIA_TYPES = frozenset({"image_url", "input_audio", "file", "input_image", "input_file"})
_DATA_URL = re.compile(r"^data:([^;,]+)(?:;[^,]*)?;base64,(.*)$", re.DOTALL)
_AUDIO = {"wav": "audio/wav", "mp3": "audio/mpeg"}
_COVERED_PROPERTY_KEYS = frozenset({"type", "description", "enum"})
_COVERED_SCHEMA_KEYS = frozenset({"type", "properties", "required", "additionalProperties"})
_encoder = msgspec.json.Encoder()
_M = TypeVar("_M", Count, int)  # a walk's measure: tokens, or UTF-8 bytes (a bound)


def _strip_period(text: str) -> str:
    return text[:-1] if text.endswith(".") else text


class _Walk(ABC, Generic[_M]):
    """The rules' walk of a message (the module docstring's **Messages**), the
    one copy of them: ``MESSAGE_TOKENS`` per message, ``NAME_TOKENS`` for a
    top-level ``name`` beside a ``role``, ``type`` values skipped, media nodes
    measured whole (:meth:`_media`), numbers, booleans and null nothing, every
    other string by ``_leaf``. :class:`BodyCounter` measures in tokens
    (:class:`Count`), :class:`ByteBound` in UTF-8 bytes (an ``int``, its
    bound); tests/tokens/test_bodies.py checks that the bound is the count's
    walk and never below the count. The framing and zero measures are
    instance attributes: read as cheaply as the module's constants."""

    _leaf: Callable[[str], _M]
    """A string's measure."""
    _zero: _M
    _per_message: _M
    _per_name: _M

    @abstractmethod
    def _media(self, node: Mapping[str, Any]) -> _M:
        """A media node's measure (``node["type"]`` in ``_MEDIA_TYPES``)."""

    def _message(self, message: Mapping[str, Any]) -> _M:
        total = self._per_message
        for key, value in message.items():
            if key == "type":
                continue
            total += self.value(value)
            if key == "name" and message.get("role") is not None:
                total += self._per_name
        return total

    def value(self, node: Any) -> _M:
        """Every string of ``node`` measured, ``type`` values and media aside."""
        if isinstance(node, str):
            return self._leaf(node)
        if type(node) is dict or isinstance(node, Mapping):  # a dict without the ABC check
            try:  # no isinstance per node: only an unhashable ``type`` raises here
                media = node.get("type") in _MEDIA_TYPES
            except TypeError:  # a list or an object: an unknown type (module doc)
                media = False
            if media:
                return self._media(node)
            total = self._zero
            for key, value in node.items():
                if key != "type":
                    total += self.value(value)
            return total
        if isinstance(node, (list, tuple)):
            total = self._zero
            for item in node:
                total += self.value(item)
            return total
        return self._zero  # numbers, booleans, null: not text the model reads


class _Unbounded(Exception):
    """:class:`ByteBound` gives up on a value (caught in ``ByteBound.messages``)."""


class ByteBound(_Walk[int]):
    """``BodyCounter.message``'s count at most, without the tokenizer: the
    same walk (:class:`_Walk`) with every string at its UTF-8 length, a bound
    of its tokens under a byte-level BPE when it is encoded whole. No bound
    (None) for a message holding media (its allowance is no function of its
    bytes), a string longer than ``limit`` code points (counted in chunks,
    where a forced cut adds slack) or one that is no valid UTF-8 (a lone
    surrogate, counted after a repair)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._zero = 0
        self._per_message = MESSAGE_TOKENS
        self._per_name = NAME_TOKENS

    def messages(self, messages: Iterable[Mapping[str, Any]]) -> int | None:
        """The messages' bound, framing included, or None."""
        total = 0
        try:
            for message in messages:
                total += self._message(message)
        except _Unbounded:
            return None
        return total

    def _leaf(self, text: str) -> int:  # a method: no cycle through a bound method
        if len(text) > self.limit:
            raise _Unbounded
        if text.isascii():  # its length, without encoding a copy
            return len(text)
        try:
            return len(text.encode("utf-8"))
        except UnicodeEncodeError:
            raise _Unbounded from None

    def _media(self, node: Mapping[str, Any]) -> int:
        raise _Unbounded


class BodyCounter(_Walk[Count]):
    """Counts of OpenAI request bodies under one encoding and media profile
    (see the module docstring). ``text`` is the encoding's exact text count."""

    def __init__(
        self,
        text: TextFn,
        *,
        encoding: str,
        media_profile: str = "openai",
        cache: RowTokenCache | None = None,
        profile_key: str = "",
    ) -> None:
        self.text = text
        self._leaf = text
        self._zero = ZERO
        self._per_message = Count(MESSAGE_TOKENS, True)
        self._per_name = Count(NAME_TOKENS, True)
        self.encoding = encoding
        self.media_profile = media_profile
        self.rules = FUNCTION_RULES.get(encoding, FUNCTION_RULES["cl100k_base"])
        self.cache = cache
        self._seed = xxhash.xxh3_64_intdigest(f"{profile_key}|openai-body-1".encode())

    # --- cached units ---------------------------------------------------------------

    def _cached(self, kind: str, obj: Any, measure: Any) -> Count:
        cache = self.cache
        key: bytes | None = None
        if cache is not None:
            try:
                key = xxhash.xxh3_128_digest(_encoder.encode((kind, obj)), self._seed)
            except (TypeError, ValueError, OverflowError):
                key = None
            if key is not None:
                found = cache.get(key)
                if found is not None:
                    return found
        counted: Count = measure(obj)
        if key is not None:
            cache.put(key, counted)  # type: ignore[union-attr]
        return counted

    def message(self, message: Mapping[str, Any]) -> Count:
        """One chat message (or Responses input item), framing included."""
        return self._cached("message", message, self._message)

    def _media(self, node: Mapping[str, Any]) -> Count:
        kind = str(node.get("type"))
        mime, data = "application/octet-stream", None
        nested = node.get(kind)
        inner: Mapping[str, Any] = nested if isinstance(nested, Mapping) else node
        if kind == "input_audio":
            mime = _AUDIO.get(str(inner.get("format")), "audio/wav")
            data = inner.get("data") if isinstance(inner.get("data"), str) else None
        else:
            url = next((inner.get(k) for k in ("url", "image_url", "file_data", "file_url")
                        if isinstance(inner.get(k), str)), None)
            found = _DATA_URL.match(url) if isinstance(url, str) else None
            if found:
                mime, data = found.group(1), found.group(2)
            elif kind in ("image_url", "input_image"):
                mime = "image/*"
        return Count(media_tokens(self.media_profile, mime, data=data), False)

    # --- tools ----------------------------------------------------------------------

    def function(self, tool: Mapping[str, Any]) -> Count:
        """One tool schema, chat (``{"type": "function", "function": {...}}``),
        Responses (flat) or neutral (``name``, ``description``, ``parameters``)."""
        return self._cached("function", tool, self._function)

    def _function(self, tool: Mapping[str, Any]) -> Count:
        nested = tool.get("function")
        fn: Mapping[str, Any] = nested if isinstance(nested, Mapping) else tool
        if tool.get("type", "function") != "function" or not isinstance(fn.get("name"), str):
            # A built-in tool (web search, ...) has no published rule: its JSON.
            return Count(json_cost(tool, self.text).tokens, False)
        rules = self.rules
        description = fn.get("description")
        line = f"{fn['name']}:{_strip_period(description if isinstance(description, str) else '')}"
        total = Count(rules.func_init, True) + self.text(line)
        params = fn.get("parameters")
        if not isinstance(params, Mapping):
            return total
        extra = {k: v for k, v in params.items() if k not in _COVERED_SCHEMA_KEYS}
        props = params.get("properties")
        if isinstance(props, Mapping) and props:
            total += Count(rules.prop_init, True)
            for key, prop in props.items():
                total += Count(rules.prop_key, True) + self._property(str(key), prop)
        if extra:
            total += Count(json_cost(extra, self.text).tokens, False)
        return total

    def _property(self, key: str, prop: Any) -> Count:
        if not isinstance(prop, Mapping):
            return Count(json_cost({key: prop}, self.text).tokens, False)
        rules = self.rules
        total = ZERO
        enum = prop.get("enum")
        if isinstance(enum, list):
            total += Count(rules.enum_init, True)
            for item in enum:
                total += Count(rules.enum_item, True) + self.text(
                    item if isinstance(item, str) else _encoder.encode(item).decode())
        kind = prop.get("type", "")
        exact = isinstance(kind, str)
        if not exact:
            kind = _encoder.encode(kind).decode()
        description = prop.get("description")
        text = _strip_period(description if isinstance(description, str) else "")
        total += self.text(f"{key}:{kind}:{text}")
        extra = {k: v for k, v in prop.items() if k not in _COVERED_PROPERTY_KEYS}
        if extra:
            total += Count(json_cost(extra, self.text).tokens, False)
        if not exact:  # a type list has no published rule: its JSON, an estimate
            total += Count(0, False)
        return total

    def tools(self, tools: Iterable[Mapping[str, Any]]) -> Count:
        """The function rules over a request's tools (``func_end`` once)."""
        total = ZERO
        count = 0
        for tool in tools:
            total += self.function(tool)
            count += 1
        return total + Count(self.rules.func_end, True) if count else ZERO

    # --- bodies ---------------------------------------------------------------------

    def messages(self, messages: Iterable[Mapping[str, Any]]) -> Count:
        total = ZERO
        for message in messages:
            total += self.message(message)
        return total

    def chat(self, body: Mapping[str, Any]) -> Count:
        """A Chat Completions body: messages, reply priming and tools."""
        return (self.messages(body.get("messages") or ()) + Count(REPLY_TOKENS, True)
                + self.tools(body.get("tools") or ()))

    def responses(self, body: Mapping[str, Any]) -> Count:
        """A Responses body: ``instructions``, input items, priming and tools."""
        total = Count(REPLY_TOKENS, True)
        instructions = body.get("instructions")
        if isinstance(instructions, str) and instructions:
            total += self.message({"role": "system", "content": instructions})
        items = body.get("input")
        if isinstance(items, str):
            total += self.message({"role": "user", "content": items})
        else:
            total += self.messages(items or ())
        return total + self.tools(body.get("tools") or ())

    def body(self, api: str, body: Mapping[str, Any]) -> Count:
        """``api`` is ``"openai-chat"`` or ``"openai-responses"``."""
        if api == "openai-chat":
            return self.chat(body)
        if api == "openai-responses":
            return self.responses(body)
        raise ValueError(f"no published counting rules for API {api!r}")
