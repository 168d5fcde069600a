"""Tool-access policy rules (A1-A4, S5 of the rollover rule table)."""

from __future__ import annotations

import pytest

from ledger.policy import (
    PRESETS,
    PolicyError,
    Preset,
    ToolPolicy,
    ToolRule,
    advertised_schemas,
    preset_policy,
    preset_rules,
)

E, D = ToolRule.enable, ToolRule.disable
EM, DM = ToolRule.enable_matching, ToolRule.disable_matching

# (id, agent rules, caller rules, tool, expected decision: True/False/None)
CASES = [
    ("A1-exact-name-grants", [E("session_history")], [], "session_history", True),
    ("A1-exact-name-is-not-a-prefix", [E("session")], [], "session_history", None),
    ("A1-wildcard-grants", [EM("session_.*")], [], "session_history", True),
    ("A1-wildcard-matches-whole-name", [EM("session")], [], "session_history", None),
    ("A1-exact-name-is-literal-not-regex", [E("session_.*")], [], "session_history", None),
    ("A1-disable-rule", [D("bash")], [], "bash", False),
    ("A2-later-agent-rule-removes", [EM(".*"), D("session_history")], [], "session_history",
     False),
    ("A2-caller-rule-removes-agent-grant", [EM(".*")], [DM("session_.*")], "session_history",
     False),
    ("A2-caller-rule-grants-after-agent-deny", [D("session_history")], [E("session_history")],
     "session_history", True),
    ("A2-last-matching-wins-not-most-specific", [E("session_history"), DM(".*")], [],
     "session_history", False),
    ("A2-non-matching-later-rule-ignored", [E("session_history")], [D("bash")],
     "session_history", True),
    ("A3-narrow-allowlist-not-widened", [E("bash"), E("file_edit")], [], "session_history", None),
    ("A3-empty-policy-grants-nothing", [], [], "session_history", None),
]


@pytest.mark.parametrize(
    ("agent", "caller", "tool", "expected"),
    [pytest.param(a, c, t, e, id=i) for i, a, c, t, e in CASES],
)
def test_rule_evaluation(
    agent: list[ToolRule], caller: list[ToolRule], tool: str, expected: bool | None
) -> None:
    policy = ToolPolicy(agent, caller)
    assert policy.decision(tool) is expected
    assert policy.allows(tool) is (expected is True)
    if tool == "session_history":
        assert policy.history_access is (expected is True)


@pytest.mark.parametrize(
    ("preset", "tool", "granted"),
    [
        pytest.param("exec", "session_history", True, id="A4-exec-grants-through-dot-star"),
        pytest.param("plan", "session_history", True, id="A4-plan-grants-through-dot-star"),
        pytest.param("explore", "session_history", True, id="A4-explore-inherits-grant"),
        pytest.param("explore", "file_edit", False, id="A4-explore-own-rules-after-inherited"),
        pytest.param("exec", "anything_else", True, id="A4-exec-everything"),
    ],
)
def test_presets(preset: str, tool: str, granted: bool) -> None:
    assert preset_policy(preset).allows(tool) is granted


def test_A4_preset_grant_is_the_dot_star_rule() -> None:
    for name in ("exec", "plan"):
        rules = preset_rules(name)
        assert any(r.wildcard and r.pattern == ".*" and r.enabled for r in rules)
    assert preset_rules("explore")[: len(preset_rules("exec"))] == preset_rules("exec")


def test_A2_caller_rules_follow_preset_rules() -> None:
    policy = preset_policy("explore", [D("session_history")])
    assert not policy.history_access
    policy = preset_policy("explore").with_caller([E("file_edit")])
    assert policy.allows("file_edit")


def test_A1_invalid_wildcard_is_a_clear_error() -> None:
    with pytest.raises(PolicyError, match="invalid"):
        EM("(")
    with pytest.raises(PolicyError):
        E("")


def test_A4_unknown_and_cyclic_presets_refused() -> None:
    with pytest.raises(PolicyError, match="unknown"):
        preset_rules("nope")
    cyclic = {"a": Preset("a", (), inherits="b"), "b": Preset("b", (), inherits="a")}
    with pytest.raises(PolicyError, match="cycle"):
        preset_rules("a", cyclic)
    assert set(PRESETS) >= {"exec", "plan", "explore"}


TOOLS = {
    "session_history": {"name": "session_history"},
    "bash": {"name": "bash"},
    "file_edit": {"name": "file_edit"},
    "web": {"name": "web"},
}


@pytest.mark.parametrize(
    ("policy", "activated", "expected"),
    [
        pytest.param(preset_policy("exec"), None, ["session_history", "bash", "file_edit", "web"],
                     id="S5-all-granted-without-tool-search"),
        pytest.param(preset_policy("explore"), None, ["session_history", "bash", "web"],
                     id="S5-denied-tools-not-advertised"),
        pytest.param(preset_policy("exec"), ["bash", "session_history"],
                     ["session_history", "bash"], id="S5-tool-search-only-activated"),
        pytest.param(preset_policy("explore"), ["file_edit"], [],
                     id="S5-activation-does-not-override-policy"),
    ],
)
def test_advertised_schemas(
    policy: ToolPolicy, activated: list[str] | None, expected: list[str]
) -> None:
    schemas = advertised_schemas(TOOLS, policy, activated)
    assert [s["name"] for s in schemas] == expected
    assert len(TOOLS) == 4  # the full map stays for execution
