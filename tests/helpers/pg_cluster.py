"""Throwaway PostgreSQL clusters for tests and benchmarks.

A cluster lives in a temporary directory and listens only on a Unix socket in
that directory (no TCP port, so clusters never collide). The binaries come from
Debian's ``postgresql`` package (``.ci/run`` installs it when ``pg_ctl`` is
missing). The server refuses to run as root, so as root every server command
runs as the ``postgres`` user.

    python -m tests.helpers.pg_cluster start DIR   # prints: export TLEDGER_TEST_PG=...
    python -m tests.helpers.pg_cluster stop DIR

``.ci/run`` starts one cluster for the whole run and stops it at the end; the
``pg_root`` fixture (tests/conftest.py) gives each test a fresh database on it.
Tests that restart or kill a server start a private cluster with ``Cluster``.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import quote

__all__ = ["Cluster", "PgUnavailable", "find_bindir"]

ENV_DSN = "TLEDGER_TEST_PG"


class PgUnavailable(RuntimeError):
    """No PostgreSQL binaries here, or the server would not start."""


def find_bindir() -> Path | None:
    """The directory holding ``pg_ctl`` and ``initdb``: the newest Debian
    install under /usr/lib/postgresql, else the PATH."""
    debian = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
                    key=lambda p: int(Path(p).parent.parent.name)
                    if Path(p).parent.parent.name.isdigit() else 0)
    if debian:
        return Path(debian[-1]).parent
    found = shutil.which("pg_ctl")
    return Path(found).parent if found else None


def _as_server_user(cmd: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *cmd]
    return cmd


class Cluster:
    """One server: ``initdb`` into ``base/data``, socket in ``base``.

    ``fast=True`` turns off fsync and full-page writes: right for tests, which
    restart the server but never lose the machine's page cache. Benchmarks use
    ``fast=False`` so the server pays for durability like a real one.
    """

    def __init__(self, base: str | os.PathLike[str] | None = None, fast: bool = True,
                 port: int = 5432, socket_dir: str | None = None,
                 settings: dict[str, str] | None = None) -> None:
        bindir = find_bindir()
        if bindir is None:
            raise PgUnavailable("no PostgreSQL binaries (pg_ctl) found; install Debian's "
                                "postgresql package")
        self.bindir = bindir
        self.base = Path(base) if base is not None else Path(tempfile.mkdtemp(prefix="tledger-pg-"))
        self.data = self.base / "data"
        self.log = self.base / "server.log"
        self.fast = fast
        self.port = port
        self._socket_dir = socket_dir
        self.settings = dict(settings or {})  # written to postgresql.conf by init()

    @property
    def socket_dir(self) -> str:
        return self._socket_dir or str(self.base)

    def dsn(self, dbname: str = "postgres") -> str:
        port = "" if self.port == 5432 else f"&port={self.port}"
        return f"postgresql://postgres@/{dbname}?host={quote(self.socket_dir, safe='')}{port}"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = _as_server_user([str(self.bindir / args[0]), *args[1:]])
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if check and done.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise PgUnavailable(f"{' '.join(args[:2])} failed ({done.returncode}): "
                                f"{done.stderr.strip()} {log}")
        return done

    def init(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.base, "postgres", "postgres")
        if not (self.data / "PG_VERSION").exists():
            self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust",
                      "--no-sync", "-E", "UTF8", "--locale=C")
            if self.settings:
                with open(self.data / "postgresql.conf", "a") as conf:
                    conf.writelines(f"{k} = '{v}'\n" for k, v in self.settings.items())

    def start(self) -> str:
        """Initialise if needed and start; returns the DSN of the ``postgres`` db."""
        self.init()
        opts = (f"-p {self.port} -k {self.socket_dir} -c listen_addresses='' "
                "-c max_connections=200")
        if self.fast:
            opts += " -c fsync=off -c full_page_writes=off"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", opts, "-w",
                  "-t", "60", "start")
        return self.dsn()

    def stop(self, mode: str = "fast") -> None:
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop", check=False)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.base, ignore_errors=True)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("start", "stop"):
        print("usage: python -m tests.helpers.pg_cluster start|stop DIR", file=sys.stderr)
        return 2
    cluster = Cluster(argv[1])
    if argv[0] == "start":
        print(f"export {ENV_DSN}='{cluster.start()}'")
    else:
        cluster.remove()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
