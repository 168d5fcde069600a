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

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ledger.core import format as fmt
from ledger.core.errors import LedgerError, RewriteRefused
from ledger.core.husks import husk_line, is_husk, owns
from ledger.core.rows import now_ms
from ledger.storage.postgres.workspace import PgState, decode, new_epoch

if TYPE_CHECKING:
    from ledger.storage.postgres.workspace import PgWorkspace


def _begin(ws: PgWorkspace, conn: Any) -> PgState:
    st = ws._head(conn, lock=True)
    if st is None:
        from ledger.core.errors import WorkspaceNotFound

        raise WorkspaceNotFound(f"workspace {ws.workspace!r} has no history in {ws.db.where}")
    return st


def recompute_head(ws: PgWorkspace, conn: Any, old: PgState, next_seq: int | None) -> int:
    """Window and floor from the boundary projection, a new epoch; returns it."""
    ws_id = ws.workspace
    window = conn.execute(
        "SELECT seq, boundary FROM tl_rows WHERE workspace = %s AND boundary IS NOT NULL "
        "ORDER BY seq DESC LIMIT 1", (ws_id,)).fetchone()
    floor = conn.execute(
        "SELECT seq FROM tl_rows WHERE workspace = %s AND boundary = 'manual' "
        "ORDER BY seq DESC LIMIT 1", (ws_id,)).fetchone()
    if next_seq is None:
        last = conn.execute("SELECT max(seq) FROM tl_rows WHERE workspace = %s",
                            (ws_id,)).fetchone()
        next_seq = (last[0] or 0) + 1
    epoch = new_epoch(old.epoch)
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


def reject(ws: PgWorkspace, seq_or_seqs: int | Iterable[int]) -> dict[str, Any]:
    seqs = {seq_or_seqs} if isinstance(seq_or_seqs, int) else set(seq_or_seqs)
    if not seqs or not all(isinstance(s, int) and not isinstance(s, bool) for s in seqs):
        raise RewriteRefused("reject needs one or more integer seqs")
    with ws.db.write(f"reject in workspace {ws.workspace!r}") as conn:
        st = _begin(ws, conn)
        found = conn.execute(
            "SELECT seq, batch_id FROM tl_rows WHERE workspace = %s AND seq = ANY(%s)",
            (ws.workspace, sorted(seqs))).fetchall()
        missing = sorted(seqs - {seq for seq, _ in found})
        if missing:
            raise RewriteRefused(f"workspace {ws.workspace!r}: no readable row with seq "
                                 f"{missing}; nothing was rejected")
        targets: dict[int, bytes] = {}
        for seq, batch_id in found:
            rows = _batch_rows(ws, conn, batch_id)
            idx = next(i for i, (s, _) in enumerate(rows) if s == seq)
            request = decode(ws.workspace, seq, rows[idx][1]).data
            chosen = [idx]
            j = idx - 1
            while j >= 0 and owns(decode(ws.workspace, rows[j][0], rows[j][1]).data, request):
                chosen.insert(0, j)
                j -= 1
            for i in chosen:
                targets[rows[i][0]] = rows[i][1]
        rejected: list[int] = []
        already: list[int] = []
        for seq, raw in sorted(targets.items()):
            row = decode(ws.workspace, seq, raw).data
            if row.get("kind") == "reset":
                raise RewriteRefused(f"workspace {ws.workspace!r}: seq {seq} is a reset row; a "
                                     "rejection never rewrites a reset away")
            if row.get("kind", "message") != "message":
                raise RewriteRefused(f"workspace {ws.workspace!r}: seq {seq} is a "
                                     f"{row.get('kind')!r} row; only requests (kind 'message') "
                                     "are rejected")
            if is_husk(row):
                already.append(seq)
                continue
            line = husk_line(raw, row)
            conn.execute("UPDATE tl_rows SET raw = %s WHERE workspace = %s AND seq = %s",
                         (line[:-1] if line.endswith(b"\n") else line, ws.workspace, seq))
            rejected.append(seq)
        epoch = recompute_head(ws, conn, st, st.next_seq) if rejected else st.epoch
    return {"op": "reject", "rejected": rejected, "already": already, "epoch": epoch,
            "recovered": None}


def truncate_after(ws: PgWorkspace, seq: int) -> dict[str, Any]:
    if not isinstance(seq, int) or isinstance(seq, bool):
        raise RewriteRefused("truncate_after needs an integer seq")
    with ws.db.write(f"truncate workspace {ws.workspace!r}") as conn:
        st = _begin(ws, conn)
        got = conn.execute("SELECT raw FROM tl_rows WHERE workspace = %s AND seq = %s",
                           (ws.workspace, seq)).fetchone()
        if got is None:
            raise RewriteRefused(f"workspace {ws.workspace!r}: no readable row with seq {seq}; "
                                 "nothing was truncated")
        row = decode(ws.workspace, seq, bytes(got[0])).data
        b = row.get("batch") if isinstance(row.get("batch"), dict) else {}
        if isinstance(b.get("n"), int) and isinstance(b.get("i"), int) and b["i"] != b["n"] - 1:
            last, first = seq + (b["n"] - 1 - b["i"]), seq - b["i"]
            raise RewriteRefused(
                f"workspace {ws.workspace!r}: seq {seq} is row {b['i'] + 1} of {b['n']} of "
                f"batch {b.get('id')!r}; a batch is never split: truncate after seq {last} "
                f"(its last row) or after seq {first - 1} (before it)")
        if st.floor is not None and st.floor.seq > seq:
            raise RewriteRefused(
                f"workspace {ws.workspace!r}: truncating after seq {seq} would remove the "
                f"privacy floor (the manual reset at seq {st.floor.seq}); truncate after seq "
                f"{st.floor.seq} or later")
        moved = quarantine(conn, ws.workspace, "seq > %(seq)s", {"seq": seq},
                           f"truncated after seq {seq}")
        removed_rows, removed_bytes, batches = moved
        if batches:
            conn.execute("DELETE FROM tl_batches WHERE workspace = %s AND batch_id = ANY(%s)",
                         (ws.workspace, [b for b in batches if b is not None]))
        epoch = recompute_head(ws, conn, st, None) if removed_rows else st.epoch
    return {"op": "truncate_after", "seq": seq, "removed_rows": removed_rows,
            "removed_bytes": int(removed_bytes), "kept_reset_candidates": 0,
            "quarantine": [f"tl_quarantine ({removed_rows} rows)"] if removed_rows else [],
            "epoch": epoch, "recovered": None}


def purge_before_floor(ws: PgWorkspace) -> dict[str, Any]:
    with ws.db.write(f"purge workspace {ws.workspace!r}") as conn:
        st = _begin(ws, conn)
        result: dict[str, Any] = {"op": "purge_before_floor", "purged_rows": 0,
                                  "purged_bytes": 0, "kept_reset_candidates": 0, "floor": None,
                                  "epoch": st.epoch, "recovered": None}
        if st.floor is None:
            return result
        floor = st.floor.seq
        result["floor"] = {"seq": floor, "segment": None, "offset": None}
        got = conn.execute("SELECT raw FROM tl_rows WHERE workspace = %s AND seq = %s",
                           (ws.workspace, floor)).fetchone()
        cut = floor  # rows at or before `cut` go
        if got is not None:
            b = decode(ws.workspace, floor, bytes(got[0])).data.get("batch") or {}
            if b.get("n") != 1 and isinstance(b.get("i"), int):
                cut = floor - b["i"] - 1  # keep the floor's whole batch
        gone = conn.execute(
            "WITH gone AS (DELETE FROM tl_rows WHERE workspace = %s AND seq <= %s "
            "RETURNING batch_id, raw) SELECT count(*), coalesce(sum(octet_length(raw) + 1), 0), "
            "array_agg(DISTINCT batch_id) FROM gone", (ws.workspace, cut)).fetchone()
        result["purged_rows"], result["purged_bytes"] = gone[0], int(gone[1])
        if gone[2]:
            conn.execute("DELETE FROM tl_batches WHERE workspace = %s AND batch_id = ANY(%s)",
                         (ws.workspace, [b for b in gone[2] if b is not None]))
        if gone[0]:
            # The floor stays where it was even when its row is gone: nothing
            # at or before it may come back (fail closed).
            epoch = new_epoch(st.epoch)
            conn.execute("UPDATE tl_head SET epoch = %s, updated_ms = %s WHERE workspace = %s",
                         (epoch, now_ms(), ws.workspace))
            result["epoch"] = epoch
        return result


def backup(ws: PgWorkspace, dest: str) -> dict[str, Any]:
    """A copy of this workspace as a file-engine workspace directory ``dest``
    (new): FORMAT and one segment holding every row's bytes, read from one
    snapshot (REPEATABLE READ). Copy it under a file root as ROOT/WS, or
    ``tledger migrate`` it back to a database."""
    ws.require()
    if os.path.lexists(dest):
        raise LedgerError(f"backup destination {dest!r} already exists")
    os.makedirs(dest)
    seg = os.path.join(dest, fmt.segment_name(1))
    total = 0
    with ws.db.read("backup") as conn, conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        with open(seg, "wb") as out:
            cur = conn.cursor(name="tl_backup")  # server-side: flat memory
            cur.execute("SELECT raw FROM tl_rows WHERE workspace = %s ORDER BY seq",
                        (ws.workspace,))
            for (raw,) in cur:
                out.write(bytes(raw) + b"\n")
                total += len(raw) + 1
            out.flush()
            os.fsync(out.fileno())
    with open(os.path.join(dest, fmt.FORMAT_NAME), "wb") as f:
        f.write(fmt.FORMAT_TEXT)
        f.flush()
        os.fsync(f.fileno())
    fd = os.open(dest, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return {"workspace": ws.workspace, "dest": dest, "files": 2,
            "bytes": total + len(fmt.FORMAT_TEXT)}


def stat(ws: PgWorkspace) -> dict[str, Any]:
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
    return {
        "workspace": ws.workspace,
        "engine": "postgresql",
        "database": ws.db.where,
        "receipt": {"status": "stable", "epoch": st.epoch, "next_seq": st.next_seq,
                    "stamps_match": True},
        "epoch": st.epoch,
        "window": st.window_seq,
        "windows": 1 + int(bounds[0]),  # window 0, then one per boundary
        "next_seq": st.next_seq,
        "floor": None if st.floor is None else {"seq": st.floor.seq, "segment": None,
                                                 "offset": None},
        "segments": [],
        "rows": counts[0],
        "bytes": int(counts[1]),
        "quarantine_bytes": int(q[0]),
    }
