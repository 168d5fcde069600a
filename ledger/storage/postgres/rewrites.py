"""Rewrites on PostgreSQL: each one transaction under the head row's lock that
bumps the epoch (so every open cursor expires), with the rules the file
engine applies (``ledger.storage.files.rewrite``):

- ``reject``: a request (and the synthetic rows right before it in its batch
  that it owns) becomes an empty assistant record holding the original under
  ``meta.quarantine`` (``ledger.core.husks``); resets and other kinds are
  refused;
- ``truncate_after``: ``seq`` must end its batch and the newest manual reset
  must survive; the dropped rows go to ``tl_quarantine``; the next append
  continues after the last surviving row, as on files;
- ``purge_before_floor``: really deletes the rows at or before the floor (the
  floor row too when it is a batch of its own; a floor inside a larger batch
  keeps that whole batch);
- ``rebaseline``: a new epoch, the head row recomputed from the rows.

Plus ``backup`` (a file-engine directory: the same bytes, readable anywhere)
and ``stat``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ledger.core import rules
from ledger.core.husks import husk_line
from ledger.core.rows import now_ms
from ledger.storage.copydir import refuse_existing, write_workspace_dir
from ledger.storage.engine import BackupResult, StatReport
from ledger.storage.postgres.workspace import PgState, decode

if TYPE_CHECKING:
    from ledger.storage.postgres.workspace import PgWorkspace


def _begin(ws: PgWorkspace, conn: Any) -> PgState:
    st = ws._head(conn, lock=True)
    if st is None:
        from ledger.core.errors import WorkspaceNotFound

        raise WorkspaceNotFound(f"workspace {ws.workspace!r} has no history in {ws.db.where}")
    return st


def recompute_head(ws: PgWorkspace, conn: Any, old: PgState, next_seq: int) -> int:
    """Window and floor from the boundary projection, a new epoch; returns it.
    ``next_seq`` stays the high-water mark: seqs are identities, and a row a
    rewrite took out keeps its seq in quarantine."""
    ws_id = ws.workspace
    window = conn.execute(
        "SELECT seq, boundary FROM tl_rows WHERE workspace = %s AND boundary IS NOT NULL "
        "ORDER BY seq DESC LIMIT 1", (ws_id,)).fetchone()
    floor = conn.execute(
        "SELECT seq FROM tl_rows WHERE workspace = %s AND boundary = 'manual' "
        "ORDER BY seq DESC LIMIT 1", (ws_id,)).fetchone()
    epoch = rules.new_epoch(old.epoch)
    conn.execute(
        "UPDATE tl_head SET next_seq = %s, epoch = %s, window_seq = %s, window_reason = %s, "
        "floor_seq = %s, updated_ms = %s WHERE workspace = %s",
        (next_seq, epoch, window[0] if window else 0, window[1] if window else None,
         floor[0] if floor else None, now_ms(), ws_id),
    )
    return epoch


def quarantine(conn: Any, workspace: str, condition: str, params: dict[str, Any],
               reason: str) -> tuple[int, int, list[str] | None]:
    """Move the rows of ``workspace`` that match ``condition`` (SQL over
    ``tl_rows`` with named parameters) to ``tl_quarantine``; returns how many,
    their bytes (with newlines) and their batch ids. Two statements, each on
    the workspace's shard alone: the ids are the workspace's largest plus one,
    given under the head row's lock the caller holds (schema.py says why not
    the sequence)."""
    args = {**params, "ws": workspace, "ts": now_ms(), "reason": reason}
    conn.execute(
        "INSERT INTO tl_quarantine (workspace, id, ts_ms, seq, reason, raw) "
        "SELECT workspace, (SELECT coalesce(max(id), 0) FROM tl_quarantine WHERE "
        "workspace = %(ws)s) + row_number() OVER (ORDER BY seq), %(ts)s, seq, %(reason)s, raw "
        f"FROM tl_rows WHERE workspace = %(ws)s AND {condition}", args)
    got = conn.execute(
        f"WITH gone AS (DELETE FROM tl_rows WHERE workspace = %(ws)s AND {condition} "
        "RETURNING batch_id, raw) SELECT count(*), coalesce(sum(octet_length(raw) + 1), 0), "
        "array_agg(DISTINCT batch_id) FROM gone", args).fetchone()
    return int(got[0]), int(got[1]), got[2]


def rebaseline(ws: PgWorkspace) -> int:
    with ws.db.write(f"rebaseline workspace {ws.workspace!r}") as conn:
        st = _begin(ws, conn)
        return recompute_head(ws, conn, st, st.next_seq)


def _batch_rows(ws: PgWorkspace, conn: Any, batch_id: str) -> list[tuple[int, bytes]]:
    got = conn.execute("SELECT seq, raw FROM tl_rows WHERE workspace = %s AND batch_id = %s "
                       "ORDER BY seq", (ws.workspace, batch_id)).fetchall()
    return [(seq, bytes(raw)) for seq, raw in got]


def reject(ws: PgWorkspace, seq_or_seqs: int | Iterable[int]) -> rules.RejectResult:
    seqs = rules.reject_seqs(seq_or_seqs)
    with ws.db.write(f"reject in workspace {ws.workspace!r}") as conn:
        st = _begin(ws, conn)
        found = conn.execute(
            "SELECT seq, batch_id FROM tl_rows WHERE workspace = %s AND seq = ANY(%s)",
            (ws.workspace, sorted(seqs))).fetchall()
        missing = sorted(seqs - {seq for seq, _ in found})
        if missing:
            raise rules.no_row(ws.workspace, missing, "rejected")
        targets: dict[int, bytes] = {}
        for seq, batch_id in found:
            rows = _batch_rows(ws, conn, batch_id)
            idx = next(i for i, (s, _) in enumerate(rows) if s == seq)
            decoded = [decode(ws.workspace, s, raw).data for s, raw in rows]
            for i in rules.reject_targets(decoded, [idx]):
                targets[rows[i][0]] = rows[i][1]
        rejected: list[int] = []
        already: list[int] = []
        for seq, raw in sorted(targets.items()):
            row = decode(ws.workspace, seq, raw).data
            if not rules.rejectable(ws.workspace, raw, row):
                already.append(seq)
                continue
            line = husk_line(raw, row)
            conn.execute("UPDATE tl_rows SET raw = %s WHERE workspace = %s AND seq = %s",
                         (line[:-1] if line.endswith(b"\n") else line, ws.workspace, seq))
            rejected.append(seq)
        epoch = recompute_head(ws, conn, st, st.next_seq) if rejected else st.epoch
    return rules.reject_result(rejected, already, epoch)


def truncate_after(ws: PgWorkspace, seq: int) -> rules.TruncateResult:
    seq = rules.truncate_seq(seq)
    with ws.db.write(f"truncate workspace {ws.workspace!r}") as conn:
        st = _begin(ws, conn)
        got = conn.execute("SELECT raw FROM tl_rows WHERE workspace = %s AND seq = %s",
                           (ws.workspace, seq)).fetchone()
        if got is None:
            raise rules.no_row(ws.workspace, seq, "truncated")
        row = decode(ws.workspace, seq, bytes(got[0])).data
        rules.check_truncate(ws.workspace, seq, row, (seq, 0), st.floor)
        moved = quarantine(conn, ws.workspace, "seq > %(seq)s", {"seq": seq},
                           f"truncated after seq {seq}")
        removed_rows, removed_bytes, batches = moved
        if batches:
            conn.execute("DELETE FROM tl_batches WHERE workspace = %s AND batch_id = ANY(%s)",
                         (ws.workspace, [b for b in batches if b is not None]))
        epoch = recompute_head(ws, conn, st, st.next_seq) if removed_rows else st.epoch
    return rules.TruncateResult(
        seq, removed_rows, int(removed_bytes), 0,
        [f"tl_quarantine ({removed_rows} rows)"] if removed_rows else [], epoch)


def purge_before_floor(ws: PgWorkspace) -> rules.PurgeResult:
    with ws.db.write(f"purge workspace {ws.workspace!r}") as conn:
        st = _begin(ws, conn)
        if st.floor is None:
            return rules.PurgeResult(0, 0, 0, None, st.epoch)
        floor = st.floor.seq
        cut = floor  # rows at or before `cut` go
        got = conn.execute("SELECT batch_id FROM tl_rows WHERE workspace = %s AND seq = %s",
                           (ws.workspace, floor)).fetchone()
        if got is not None:
            rows = [(s, raw) for s, raw in _batch_rows(ws, conn, got[0]) if s <= floor]
            keep = rules.purge_cut([decode(ws.workspace, s, raw).data for s, raw in rows],
                                   len(rows) - 1)
            cut = rows[keep][0] - 1 if keep < len(rows) else floor
        gone = conn.execute(
            "WITH gone AS (DELETE FROM tl_rows WHERE workspace = %s AND seq <= %s "
            "RETURNING batch_id, raw) SELECT count(*), coalesce(sum(octet_length(raw) + 1), 0), "
            "array_agg(DISTINCT batch_id) FROM gone", (ws.workspace, cut)).fetchone()
        if gone[2]:
            conn.execute("DELETE FROM tl_batches WHERE workspace = %s AND batch_id = ANY(%s)",
                         (ws.workspace, [b for b in gone[2] if b is not None]))
        epoch = st.epoch
        if gone[0]:
            # The floor stays where it was even when its row is gone: nothing
            # at or before it may come back (fail closed).
            epoch = rules.new_epoch(st.epoch)
            conn.execute("UPDATE tl_head SET epoch = %s, updated_ms = %s WHERE workspace = %s",
                         (epoch, now_ms(), ws.workspace))
        return rules.PurgeResult(gone[0], int(gone[1]), 0, rules.FloorAt(floor, None, None),
                                 epoch)


def backup(ws: PgWorkspace, dest: str) -> BackupResult:
    """A copy of this workspace as a file-engine workspace directory ``dest``
    (new): FORMAT and one segment holding every row's bytes, read from one
    snapshot (REPEATABLE READ). Copy it under a file root as ROOT/WS, or
    ``tledger migrate`` it back to a database."""
    ws.require()
    refuse_existing(dest)
    with ws.db.read("backup") as conn, conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        cur = conn.cursor(name="tl_backup")  # server-side: flat memory
        cur.execute("SELECT raw FROM tl_rows WHERE workspace = %s ORDER BY seq",
                    (ws.workspace,))
        total = write_workspace_dir(dest, (bytes(raw) for (raw,) in cur))
    return BackupResult(ws.workspace, dest, 2, total)


def stat(ws: PgWorkspace) -> StatReport:
    ws.require()
    with ws.db.read("stat") as conn:
        st = ws._head(conn)
        counts = conn.execute(
            "SELECT count(*), coalesce(sum(octet_length(raw) + 1), 0) FROM tl_rows "
            "WHERE workspace = %s", (ws.workspace,)).fetchone()
        q = conn.execute("SELECT coalesce(sum(octet_length(raw)), 0) FROM tl_quarantine "
                         "WHERE workspace = %s", (ws.workspace,)).fetchone()
        bounds = conn.execute(  # by the partial index on boundary rows
            "SELECT count(*) FROM tl_rows WHERE workspace = %s AND boundary IS NOT NULL",
            (ws.workspace,)).fetchone()
    assert st is not None
    return st.stat(ws.workspace, engine="postgresql", database=ws.db.where,
                   boundaries=int(bounds[0]), rows=counts[0], nbytes=int(counts[1]),
                   quarantine_bytes=int(q[0]))
