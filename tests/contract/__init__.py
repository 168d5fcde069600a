"""The engine contract's cases, by subject; ``tests/helpers/engine_contract.py``
composes them into ``EngineContract`` (its doc says how a runner uses it)."""
