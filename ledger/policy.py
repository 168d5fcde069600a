"""The tool-access policy of a rollover: the public names of
:mod:`ledger.rollover.policy`, where the code and its documentation live."""

from ledger.rollover.policy import (
    HISTORY_TOOL,
    PRESETS,
    PolicyError,
    Preset,
    ToolPolicy,
    ToolRule,
    advertised_schemas,
    preset_policy,
    preset_rules,
)

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
