"""Tool-access policy: which tools an agent may see and call. Pure.

A policy is an ordered list of rules. Each rule names a tool exactly or by a
regular-expression wildcard (matched against the whole name) and either
enables or disables it. The effective rules are the agent's rules followed by
the caller's rules; for a given tool the **last matching rule wins**, and a
tool that no rule matches is *omitted* (not granted). There is no implicit
grant: turning on the token-budget experiment never adds ``session_history``
to a narrow allowlist -- a rule must grant it.

Built-in presets (``PRESETS``): ``exec`` and ``plan`` grant every tool through
``.*``; ``explore`` inherits the ``exec`` grant (so ``session_history`` stays
granted) and then removes editing tools.

:func:`advertised_schemas` is what preflight counts: the granted tools, and
with Tool Search only the activated ones, while the full tool map stays with the
runtime for execution.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ledger.core.errors import LedgerError

__all__ = [
    "HISTORY_TOOL",
    "PRESETS",
    "PolicyError",
    "Preset",
    "ToolPolicy",
    "ToolRule",
    "advertised_schemas",
    "preset_policy",
    "preset_rules",
]

HISTORY_TOOL = "session_history"


class PolicyError(LedgerError):
    """A tool rule that cannot be evaluated (e.g. an invalid wildcard)."""


@dataclass(frozen=True)
class ToolRule:
    """One rule: ``pattern`` names a tool exactly, or, with ``wildcard=True``,
    is a regular expression that must match the whole tool name."""

    pattern: str
    enabled: bool
    wildcard: bool = False
    _compiled: re.Pattern[str] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.pattern, str) or not self.pattern:
            raise PolicyError("a tool rule needs a non-empty tool name or wildcard")
        if self.wildcard:
            try:
                compiled = re.compile(self.pattern)
            except re.error as exc:
                raise PolicyError(f"tool rule wildcard {self.pattern!r} is invalid: {exc}") from exc
            object.__setattr__(self, "_compiled", compiled)

    @classmethod
    def enable(cls, name: str) -> ToolRule:
        return cls(name, True)

    @classmethod
    def disable(cls, name: str) -> ToolRule:
        return cls(name, False)

    @classmethod
    def enable_matching(cls, regex: str) -> ToolRule:
        return cls(regex, True, wildcard=True)

    @classmethod
    def disable_matching(cls, regex: str) -> ToolRule:
        return cls(regex, False, wildcard=True)

    def matches(self, tool: str) -> bool:
        if self._compiled is not None:
            return self._compiled.fullmatch(tool) is not None
        return self.pattern == tool


@dataclass(frozen=True)
class ToolPolicy:
    """Agent rules, then caller rules; the last matching rule decides."""

    agent: tuple[ToolRule, ...] = ()
    caller: tuple[ToolRule, ...] = ()

    def __init__(self, agent: Iterable[ToolRule] = (), caller: Iterable[ToolRule] = ()) -> None:
        object.__setattr__(self, "agent", tuple(agent))
        object.__setattr__(self, "caller", tuple(caller))
        # The decision per tool name, kept: the rules never change (frozen),
        # and every request asks again for each of its tools.
        object.__setattr__(self, "_decided", {})

    @property
    def rules(self) -> tuple[ToolRule, ...]:
        return self.agent + self.caller

    def decision(self, tool: str) -> bool | None:
        """True (enabled), False (disabled by a rule) or None (no rule matches)."""
        decided: dict[str, bool | None] = self._decided  # type: ignore[attr-defined]
        named = type(tool) is str
        if named and tool in decided:
            return decided[tool]
        verdict: bool | None = None
        for rule in self.rules:
            if rule.matches(tool):
                verdict = rule.enabled
        if named and len(decided) < 1024:
            decided[tool] = verdict
        return verdict

    def allows(self, tool: str) -> bool:
        """Whether ``tool`` is granted; omitted tools are not."""
        return self.decision(tool) is True

    @property
    def history_access(self) -> bool:
        """Whether the effective policy grants ``session_history``."""
        return self.allows(HISTORY_TOOL)

    def with_caller(self, rules: Iterable[ToolRule]) -> ToolPolicy:
        return ToolPolicy(self.agent, self.caller + tuple(rules))


@dataclass(frozen=True)
class Preset:
    """A built-in agent: its own rules after those of the preset it inherits."""

    name: str
    rules: tuple[ToolRule, ...]
    inherits: str | None = None


PRESETS: Mapping[str, Preset] = {
    "exec": Preset("exec", (ToolRule.enable_matching(".*"),)),
    "plan": Preset("plan", (ToolRule.enable_matching(".*"),)),
    # Explore is read-only: it inherits the exec grant and removes editing
    # tools; the inherited ``.*`` is what keeps ``session_history`` granted.
    "explore": Preset(
        "explore",
        (ToolRule.disable_matching(r"file_edit.*"), ToolRule.disable_matching(r"file_write.*")),
        inherits="exec",
    ),
}


def preset_rules(name: str, presets: Mapping[str, Preset] = PRESETS) -> tuple[ToolRule, ...]:
    """The agent rules of preset ``name``, inherited rules first."""
    seen: list[str] = []
    chain: list[Preset] = []
    current: str | None = name
    while current is not None:
        if current in seen:
            raise PolicyError(f"preset {name!r} inherits in a cycle: {[*seen, current]}")
        preset = presets.get(current)
        if preset is None:
            raise PolicyError(f"unknown agent preset {current!r}")
        seen.append(current)
        chain.append(preset)
        current = preset.inherits
    out: list[ToolRule] = []
    for preset in reversed(chain):
        out.extend(preset.rules)
    return tuple(out)


def preset_policy(name: str, caller: Sequence[ToolRule] = ()) -> ToolPolicy:
    """The effective policy of a built-in agent with the caller's rules after it."""
    return ToolPolicy(preset_rules(name), caller)


def advertised_schemas(
    tools: Mapping[str, Mapping[str, Any]],
    policy: ToolPolicy,
    activated: Iterable[str] | None = None,
) -> tuple[Mapping[str, Any], ...]:
    """The schemas a request advertises, in ``tools`` order.

    ``tools`` is the full tool map (name -> schema) the runtime keeps for
    execution; the result holds only granted tools and, when Tool Search is on
    (``activated`` is not None), only those activated so far. Preflight counts
    exactly these.
    """
    active = None if activated is None else frozenset(activated)
    return tuple(
        schema
        for name, schema in tools.items()
        if policy.allows(name) and (active is None or name in active)
    )
