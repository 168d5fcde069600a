"""Storage keys: where a workspace's rows live on Citus (schema version 6).

Citus routes a statement to one task when every distribution value in it
hashes into the same shard, whatever the values are. A fork reads its
source's rows in the statement that reads its own (``lineage.py``), so the
two must share a shard: a fork made on Citus is stored under a *key*, its id
plus ``/`` plus a random salt, tried until the key hashes into its source's
shard (``choose``; ``/`` is in no workspace id, so a key never names another
workspace). Its id keeps one row, a pointer: a ``tl_head`` row whose
``alias`` is the key (the primary key on ``tl_head`` keeps ids unique, as
before). Every other workspace -- everything on plain PostgreSQL, every
workspace made on Citus by an append, a load or an import -- is stored under
its own id, with no pointer.

A handle resolves its key once (``resolve``: one statement, two for a fork)
and keeps it; the head read that starts every write and most reads notices a
stale one (a pointer where its key should have a head, or no head under a
fork's key: the workspace was deleted and made again) and resolves again.

The shard a key hashes into is Citus's metadata
(``get_shard_id_for_distribution_column``), so the colocation holds while the
shard boundaries do: moving shards (the rebalancer) keeps it; splitting a
shard can separate a fork from its source, and its statements then stop
being one task (they stay correct: Citus plans them across the shards).

Keys are read from the database, so they are checked (``check``) before one
goes into a statement as a literal.
"""

from __future__ import annotations

import re
import secrets
from typing import Any

from ledger.core.errors import FormatError, LedgerError
from ledger.core.ids import WORKSPACE_RE

__all__ = ["SEPARATOR", "check", "choose", "is_key", "literal", "resolve"]

SEPARATOR = "/"
KEY_RE = re.compile(WORKSPACE_RE.pattern + r"(?:/[0-9a-f]{12})?")
CANDIDATES = 512  # keys tried per statement; with 32 shards, 512 all miss 1e-7 of the time
TRIES = 20


def is_key(name: str) -> bool:
    """Whether ``name`` is a fork's storage key (not a workspace id)."""
    return SEPARATOR in name


def check(raw: object, where: str) -> str:
    """``raw`` when it has the form of a key or an id, else FormatError."""
    if not isinstance(raw, str) or not KEY_RE.fullmatch(raw) or len(raw) > 160:
        raise FormatError(f"{where}: a stored workspace key {raw!r} has no valid form; "
                          "the tables were edited by hand")
    return raw


def literal(key: str) -> str:
    """``key`` as an SQL string literal (its characters need no escape; ``check``)."""
    if not KEY_RE.fullmatch(key):
        raise LedgerError(f"not a workspace key: {key!r}")
    return "'" + key + "'"


def choose(conn: Any, workspace: str, near: str, where: str) -> str:
    """A new key for ``workspace`` in the shard of the key ``near``."""
    for _ in range(TRIES):
        candidates = [f"{workspace}{SEPARATOR}{secrets.token_hex(6)}" for _ in range(CANDIDATES)]
        got = conn.execute(
            "SELECT k FROM unnest(%s::text[]) WITH ORDINALITY AS c(k, i) WHERE "
            "get_shard_id_for_distribution_column('tl_rows', k) = "
            "get_shard_id_for_distribution_column('tl_rows', %s::text) ORDER BY i LIMIT 1",
            (candidates, near)).fetchone()
        if got is not None:
            return str(got[0])
    raise LedgerError(f"{where}: found no key for {workspace!r} in the shard of {near!r} "
                      f"among {TRIES * CANDIDATES} tried; nothing was forked")


def resolve(conn: Any, workspace: str, where: str) -> tuple[str, str | None]:
    """(key, link) of ``workspace`` on Citus: the key its rows are stored
    under, and the literal of its source's key when it refers to one
    (``lineage.rows_sql``), else None."""
    got = conn.execute("SELECT alias FROM tl_head WHERE workspace = %s",
                       (workspace,)).fetchone()
    if got is None or got[0] is None:
        return workspace, None
    key = check(got[0], where)
    if not key.startswith(workspace + SEPARATOR):
        raise FormatError(f"{where}: workspace {workspace!r} points at the key {key!r}, "
                          "which is not one of its own; the tables were edited by hand")
    src = conn.execute("SELECT source FROM tl_lineage WHERE workspace = %s",
                       (key,)).fetchone()
    return key, literal(check(src[0], where)) if src is not None else None
