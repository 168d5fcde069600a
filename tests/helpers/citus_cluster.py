"""A throwaway Citus cluster for tests and benchmarks: one coordinator and
two workers, each a ``tests.helpers.pg_cluster.Cluster``, all on Unix sockets in one
directory (ports 9700, 9701, 9702 in that directory, so clusters in other
directories never collide).

Citus comes from ``../shared/citus/install.sh`` (``.ci/run`` runs it as
root); ``shared_preload_libraries = 'citus'`` on every node. Two settings
matter for a cluster on Unix sockets:

- ``citus.local_hostname`` is the socket directory: a shard move connects a
  node to itself through it (the default, ``localhost``, is TCP, and these
  servers listen on no TCP port);
- ``wal_level = logical``: moves and the rebalancer copy shards with logical
  replication, so writers carry on while a shard moves.

Tests share the ``postgres`` database and each gets a schema of its own
(``schema_root``: the root URL sets ``search_path``), which is five times
cheaper than a database on three nodes; ``add_database`` makes a whole new
Citus database for the tests that need one.

    python -m tests.helpers.citus_cluster start DIR   # prints: export TLEDGER_TEST_CITUS=...
    python -m tests.helpers.citus_cluster stop DIR

``add_database(name)`` makes a Citus database: created on every node, the
extension in each, the nodes registered on the coordinator.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from urllib.parse import quote

from tests.helpers.pg_cluster import Cluster, PgUnavailable

__all__ = ["ENV_DSN", "CitusCluster", "PgUnavailable", "citus_installed"]

ENV_DSN = "TLEDGER_TEST_CITUS"
COORDINATOR_PORT = 9700


def citus_installed() -> bool:
    """Whether the server can load Citus (``citus.so`` in the pkglibdir of
    the PostgreSQL whose binaries the clusters use)."""
    import subprocess

    from tests.helpers.pg_cluster import find_bindir

    bindir = find_bindir()
    if bindir is None:
        return False
    libdir = bindir.parent / "lib"  # Debian's layout, when pg_config is not there
    if (bindir / "pg_config").exists():
        done = subprocess.run([str(bindir / "pg_config"), "--pkglibdir"], capture_output=True,
                              text=True, timeout=30)
        libdir = Path(done.stdout.strip()) if done.returncode == 0 else libdir
    return (libdir / "citus.so").exists()


class CitusCluster:
    """A coordinator and ``workers`` workers in ``base`` (module doc)."""

    def __init__(self, base: str | os.PathLike[str] | None = None, workers: int = 2,
                 fast: bool = True) -> None:
        self.base = Path(base) if base is not None else \
            Path(tempfile.mkdtemp(prefix="tledger-citus-"))
        sock = str(self.base)
        common = {
            "shared_preload_libraries": "citus",
            "citus.local_hostname": sock,
            "wal_level": "logical",
            "max_replication_slots": "32",
            "max_wal_senders": "32",
            "max_worker_processes": "32",
            # 8 shards a table (Citus's default is 32): each test's schema is
            # created in a third of the time, and 8 still spread over 2 workers.
            "citus.shard_count": "8",
        }
        self.nodes = [
            Cluster(self.base / name, fast=fast, port=COORDINATOR_PORT + i, socket_dir=sock,
                    settings=common)
            for i, name in enumerate(["coordinator", *(f"worker{k}" for k in
                                                        range(1, workers + 1))])
        ]

    @classmethod
    def from_dsn(cls, dsn: str) -> CitusCluster:
        """The cluster whose coordinator ``dsn`` names (its socket directory
        is the cluster's directory)."""
        from urllib.parse import parse_qs, urlsplit

        return cls(parse_qs(urlsplit(dsn).query)["host"][0])

    @property
    def coordinator(self) -> Cluster:
        return self.nodes[0]

    @property
    def workers(self) -> list[Cluster]:
        return self.nodes[1:]

    @property
    def socket_dir(self) -> str:
        return str(self.base)

    def dsn(self, dbname: str = "postgres") -> str:
        return self.coordinator.dsn(dbname)

    def start(self) -> str:
        """Start every node, make ``postgres`` a Citus database; returns the
        coordinator's DSN of it."""
        if not citus_installed():
            raise PgUnavailable("Citus is not installed into this PostgreSQL: run "
                                "`bash ../shared/citus/install.sh` as root")
        self.base.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.base, "postgres", "postgres")
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(len(self.nodes)) as pool:  # initdb and start side by side
            starts = [pool.submit(node.start) for node in self.nodes]
        try:
            for started in starts:
                started.result()
        except PgUnavailable as exc:
            if "undefined symbol" in str(exc):
                raise PgUnavailable(
                    f"{exc} -- the Citus build in ../shared/citus needs Debian's PostgreSQL "
                    "15.20 or newer: apt-get install postgresql-15") from exc
            raise
        self.add_database("postgres", create=False)
        return self.dsn()

    def add_database(self, name: str, create: bool = True, citus: bool = True,
                     workers: int | None = None) -> str:
        """A database ``name`` on every node, with Citus in it unless
        ``citus=False`` (``enable_citus`` adds it later) and the first
        ``workers`` workers (all by default) registered; returns its
        coordinator DSN."""
        import psycopg

        if create:
            for node in self.nodes:
                with psycopg.connect(node.dsn(), autocommit=True) as conn:
                    conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
        if citus:
            self.enable_citus(name, workers)
        return self.dsn(name)

    def enable_citus(self, name: str, workers: int | None = None) -> None:
        """The extension in database ``name`` on every node, the workers (the
        first ``workers`` of them) registered on the coordinator."""
        from concurrent.futures import ThreadPoolExecutor

        import psycopg

        def create(node: Cluster) -> None:
            with psycopg.connect(node.dsn(name), autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS citus")

        with ThreadPoolExecutor(len(self.nodes)) as pool:
            list(pool.map(create, self.nodes))
        with psycopg.connect(self.dsn(name), autocommit=True) as conn:
            conn.execute("SELECT citus_set_coordinator_host(%s, %s)",
                         (self.socket_dir, COORDINATOR_PORT))
            for node in self.workers[:workers]:
                conn.execute("SELECT citus_add_node(%s, %s)", (self.socket_dir, node.port))

    def schema_root(self, schema: str) -> str:
        """A root URL on the ``postgres`` database whose ``search_path`` is a
        new schema ``schema`` (Citus creates it on every node)."""
        import psycopg

        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        return self.dsn() + "&options=" + quote(f"-c search_path={schema}", safe="")

    def drop_schema(self, schema: str) -> None:
        import psycopg

        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    def drop_database(self, name: str) -> None:
        import psycopg

        for node in self.nodes:
            with psycopg.connect(node.dsn(), autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def stop(self, mode: str = "fast") -> None:
        for node in self.nodes:
            node.stop(mode)

    def remove(self) -> None:
        self.stop("immediate")  # thrown away: no shutdown checkpoint to wait for
        shutil.rmtree(self.base, ignore_errors=True)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("start", "stop"):
        print("usage: python -m tests.helpers.citus_cluster start|stop DIR", file=sys.stderr)
        return 2
    cluster = CitusCluster(argv[1])
    if argv[0] == "start":
        print(f"export {ENV_DSN}='{cluster.start()}'")
    else:
        cluster.remove()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
