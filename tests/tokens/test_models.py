"""The model registry: OpenAI families exact, proxy families honest, user
models in code and in TOML/JSON files, unknown models explained."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ledger.core.errors import UnknownModel
from ledger.tokens.counting import TokenCounter, count_text
from ledger.tokens.encodings import get_encoding
from ledger.tokens.models import FAMILIES, ModelConfigError, ModelRegistry, ModelSpec


@pytest.mark.parametrize(
    ("model", "encoding", "limit"),
    [
        ("gpt-4o", "o200k_base", 128_000),
        ("gpt-4o-2024-08-06", "o200k_base", 128_000),
        ("gpt-4o-mini-2024-07-18", "o200k_base", 128_000),
        ("gpt-4.1-mini", "o200k_base", 1_047_576),
        ("gpt-5", "o200k_base", 400_000),
        ("gpt-5-mini-2025-08-07", "o200k_base", 400_000),
        ("o1", "o200k_base", 200_000),
        ("o3-mini-2025-01-31", "o200k_base", 200_000),
        ("o4-mini", "o200k_base", 200_000),
        ("gpt-4", "cl100k_base", 8_192),
        ("gpt-4-0613", "cl100k_base", 8_192),
        ("gpt-4-turbo-2024-04-09", "cl100k_base", 128_000),
        ("gpt-3.5-turbo-0125", "cl100k_base", 16_385),
        ("openai:gpt-5-pro", "o200k_base", 400_000),
        ("ft:gpt-4o-mini-2024-07-18:acme::abc123", "o200k_base", 128_000),
    ],
)
def test_openai_models_are_exact(model: str, encoding: str, limit: int) -> None:
    spec = ModelRegistry().resolve(model)
    assert (spec.family, spec.encoding, spec.context_limit) == ("openai", encoding, limit)
    assert spec.exact and spec.safety_factor == 1.0
    counted = count_text("Counting tokens, offline.", model)
    assert counted.exact
    assert counted.tokens == len(
        get_encoding(encoding).encode_ordinary("Counting tokens, offline.")
    )


@pytest.mark.parametrize(
    ("model", "family"),
    [
        ("claude-sonnet-4-5-20250929", "anthropic"),
        ("claude-3-5-haiku-20241022", "anthropic"),
        ("anthropic:claude-opus-4-1", "anthropic"),
        ("gemini-2.5-pro", "google"),
        ("gemini-2.0-flash-001", "google"),
        ("llama-3.1-70b-instruct", "meta"),
        ("deepseek-chat", "deepseek"),
    ],
)
def test_proxy_families_are_never_exact(model: str, family: str) -> None:
    spec = ModelRegistry().resolve(model)
    assert spec.family == family and not spec.exact
    assert spec.encoding == FAMILIES[family].encoding
    assert spec.safety_factor == FAMILIES[family].safety_factor > 1.0
    text = "The quick brown fox jumps over the lazy dog. " * 40
    counted = count_text(text, model)
    raw = len(get_encoding(spec.encoding).encode_ordinary(text))
    assert counted.raw_tokens == raw
    assert counted.tokens == math.ceil(raw * spec.safety_factor)
    assert not counted.exact


@pytest.mark.parametrize("model", ["gpt-4.7", "gpt-4oo", "claudia", "mistral", "", "o2"])
def test_unknown_model_says_how_to_register(model: str) -> None:
    with pytest.raises(UnknownModel) as caught:
        ModelRegistry().resolve(model)
    message = str(caught.value)
    assert "register" in message and "TLEDGER_MODELS" in message


def test_register_in_code_and_override() -> None:
    registry = ModelRegistry()
    registry.register(
        ModelSpec(
            id="my-gpt",
            family="openai",
            encoding="cl100k_base",
            context_limit=4000,
            output_reserve=500,
            exact=True,
        )
    )
    assert registry.resolve("my-gpt-v2").context_limit == 4000
    registry.define("gpt-4o", family="openai", context_limit=64_000, output_reserve=1000)
    assert registry.resolve("gpt-4o-2024-11-20").context_limit == 64_000
    # the default registry is untouched by a private one
    assert ModelRegistry().resolve("gpt-4o").context_limit == 128_000
    claude = registry.define(
        "claude-next", family="anthropic", context_limit=500_000, output_reserve=32_000
    )
    assert (claude.encoding, claude.exact, claude.safety_factor) == ("cl100k_base", False, 1.35)


def test_model_file_toml_and_json(tmp_path: Path) -> None:
    toml = tmp_path / "models.toml"
    toml.write_text(
        '[models."acme-1"]\nfamily = "acme"\nencoding = "o200k_base"\n'
        "context_limit = 32000\noutput_reserve = 2000\nsafety_factor = 1.5\n\n"
        '[models."claude-next"]\nfamily = "anthropic"\ncontext_limit = 500000\n'
        "output_reserve = 32000\n"
    )
    registry = ModelRegistry()
    loaded = registry.load_file(toml)
    assert [s.id for s in loaded] == ["acme-1", "claude-next"]
    acme = registry.resolve("acme-1-preview")
    assert (acme.family, acme.encoding, acme.exact, acme.safety_factor) == (
        "acme",
        "o200k_base",
        False,
        1.5,
    )
    counted = TokenCounter("acme-1", registry=registry).text("hello world")
    assert counted.tokens == math.ceil(2 * 1.5) and not counted.exact
    as_json = tmp_path / "models.json"
    as_json.write_text(
        '{"models": {"tiny": {"family": "openai", "encoding": "cl100k_base",'
        ' "context_limit": 100, "output_reserve": 10}}}'
    )
    registry.load_file(as_json)
    tiny = registry.resolve("tiny")
    assert tiny.exact and tiny.safety_factor == 1.0 and tiny.input_limit == 90


@pytest.mark.parametrize(
    "body",
    [
        '{"models": {"x": {"family": "openai", "context_limit": 100}}}',  # missing field
        '{"models": {"x": {"family": "openai", "context_limit": 100, "output_reserve": 1,'
        ' "colour": "red"}}}',  # unknown field
        '{"models": {"x": {"family": "newco", "context_limit": 100, "output_reserve": 1}}}',
        '{"models": {"x": {"family": "openai", "context_limit": 100, "output_reserve": 100}}}',
        '{"models": {"x": {"family": "anthropic", "context_limit": 100, "output_reserve": 1,'
        ' "safety_factor": 0.9}}}',
        "not json",
    ],
)
def test_bad_model_files_are_refused(tmp_path: Path, body: str) -> None:
    path = tmp_path / "models.json"
    path.write_text(body)
    with pytest.raises(ModelConfigError, match=r"models\.json|'x'"):
        ModelRegistry().load_file(path)


def test_spec_validation() -> None:
    good = dict(id="m", family="f", encoding="o200k_base", context_limit=10, output_reserve=1)
    ModelSpec(**good).validate()  # type: ignore[arg-type]
    for bad in (
        {"context_limit": 0},
        {"output_reserve": -1},
        {"safety_factor": 0.5},
        {"safety_factor": float("nan")},
        {"exact": True, "safety_factor": 1.2},
        {"id": " m"},
    ):
        with pytest.raises(ModelConfigError):
            ModelSpec(**{**good, **bad}).validate()  # type: ignore[arg-type]
