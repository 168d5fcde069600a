"""Connections: one psycopg-pool pool per database and process, and the
translation of server and connection failures into the library's errors.

A write that fails before COMMIT was sent raises ``CommitFailed``; a
connection lost while COMMIT was in flight raises ``CommitUncertain`` with the
batch id (the batch may or may not have committed; a retry with the same
``batch_id`` answers with the original seqs if it did). Any error COMMIT
itself returns is ``CommitUncertain`` as well: on Citus the coordinator
sends COMMIT on to the worker holding the workspace's shard and, when that
connection fails, answers "could not commit transaction for shard ..."
without knowing whether the worker committed (on plain PostgreSQL these
transactions have no deferred checks, so COMMIT does not fail otherwise).
The pool discards a
broken connection when it comes back, so the next call reconnects: writers
resume by themselves once the server is back.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from ledger.core.errors import (
    CommitFailed,
    CommitUncertain,
    InvalidRoot,
    LedgerError,
    Unavailable,
)
from ledger.core.redact import redact
from ledger.storage.postgres.schema import ensure_schema

__all__ = ["Database", "check_url", "close_pools", "direct", "is_postgres_root", "reason"]

_SCHEMES = ("postgresql://", "postgres://")
_POOLS: dict[tuple[int, str], Any] = {}
_CITUS: dict[tuple[int, str], bool] = {}  # whether each pool's database is Citus's
_POOLS_LOCK = threading.Lock()
OPEN_TIMEOUT = 30.0  # seconds a first connection may take when the URL sets no connect_timeout


class _HideSecrets(logging.Filter):
    """psycopg_pool logs each failed connection attempt with psycopg's text,
    which may quote part of the connection string (an ``options`` value the
    server refused): the record leaves with the secrets of every database
    this process opened hidden."""

    def filter(self, record: logging.LogRecord) -> bool:
        with _URLS_LOCK:  # not _POOLS_LOCK: pool.open() logs while that is held
            urls = list(_URLS)
        if urls:
            message = record.getMessage()
            hidden = redact(message, *urls)
            if hidden != message:
                record.msg, record.args = hidden, None
        return True


_URLS: set[str] = set()  # every URL a pool was made for, for _HideSecrets
_URLS_LOCK = threading.Lock()
for _name in ("psycopg", "psycopg.pool"):
    logging.getLogger(_name).addFilter(_HideSecrets())


def is_postgres_root(root: str) -> bool:
    return root.startswith(_SCHEMES)


def check_url(url: str) -> None:
    """Raise ``InvalidRoot`` (one line, password hidden) for a URL that cannot
    name a database: a port that is not a number in 0..65535, an unclosed IPv6
    bracket, an unknown query parameter, bad percent-encoding. Checked before
    any connection is tried, so a typo is reported at once, not after the
    connection timeout."""
    where = redact(url)
    try:
        urlsplit(url).port  # noqa: B018 - parsing the port is the check
    except ValueError as exc:
        raise InvalidRoot(f"malformed PostgreSQL URL {where}: {reason(exc, url)}") \
            from None
    psycopg, _ = _psycopg()
    from psycopg.conninfo import conninfo_to_dict

    try:
        conninfo_to_dict(url)
    except psycopg.Error as exc:
        raise InvalidRoot(f"malformed PostgreSQL URL {where}: {reason(exc, url)}") from None


def _connect(psycopg: Any, url: str) -> Any:
    """One autocommit connection to ``url``, given up on after the URL's own
    ``connect_timeout`` or, without one, ``OPEN_TIMEOUT`` seconds."""
    from psycopg.conninfo import conninfo_to_dict

    given = conninfo_to_dict(url).get("connect_timeout")
    timeout = {} if given is not None else {"connect_timeout": int(OPEN_TIMEOUT)}
    return psycopg.connect(url, autocommit=True, **timeout)


def _psycopg() -> Any:
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:
        raise LedgerError(
            "a postgresql:// root needs the PostgreSQL extra: "
            "pip install 'transcript-ledger[postgres]'"
        ) from exc
    return psycopg, psycopg_pool


class Database:
    """The pool of one database URL, shared by every Store of this process
    that names it (a forked child makes its own)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.where = redact(url)
        self.psycopg, pool_mod = _psycopg()
        check_url(url)
        key = (os.getpid(), url)
        with _URLS_LOCK:
            _URLS.add(url)
        with _POOLS_LOCK:
            pool = _POOLS.get(key)
            if pool is None:
                # The first connection is made directly: a refused or unreachable
                # server fails now with its own reason, where the pool would retry
                # with backoff for its whole timeout and then say only that it
                # timed out.
                try:
                    with _connect(self.psycopg, url) as conn:
                        _CITUS[key] = ensure_schema(conn, self.where)
                except self.psycopg.Error as exc:
                    # from None: psycopg's own text may echo the connection string
                    raise Unavailable(f"{self.where}: cannot connect: {reason(exc, url)}") \
                        from None
                pool = pool_mod.ConnectionPool(
                    url, min_size=0, max_size=16, open=True, kwargs={"autocommit": True},
                    name=f"tledger-{os.getpid()}",
                )
                _POOLS[key] = pool
        self.pool = pool
        # On Citus a fork's rows live under a storage key (keys.py, lineage.py).
        self.citus: bool = _CITUS.get(key, False)

    @contextmanager
    def read(self, what: str) -> Iterator[Any]:
        """A connection for reads; failures become ``Unavailable``."""
        try:
            with self.pool.connection() as conn:
                yield conn
        except self.psycopg.Error as exc:
            raise Unavailable(f"{self.where}: {what} failed: {reason(exc, self.url)}") from exc

    @contextmanager
    def write(self, what: str, batch_id: str | None = None) -> Iterator[Any]:
        """One write transaction. ``CommitFailed`` when it fails before COMMIT,
        ``CommitUncertain`` when the connection is lost during COMMIT."""
        psycopg = self.psycopg
        try:
            conn_cm = self.pool.connection()
            conn = conn_cm.__enter__()
        except Exception as exc:  # PoolTimeout, OperationalError: nothing was sent
            raise CommitFailed(f"{self.where}: {what}: cannot connect: {reason(exc, self.url)}",
                               batch_id) from None  # psycopg's text may echo the URL
        committing = False
        try:
            conn.execute("BEGIN")
            yield conn
            committing = True
            conn.execute("COMMIT")
        except BaseException as exc:
            lost = isinstance(exc, psycopg.OperationalError) or conn.broken
            if not conn.broken:
                try:
                    conn.execute("ROLLBACK")
                except psycopg.Error:
                    pass
            conn_cm.__exit__(type(exc), exc, exc.__traceback__)
            if committing and lost:
                raise CommitUncertain(
                    f"{self.where}: {what}: the connection was lost during COMMIT; the "
                    f"outcome is unknown: retry with the same batch_id ({batch_id})",
                    batch_id or "",
                ) from exc
            if committing and isinstance(exc, psycopg.Error):
                raise CommitUncertain(
                    f"{self.where}: {what}: COMMIT failed ({reason(exc, self.url)}); the outcome "
                    f"is unknown: retry with the same batch_id ({batch_id})", batch_id or "",
                ) from exc
            if isinstance(exc, psycopg.Error):
                raise CommitFailed(f"{self.where}: {what} failed: {reason(exc, self.url)}",
                                   batch_id) from exc
            raise
        conn_cm.__exit__(None, None, None)


@contextmanager
def direct(url: str, what: str, *, write: bool = False) -> Iterator[tuple[Any, str]]:
    """One autocommit connection of its own, outside the pools, and the
    database's redacted name (the schema commands, ``admin.py``). psycopg's
    failures become the library's here, as in ``Database``: ``Unavailable``
    when connecting (or reading), ``CommitFailed`` (nothing was changed) for
    a ``write``."""
    psycopg, _ = _psycopg()
    check_url(url)
    where = redact(url)
    try:
        conn = _connect(psycopg, url)
    except psycopg.Error as exc:
        # from None: psycopg's own text may echo the connection string
        raise Unavailable(f"{where}: cannot connect: {reason(exc, url)}") from None
    with conn:
        try:
            yield conn, where
        except psycopg.Error as exc:
            if write:
                raise CommitFailed(f"{where}: {what} failed, nothing was changed: "
                                   f"{reason(exc, url)}") from exc
            raise Unavailable(f"{where}: {what} failed: {reason(exc, url)}") from exc


def close_pools(url: str | None = None) -> None:
    """Close this process's pools (of ``url``, or all): before a database is
    dropped, or at the end of a program that wants its connections gone now."""
    with _POOLS_LOCK:
        for key in [k for k in _POOLS if url is None or k[1] == url]:
            _POOLS.pop(key).close()


def reason(exc: BaseException, url: str) -> str:
    """The first line of an error about the database ``url``, its secrets
    hidden (psycopg's and the server's texts may quote the connection string
    or a piece of it)."""
    text = str(exc).strip()
    return redact(text.splitlines()[0] if text else type(exc).__name__, url)
