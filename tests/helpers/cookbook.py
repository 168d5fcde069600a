"""The reference count of an OpenAI request body: OpenAI's cookbook "How to
count tokens with tiktoken" (``num_tokens_from_messages`` and
``num_tokens_for_tools``) transcribed as published, over the exact body, with
the real tiktoken encoding. Written apart from ``ledger.tokens.bodies`` so that
tests compare the ledger's counts against it, not against themselves.

The cookbook's message loop encodes each message value; for the nested values
a body also holds (content parts, ``tool_calls``, Responses items) every
string is encoded, ``type`` values (structure) aside. Media parts are left
out: OpenAI bills them by their own rules (image tiles), not as text.
"""

from __future__ import annotations

from typing import Any

from ledger.tokens.encodings import get_encoding

_CONSTANTS = {  # func_init, prop_init, prop_key, enum_init, enum_item, func_end
    "o200k_base": (7, 3, 3, -3, 3, 12),
    "cl100k_base": (10, 3, 3, -3, 3, 12),
}


_MEDIA = frozenset({"image_url", "input_image", "input_audio", "file", "input_file"})


def _strings(value: Any, n: Any) -> int:
    if isinstance(value, str):
        return n(value)
    if isinstance(value, dict) and value.get("type") in _MEDIA:
        return 0  # billed by its own rules (image tiles...), not as text
    if isinstance(value, dict):
        return sum(_strings(v, n) for k, v in value.items() if k != "type")
    if isinstance(value, list):
        return sum(_strings(v, n) for v in value)
    return 0


def num_tokens_from_messages(messages: list[dict[str, Any]], encoding: str = "o200k_base") -> int:
    enc = get_encoding(encoding)

    def n(text: str) -> int:
        return len(enc.encode_ordinary(text))

    tokens_per_message, tokens_per_name = 3, 1
    num_tokens = 0
    for message in messages:
        num_tokens += tokens_per_message
        for key, value in message.items():
            if key == "type":
                continue
            num_tokens += _strings(value, n)
            if key == "name":
                num_tokens += tokens_per_name
    return num_tokens + 3  # every reply is primed with <|start|>assistant<|message|>


def num_tokens_for_tools(functions: list[dict[str, Any]], encoding: str = "o200k_base") -> int:
    enc = get_encoding(encoding)
    func_init, prop_init, prop_key, enum_init, enum_item, func_end = _CONSTANTS[encoding]
    func_token_count = 0
    if len(functions) > 0:
        for f in functions:
            func_token_count += func_init
            function = f.get("function", f)
            f_name = function["name"]
            f_desc = function.get("description", "")
            if f_desc.endswith("."):
                f_desc = f_desc[:-1]
            line = f_name + ":" + f_desc
            func_token_count += len(enc.encode_ordinary(line))
            properties = function.get("parameters", {}).get("properties", {})
            if len(properties) > 0:
                func_token_count += prop_init
                for key in list(properties.keys()):
                    func_token_count += prop_key
                    p_name = key
                    p_type = properties[key]["type"]
                    p_desc = properties[key].get("description", "")
                    if "enum" in properties[key]:
                        func_token_count += enum_init
                        for item in properties[key]["enum"]:
                            func_token_count += enum_item
                            func_token_count += len(enc.encode_ordinary(item))
                    if p_desc.endswith("."):
                        p_desc = p_desc[:-1]
                    line = f"{p_name}:{p_type}:{p_desc}"
                    func_token_count += len(enc.encode_ordinary(line))
        func_token_count += func_end
    return func_token_count


def chat_body_tokens(body: dict[str, Any], encoding: str = "o200k_base") -> int:
    """A Chat Completions body: messages plus tools."""
    return (num_tokens_from_messages(body["messages"], encoding)
            + num_tokens_for_tools(body.get("tools") or [], encoding))


def responses_body_tokens(body: dict[str, Any], encoding: str = "o200k_base") -> int:
    """A Responses body: ``instructions`` and input items as messages, plus tools."""
    items = list(body.get("input") or [])
    if body.get("instructions"):
        items.insert(0, {"role": "system", "content": body["instructions"]})
    messages = [{k: v for k, v in item.items() if k != "type"} for item in items]
    # "name" of a function_call item is the function's, not a participant's
    extra_names = sum(1 for item in items if item.get("type") == "function_call")
    return (num_tokens_from_messages(messages, encoding) - extra_names
            + num_tokens_for_tools(body.get("tools") or [], encoding))
