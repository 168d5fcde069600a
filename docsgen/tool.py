"""The ``session_history`` reference: its schema, arguments and error codes,
from ``ledger.transcript.retrieval`` (the schema every adapter advertises)."""

from __future__ import annotations

import json
from typing import Any

from ledger.transcript.retrieval import args, results


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _kind(spec: dict[str, Any]) -> str:
    """A JSON schema's type as a cell: ``string``, ``integer: 1, 2``,
    ``string or array of string`` (``type`` lists, ``anyOf`` / ``oneOf``)."""
    if "anyOf" in spec or "oneOf" in spec:
        return " or ".join(_kind(s) for s in spec.get("anyOf", spec.get("oneOf", [])))
    kind = spec.get("type", "")
    if isinstance(kind, list):
        kind = " or ".join(kind)
    if kind == "array" and isinstance(spec.get("items"), dict):
        kind = "array of " + _kind(spec["items"])
    if "enum" in spec:
        kind += ": " + ", ".join(f"`{v}`" for v in spec["enum"])
    return str(kind)


def arguments() -> str:
    props = args.PARAMETERS["properties"]
    required = set(args.PARAMETERS.get("required", ()))
    out = ["| argument | type | " + " | ".join(f"`{a}`" for a in args.ACTIONS)
           + " | description |",
           "|---|---|" + "---|" * len(args.ACTIONS) + "---|"]
    for name, spec in props.items():
        kind = _kind(spec)
        used = ["required" if name in required else
                ("yes" if name in args.ALLOWED_ARGS[a] else "") for a in args.ACTIONS]
        out.append(f"| `{name}` | {_cell(kind)} | " + " | ".join(used)
                   + f" | {_cell(spec.get('description', ''))} |")
    return "\n".join(out) + "\n"


def description() -> str:
    return "> " + args.DESCRIPTION + "\n"


def schema() -> str:
    body = {"name": "session_history", "description": args.DESCRIPTION,
            "parameters": args.PARAMETERS}
    return "```json\n" + json.dumps(body, indent=2, ensure_ascii=False) + "\n```\n"


def errors() -> str:
    return ", ".join(f"`{code}`" for code in results.ERROR_CODES) + "\n"


def limits() -> str:
    from ledger.core import bounds

    rows = [
        ("`limit` of `list` and `search` (items)", f"{args.LIMIT_DEFAULT}",
         f"{args.LIMIT_MAX} (`list` of windows: {args.LIST_LIMIT_MAX})"),
        ("`limit` of `read` (code points)", f"{args.READ_DEFAULT:,}", f"{args.READ_MAX:,}"),
        ("`query` (characters)", "", f"{args.QUERY_MAX:,}"),
        ("phrasings in a `query` list (ranked, fused; each as `query`)", "1",
         f"{args.PHRASINGS_MAX}"),
        ("result size (bytes of JSON)", "", f"{bounds.RESULT_BYTES:,}"),
        ("bytes read per call", "", f"{bounds.SCAN_BYTES:,}"),
        ("rows examined per call", "", f"{bounds.SCAN_ROWS:,}"),
        ("a row longer than this is never loaded (listed under `skipped`)", "",
         f"{bounds.LINE_CAP:,} bytes"),
    ]
    out = ["| bound | default | maximum |", "|---|---|---|"]
    out += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(out) + "\n"


def cost() -> str:
    """What advertising the tool costs a gpt-4o request, counted by OpenAI's
    function rules with the library's own body counter."""
    from ledger.rollover.conversation import tool_schema
    from ledger.tokens import TokenCounter

    schema = tool_schema("session_history", args.DESCRIPTION, args.PARAMETERS)
    counted = TokenCounter("gpt-4o", cache=None).body_counter().tools(
        [{"type": "function", "function": schema}])
    return f"{counted.tokens} tokens"
