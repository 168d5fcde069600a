"""``tledger count``: token counts of plain text or canonical JSONL rows."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ledger.cli.registry import arg, command
from ledger.core.errors import InvalidRow, LedgerError, TokenizerError
from ledger.tokens.models import MODELS_ENV, ModelRegistry, default_registry

# ledger.tokens.counting (tokenizers, costs, adapters) loads in cmd_count only:
# every other command, and --help, starts without it.


def _read(path: str | None) -> tuple[bytes, str]:
    if path is None or path == "-":
        return sys.stdin.buffer.read(), "stdin"
    try:
        with open(path, "rb") as fh:
            return fh.read(), path
    except OSError as exc:
        raise LedgerError(f"cannot read {path}: {exc.strerror}") from exc


def _text(data: bytes, source: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TokenizerError(
            f"{source} is not valid UTF-8 (byte {exc.start}): only text can be counted"
        ) from None


def _rows(data: bytes, source: str) -> list[dict[str, Any]]:
    from ledger.cli.core import numbered_jsonl_rows

    rows = []
    for number, row in numbered_jsonl_rows(data, source):
        if not isinstance(row.get("parts", []), list):
            raise InvalidRow(f"{source} line {number}: parts must be a list")
        rows.append(row)
    return rows


def _registry(models_file: str | None) -> ModelRegistry:
    if models_file is None:
        return default_registry()
    registry = ModelRegistry()
    if os.environ.get(MODELS_ENV):
        registry.load_file(os.environ[MODELS_ENV])
    registry.load_file(models_file)
    return registry


@command(
    "count",
    help="token count of plain text, or with --rows of canonical JSONL rows",
    description=(
        "Count tokens offline with the model's tokenizer. Plain text is counted like "
        "tiktoken's encode_ordinary; --rows counts canonical JSONL rows as the model "
        "receives them (framing, JSON and media allowances; exact is then false). "
        "Models without a public tokenizer use a proxy encoding times a safety factor "
        "and always say exact: false."
    ),
    example="tledger count --model gpt-4o notes.md",
    args=[
        arg("file", nargs="?", default=None, help="input file (default: stdin)"),
        arg("--model", default="gpt-4o", help="model id (default: gpt-4o)"),
        arg("--rows", action="store_true", help="FILE holds canonical JSONL rows"),
        arg("--api", choices=["openai-chat", "openai-responses", "anthropic", "canonical"],
            default=None,
            help="with --rows: count the rows as this API's adapter renders them "
            "(default: the model family's API; canonical: the stored JSON row)"),
        arg("--models", default=None, metavar="MODELS_FILE",
            help=f"TOML or JSON file of extra models (also ${MODELS_ENV})"),
    ],
)
def cmd_count(args: argparse.Namespace, ctx: Any) -> int:
    from ledger.tokens.counting import TokenCounter

    counter = TokenCounter(args.model, registry=_registry(args.models))
    data, source = _read(args.file)
    out: dict[str, Any]
    if args.rows:
        from ledger.tokens.shapes import count_view, shape_for

        rows = _rows(data, source)
        api = args.api
        shape = shape_for(api=api, family=counter.spec.family)
        counted = count_view(counter, rows, shape)
        out = {"rows": len(rows), "api": getattr(shape, "api", "canonical")}
    else:
        counted = counter.text(_text(data, source))
        out = {}
    ctx.emit_json(
        {
            "tokens": counted.tokens,
            "encoding": counted.encoding,
            "exact": counted.exact,
            "model": counted.model,
            "family": counted.family,
            "safety_factor": counted.safety_factor,
            **out,
        }
    )
    return 0
