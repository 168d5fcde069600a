"""Hard preflight guards: structured verdicts, a checking and a raising form,
the resolved encoding (never the approximation), advertised schemas only."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest

import ledger.tokens.counting as tokens
from ledger.core.errors import BudgetExceeded, LedgerError
from ledger.rollover import guards as budget
from ledger.tokens.counting import (
    CANONICAL,
    MESSAGE_FRAMING,
    PART_FRAMING,
    REQUEST_FRAMING,
    TokenCounter,
)
from ledger.tokens.encodings import get_encoding
from ledger.tokens.models import ModelRegistry, ModelSpec


def n(text: str, encoding: str = "o200k_base") -> int:
    return len(get_encoding(encoding).encode_ordinary(text))


def text_row(text: str, role: str = "user") -> dict[str, Any]:
    return {"kind": "message", "role": role, "parts": [{"type": "text", "text": text}]}


def small_registry() -> ModelRegistry:
    registry = ModelRegistry()
    registry.register(
        ModelSpec(
            id="tiny",
            family="openai",
            encoding="o200k_base",
            context_limit=1000,
            output_reserve=200,
            exact=True,
        )
    )
    registry.define("tiny-claude", family="anthropic", context_limit=1000, output_reserve=200)
    return registry


SCHEMAS = {
    "read": {"name": "read", "description": "Read a file", "parameters": {"type": "object"}},
    "giant": {"name": "giant", "description": "word " * 2000},
}


def test_assembled_request_arithmetic() -> None:
    system = "You are a careful assistant."
    memory = "Notes: the user prefers short answers."
    rows = [text_row("hello"), text_row("hi there", "assistant")]
    v = budget.check_request(
        "gpt-4o", system=system, memory=memory, rows=rows, tools=SCHEMAS, advertised=["read"],
        shape=CANONICAL,
    )
    counter = TokenCounter("gpt-4o", cache=None)
    expected = (
        REQUEST_FRAMING
        + MESSAGE_FRAMING
        + n(system)
        + MESSAGE_FRAMING
        + n(memory)
        + counter.tools(SCHEMAS, advertised=["read"]).tokens
        + counter.rows(rows).tokens
    )
    assert v.tokens == expected
    assert (v.limit, v.output_reserve) == (128_000, 16_384)
    assert v.headroom == 128_000 - 16_384 - expected
    assert v.ok and v.check == "request" and v.encoding == "o200k_base"
    assert v.safety_factor == 1.0 and not v.exact  # framing is an allowance
    assert sum(v.breakdown.values()) == expected
    assert "fits" in v.reason


def test_advertised_schemas_only() -> None:
    rows = [text_row("hello")]
    everything = budget.check_request("gpt-4o", rows=rows, tools=SCHEMAS)
    searched = budget.check_request("gpt-4o", rows=rows, tools=SCHEMAS, advertised=["read"])
    assert everything.tokens - searched.tokens >= 2000
    assert set(SCHEMAS) == {"read", "giant"}


def test_fresh_window_rejection_before_any_request() -> None:
    registry = small_registry()
    payload = [text_row("word " * 900)]  # 900 tokens > 1000 - 200
    v = budget.fits_fresh_window("tiny", payload, registry=registry)
    assert not v.ok and v.check == "fresh_window"
    assert v.headroom == 800 - v.tokens < 0
    assert "cannot fit even a fresh context window" in v.reason
    assert f"over by {-v.headroom:,}" in v.reason
    with pytest.raises(BudgetExceeded) as caught:
        budget.require_fresh_window("tiny", payload, registry=registry)
    assert isinstance(caught.value, LedgerError)
    assert isinstance(caught.value, budget.RequestTooLarge)
    assert caught.value.verdict == v
    fits = budget.require_fresh_window("tiny", [text_row("word " * 100)], registry=registry)
    assert fits.ok and fits.headroom > 0


def test_boundary_is_inclusive() -> None:
    registry = small_registry()
    base = budget.fits_fresh_window("tiny", [text_row("")], registry=registry)
    # pad with single-token words until the request is exactly at the limit
    words = base.headroom
    v = budget.fits_fresh_window("tiny", [text_row(" a" * words)], registry=registry)
    assert v.tokens == 800 and v.headroom == 0 and v.ok
    v = budget.fits_fresh_window("tiny", [text_row(" a" * (words + 1))], registry=registry)
    assert v.headroom == -1 and not v.ok


def test_proxy_family_verdicts_are_estimates() -> None:
    registry = small_registry()
    rows = [text_row("word " * 300)]
    v = budget.fits_fresh_window("tiny-claude", rows, registry=registry, shape=CANONICAL)
    raw = REQUEST_FRAMING + MESSAGE_FRAMING + PART_FRAMING["text"] + n("word " * 300, "cl100k_base")
    assert v.tokens == math.ceil(raw * 1.35)
    assert not v.exact and v.safety_factor == 1.35 and v.encoding == "cl100k_base"
    assert "1.35 safety factor" in v.reason


def test_guards_never_use_the_approximation(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(text: str) -> Any:
        raise AssertionError("a hard guard used the approximation")

    monkeypatch.setattr(tokens, "approx_tokens", refuse)
    text = "a" * 4000  # approximation 1000 tokens; o200k: 500
    v = budget.check_request("gpt-4o", rows=[text_row(text)], cache=None, shape=CANONICAL)
    assert v.breakdown["rows"] == MESSAGE_FRAMING + PART_FRAMING["text"] + n(text)
    assert v.mode == "encoding"
    monkeypatch.undo()
    estimate = budget.estimate_request("gpt-4o", rows=[text_row(text)], cache=None)
    assert estimate.check == "estimate" and estimate.mode == "approx" and not estimate.exact
    assert estimate.breakdown["rows"] == MESSAGE_FRAMING + PART_FRAMING["text"] + 1000


def test_settled_tool_output_guard() -> None:
    registry = small_registry()
    v = budget.check_tool_output("tiny", "line\n" * 2000, call_id="c1", registry=registry)
    assert not v.ok and v.check == "tool_output"
    assert "tool output cannot fit" in v.reason
    with pytest.raises(budget.RequestTooLarge):
        budget.require_tool_output("tiny", "line\n" * 2000, registry=registry)
    ok = budget.require_tool_output("tiny", {"status": "done"}, registry=registry)
    assert ok.ok


def test_custom_output_reserve() -> None:
    rows = [text_row("hello")]
    v = budget.check_request("gpt-4o", rows=rows, output_reserve=0)
    assert v.output_reserve == 0 and v.headroom == 128_000 - v.tokens
    with pytest.raises(LedgerError):
        budget.check_request("gpt-4o", rows=rows, output_reserve=128_000)


def test_request_counter_for_the_rollover_engine() -> None:
    request = SimpleNamespace(
        model="gpt-4o",
        system="Be brief.",
        memory="",
        tools=(SCHEMAS["read"],),
        messages=(text_row("hello"), SimpleNamespace(to_dict=lambda: text_row("hi", "assistant"))),
    )
    count = budget.request_counter()
    tokens_, exact = count(request)
    v = budget.check_request(
        "gpt-4o",
        system="Be brief.",
        tools=[SCHEMAS["read"]],
        rows=[text_row("hello"), text_row("hi", "assistant")],
    )
    assert (tokens_, exact) == (v.tokens, v.exact)


def test_encoding_failure_is_an_error_not_a_guess(monkeypatch: pytest.MonkeyPatch) -> None:
    from ledger.core.errors import TokenizerError

    def broken(name: str) -> Any:
        raise TokenizerError(f"encoding {name!r}: no offline BPE data")

    monkeypatch.setattr(tokens, "get_encoding", broken)
    monkeypatch.setattr(tokens, "_counters", {})
    with pytest.raises(TokenizerError):
        budget.check_request("gpt-4o", rows=[text_row("hello")], cache=None)


def test_guards_count_rows_as_the_family_api_receives_them() -> None:
    """By default the guards count what the model family's adapter sends:
    for OpenAI the whole body by the published rules, for others the rendered
    request JSON; genuine media charged by allowance either way."""
    from ledger.tokens.shapes import AdapterShape, BodyShape

    picture = {"type": "media", "mime": "image/png", "data": "A" * 200_000}
    rows = [text_row("hello"), {"role": "user", "parts": [picture]}]
    default = budget.check_request("gpt-4o", rows=rows, cache=None)
    chat = budget.check_request("gpt-4o", rows=rows, cache=None,
                                shape=BodyShape("openai-chat"))
    assert default.breakdown["rows"] == chat.breakdown["rows"]
    assert default.breakdown["rows"] < 20_000  # the base64 is not counted as text
    assert not default.exact  # an image allowance is an estimate
    claude = budget.check_request("claude-sonnet-4", rows=rows, cache=None)
    anthropic = budget.check_request("claude-sonnet-4", rows=rows, cache=None,
                                     shape=AdapterShape("anthropic"))
    assert claude.breakdown["rows"] == anthropic.breakdown["rows"]
    canonical = budget.check_request("gpt-4o", rows=rows, cache=None, shape=CANONICAL)
    assert default.breakdown["rows"] >= canonical.breakdown["rows"] - 10
