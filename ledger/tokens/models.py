"""The model registry: model id -> family, encoding, context limit, output
reserve, ``exact`` flag and safety factor.

OpenAI models are counted with their own public encodings and are exact:
``gpt-4o``, ``gpt-4.1``, ``gpt-4.5``, ``gpt-5`` and the o-series use
``o200k_base``; ``gpt-4`` and ``gpt-3.5`` use ``cl100k_base``. Families whose
tokenizer is not public are counted with a proxy encoding times a safety factor,
and every count for them says ``exact: false``:

========== ============== ============= =========================================
family     proxy encoding safety factor why
========== ============== ============= =========================================
anthropic  cl100k_base    1.35          Claude tokenizers produce ~15-30% more
                                        tokens than cl100k on English and code
google     cl100k_base    1.25          Gemini's SentencePiece vocabulary is
                                        larger; cl100k is close or above it
meta,      cl100k_base    1.25          128k-151k BPE vocabularies close to
mistral,                                cl100k, some trained on other mixes
deepseek
(other)    (given)        (given, >= 1) a user-registered family; default 1.0
========== ============== ============= =========================================

Lookup: an exact id first, then the longest registered id that is a prefix of the
model followed by ``-``, ``:``, ``@`` or ``/`` (so ``gpt-4o-2024-08-06`` is
``gpt-4o``, but ``gpt-4.7`` is not ``gpt-4``), then the same after dropping one
leading ``provider:`` or ``provider/`` (``openai:gpt-5-pro``,
``openrouter/claude-...``, ``ft:gpt-4o-mini:...``). Anything else is
:class:`~ledger.core.errors.UnknownModel`.

Users add or override models in code (:func:`register`,
``ModelRegistry.register``) or in a TOML or JSON file, loaded with
``ModelRegistry.load_file`` and, for the default registry, named by
``$TLEDGER_MODELS``::

    [models."claude-next"]        # JSON: {"models": {"claude-next": {...}}}
    family = "anthropic"          # known family: encoding, exact and
    context_limit = 500000        # safety_factor default to the family's
    output_reserve = 32000

Pure data and lookup: no tokenizer is loaded here.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

import msgspec

from ledger.core.errors import LedgerError, UnknownModel

__all__ = [
    "FAMILIES",
    "MODELS_ENV",
    "Family",
    "ModelConfigError",
    "ModelRegistry",
    "ModelSpec",
    "default_registry",
    "register",
    "resolve",
]

MODELS_ENV = "TLEDGER_MODELS"
"""Environment variable naming a TOML or JSON model file for the default registry."""


class ModelConfigError(LedgerError):
    """A model definition or model file that cannot be used."""


class Family(msgspec.Struct, frozen=True, kw_only=True):
    """Defaults shared by the models of one provider family."""

    name: str
    encoding: str
    exact: bool
    safety_factor: float
    note: str = ""


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            name="openai",
            encoding="o200k_base",
            exact=True,
            safety_factor=1.0,
            note="public tiktoken encodings",
        ),
        Family(
            name="anthropic",
            encoding="cl100k_base",
            exact=False,
            safety_factor=1.35,
            note="Claude tokenizers run ~15-30% above cl100k on English and code",
        ),
        Family(
            name="google",
            encoding="cl100k_base",
            exact=False,
            safety_factor=1.25,
            note="Gemini SentencePiece; cl100k counts are close or above",
        ),
        Family(
            name="meta",
            encoding="cl100k_base",
            exact=False,
            safety_factor=1.25,
            note="Llama 3 BPE (128k) extends cl100k",
        ),
        Family(
            name="mistral",
            encoding="cl100k_base",
            exact=False,
            safety_factor=1.25,
            note="Tekken BPE, similar size",
        ),
        Family(
            name="deepseek",
            encoding="cl100k_base",
            exact=False,
            safety_factor=1.25,
            note="128k BPE, similar size",
        ),
    )
}


class ModelSpec(msgspec.Struct, frozen=True, kw_only=True):
    """One registered model (or id prefix).

    ``context_limit`` is the provider's whole window (input plus output);
    ``output_reserve`` is kept free for the reply, so a request fits when its
    counted input plus the reserve is at most the limit. ``safety_factor``
    multiplies every count (1.0 for exact families).
    """

    id: str
    family: str
    encoding: str
    context_limit: int
    output_reserve: int
    exact: bool = False
    safety_factor: float = 1.0

    def validate(self) -> ModelSpec:
        """Return self, or raise ModelConfigError saying which field is wrong."""
        where = f"model {self.id!r}"
        if not self.id or self.id != self.id.strip():
            raise ModelConfigError(f"{where}: the id must be a non-empty string without spaces")
        if not self.family or not self.encoding:
            raise ModelConfigError(f"{where}: family and encoding must be non-empty")
        if self.context_limit <= 0:
            raise ModelConfigError(f"{where}: context_limit must be > 0")
        if not 0 <= self.output_reserve < self.context_limit:
            raise ModelConfigError(
                f"{where}: output_reserve must be >= 0 and below context_limit "
                f"({self.context_limit})"
            )
        if not (math.isfinite(self.safety_factor) and self.safety_factor >= 1.0):
            raise ModelConfigError(
                f"{where}: safety_factor must be a finite number >= 1.0 (a factor below 1 "
                "would undercount)"
            )
        if self.exact and self.safety_factor != 1.0:
            raise ModelConfigError(f"{where}: an exact model takes safety_factor 1.0")
        return self

    @property
    def input_limit(self) -> int:
        """Tokens left for the request once the output reserve is set aside."""
        return self.context_limit - self.output_reserve


def _m(id: str, family: str, limit: int, reserve: int, encoding: str | None = None) -> ModelSpec:
    fam = FAMILIES[family]
    return ModelSpec(
        id=id,
        family=family,
        encoding=encoding or fam.encoding,
        context_limit=limit,
        output_reserve=reserve,
        exact=fam.exact,
        safety_factor=fam.safety_factor,
    )


_CL = "cl100k_base"

# Limits from the providers' model pages. The reserve is the model's maximum
# output capped at 32,768 (gpt-5 keeps 128,000: its API caps input at 272,000).
BUILTIN_MODELS: tuple[ModelSpec, ...] = (
    _m("gpt-4o", "openai", 128_000, 16_384),
    _m("gpt-4o-mini", "openai", 128_000, 16_384),
    _m("chatgpt-4o-latest", "openai", 128_000, 16_384),
    _m("gpt-4.1", "openai", 1_047_576, 32_768),
    _m("gpt-4.5-preview", "openai", 128_000, 16_384),
    _m("gpt-5", "openai", 400_000, 128_000),
    _m("gpt-5.1", "openai", 400_000, 128_000),
    _m("gpt-5-chat", "openai", 128_000, 16_384),
    _m("o1", "openai", 200_000, 32_768),
    _m("o1-mini", "openai", 128_000, 32_768),
    _m("o1-preview", "openai", 128_000, 32_768),
    _m("o3", "openai", 200_000, 32_768),
    _m("o3-mini", "openai", 200_000, 32_768),
    _m("o4-mini", "openai", 200_000, 32_768),
    _m("gpt-4", "openai", 8_192, 2_048, _CL),
    _m("gpt-4-32k", "openai", 32_768, 4_096, _CL),
    _m("gpt-4-turbo", "openai", 128_000, 4_096, _CL),
    _m("gpt-4-1106-preview", "openai", 128_000, 4_096, _CL),
    _m("gpt-4-0125-preview", "openai", 128_000, 4_096, _CL),
    _m("gpt-4-vision-preview", "openai", 128_000, 4_096, _CL),
    _m("gpt-3.5-turbo", "openai", 16_385, 4_096, _CL),
    _m("gpt-3.5-turbo-instruct", "openai", 4_096, 1_024, _CL),
    _m("claude", "anthropic", 200_000, 8_192),
    _m("claude-3-7-sonnet", "anthropic", 200_000, 32_000),
    _m("claude-sonnet-4", "anthropic", 200_000, 32_000),
    _m("claude-opus-4", "anthropic", 200_000, 32_000),
    _m("claude-haiku-4", "anthropic", 200_000, 32_000),
    _m("gemini", "google", 1_048_576, 8_192),
    _m("gemini-1.5-pro", "google", 2_097_152, 8_192),
    _m("gemini-2.5-pro", "google", 1_048_576, 32_768),
    _m("gemini-2.5-flash", "google", 1_048_576, 32_768),
    _m("llama-3", "meta", 8_192, 2_048),
    _m("llama-3.1", "meta", 131_072, 4_096),
    _m("llama-3.3", "meta", 131_072, 4_096),
    _m("mistral-large", "mistral", 131_072, 4_096),
    _m("deepseek-chat", "deepseek", 131_072, 8_192),
    _m("deepseek-reasoner", "deepseek", 131_072, 32_768),
)

_SEPARATORS = "-:@/"


class _Entry(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    family: str
    context_limit: int
    output_reserve: int
    encoding: str | None = None
    exact: bool | None = None
    safety_factor: float | None = None


class _File(msgspec.Struct, forbid_unknown_fields=True):
    models: dict[str, _Entry] = {}


class ModelRegistry:
    """Model ids and prefixes -> :class:`ModelSpec`. Thread-safe."""

    def __init__(self, specs: Iterable[ModelSpec] = (), *, builtins: bool = True) -> None:
        self._specs: dict[str, ModelSpec] = {}
        self._lock = threading.Lock()
        for spec in (*(BUILTIN_MODELS if builtins else ()), *specs):
            self.register(spec)

    def register(self, spec: ModelSpec) -> ModelSpec:
        """Add or replace the model ``spec.id`` (it also covers ``id-*`` variants)."""
        spec.validate()
        with self._lock:
            self._specs[spec.id] = spec
        return spec

    def define(
        self,
        id: str,
        *,
        family: str,
        context_limit: int,
        output_reserve: int,
        encoding: str | None = None,
        exact: bool | None = None,
        safety_factor: float | None = None,
    ) -> ModelSpec:
        """Register a model, taking missing fields from a known family."""
        fam = FAMILIES.get(family)
        if fam is None and encoding is None:
            known = ", ".join(FAMILIES)
            raise ModelConfigError(
                f"model {id!r}: family {family!r} is not one of {known}; give its encoding "
                "(and safety_factor) explicitly"
            )
        resolved_exact = exact if exact is not None else (fam.exact if fam else False)
        return self.register(
            ModelSpec(
                id=id,
                family=family,
                encoding=encoding or (fam.encoding if fam else ""),
                context_limit=context_limit,
                output_reserve=output_reserve,
                exact=resolved_exact,
                safety_factor=(
                    safety_factor
                    if safety_factor is not None
                    else (fam.safety_factor if fam and not resolved_exact else 1.0)
                ),
            )
        )

    def load_file(self, path: str | os.PathLike[str]) -> list[ModelSpec]:
        """Register every model of a TOML (``.toml``) or JSON file."""
        file = Path(path)
        try:
            raw = file.read_bytes()
        except OSError as exc:
            raise ModelConfigError(f"model file {file}: cannot read it ({exc})") from exc
        try:
            if file.suffix.lower() == ".toml":
                parsed = msgspec.toml.decode(raw, type=_File)
            else:
                parsed = msgspec.json.decode(raw, type=_File)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise ModelConfigError(
                f'model file {file}: {exc} (expected a table [models."<id>"] with family, '
                "context_limit, output_reserve and optional encoding, exact, safety_factor)"
            ) from exc
        except ImportError as exc:  # msgspec.toml needs tomli before Python 3.11
            raise ModelConfigError(f"model file {file}: TOML support missing ({exc})") from exc
        return [
            self.define(
                model_id,
                family=entry.family,
                context_limit=entry.context_limit,
                output_reserve=entry.output_reserve,
                encoding=entry.encoding,
                exact=entry.exact,
                safety_factor=entry.safety_factor,
            )
            for model_id, entry in parsed.models.items()
        ]

    def _lookup(self, model: str) -> ModelSpec | None:
        found = self._specs.get(model)
        if found is not None:
            return found
        best: ModelSpec | None = None
        for spec_id, spec in self._specs.items():
            if (
                len(model) > len(spec_id)
                and model.startswith(spec_id)
                and model[len(spec_id)] in _SEPARATORS
                and (best is None or len(spec_id) > len(best.id))
            ):
                best = spec
        return best

    def resolve(self, model: str) -> ModelSpec:
        """The spec for ``model``; :class:`UnknownModel` says how to add one."""
        with self._lock:
            found = self._lookup(model)
            if found is None:
                cut = min((i for i in (model.find(":"), model.find("/")) if i > 0), default=-1)
                if cut > 0:
                    found = self._lookup(model[cut + 1 :])
        if found is None:
            raise UnknownModel(
                f"unknown model {model!r}: register it in code with "
                f"ledger.tokens.models.register(ModelSpec(id={model!r}, family=..., "
                "encoding='o200k_base', context_limit=..., output_reserve=...)) or in a "
                f'TOML/JSON file ([models."{model}"] family = ..., context_limit = ..., '
                f"output_reserve = ...) named by ${MODELS_ENV} or `tledger count --models FILE`"
            )
        return found

    def __contains__(self, model: object) -> bool:
        if not isinstance(model, str):
            return False
        try:
            self.resolve(model)
        except UnknownModel:
            return False
        return True

    def __iter__(self) -> Iterator[ModelSpec]:
        with self._lock:
            return iter(list(self._specs.values()))


_default: ModelRegistry | None = None
_default_lock = threading.Lock()


def default_registry() -> ModelRegistry:
    """The process-wide registry: built-ins plus ``$TLEDGER_MODELS`` when set."""
    global _default
    with _default_lock:
        if _default is None:
            registry = ModelRegistry()
            path = os.environ.get(MODELS_ENV)
            if path:
                registry.load_file(path)
            _default = registry
        return _default


def register(spec: ModelSpec) -> ModelSpec:
    """Add or replace a model in the default registry."""
    return default_registry().register(spec)


def resolve(model: str | ModelSpec, registry: ModelRegistry | None = None) -> ModelSpec:
    """A spec for ``model`` (a spec passes through, validated)."""
    if isinstance(model, ModelSpec):
        return model.validate()
    return (registry or default_registry()).resolve(model)
