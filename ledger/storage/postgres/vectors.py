"""The vectors of a PostgreSQL workspace's semantic channel (``ledger.
storage.vectors``): plain tables beside the recall index, a projection like
it (pgvector is not required: the query is a brute-force cosine over the
workspace's vectors in this process, as on the other engines).

``tl_vec_state``: one row per workspace, the set's embedder key and
dimension, the epoch and floor it is for, and its nonce; ``tl_vec``: one row
per vector, the encoded ``vectors.Record`` (its checksum covers the nonce, so
a record of another set fails it). On Citus both are distributed by
workspace, colocated with ``tl_rows`` (``citus.py``). A rewrite deletes both
in its own transaction (``rewrites.replace``), so no vector of a row it
removed outlives it; so does deleting the workspace.

This process keeps the set it read while the state row is unchanged, and
reads only the records after its newest; a record that fails its checksum
starts the set again (the vectors of unchanged texts reused). Written with
``synchronous_commit`` off, as the recall index.
"""

from __future__ import annotations

from typing import Any

from ledger.storage.postgres.recall import SYNC_OFF
from ledger.storage.vectors import Backend, Damaged, Record, VectorSet, decode_records

TABLES = ("tl_vec", "tl_vec_state")
_STATE = "key, dim, epoch, floor, nonce"


def _signed(n: int) -> int:
    return n - (1 << 64) if n >= 1 << 63 else n


def _unsigned(n: int) -> int:
    return n + (1 << 64) if n < 0 else n


class PgVectors(Backend):
    """The vectors of one workspace (module doc)."""

    def __init__(self, db: Any, workspace: str) -> None:
        self.db = db
        self.workspace = workspace
        self._vs: VectorSet | None = None
        self.conn: Any = None  # a read transaction the caller has open (one round trip less)

    def _state(self, conn: Any) -> tuple[str, int, int, int, int] | None:
        got = conn.execute(f"SELECT {_STATE} FROM tl_vec_state WHERE workspace = %s",
                           (self.workspace,)).fetchone()
        if got is None:
            return None
        return str(got[0]), int(got[1]), int(got[2]), int(got[3]), _unsigned(int(got[4]))

    def load(self, key: str, dim: int) -> VectorSet | None:
        if self.conn is not None:
            got = self._read(self.conn)
        else:
            with self.db.read("read the semantic channel's vectors") as conn, \
                    conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                got = self._read(conn)
        if got is None:
            self._vs = None
            return None
        vs, rows = got
        try:
            records = self._decode(vs, rows)
        except Damaged:
            self._vs = None
            return None
        vs.add(records)
        self._vs = vs
        return vs

    def _read(self, conn: Any) -> tuple[VectorSet, list[Any]] | None:
        """The set kept (this process's copy when still the same) and the
        records after its newest, read on ``conn``."""
        state = self._state(conn)
        if state is None or not 1 <= state[1] <= 4096:
            return None
        k, d, epoch, floor, nonce = state
        vs = self._vs
        if vs is None or (vs.key, vs.dim, vs.epoch, vs.floor, vs.nonce) != state:
            vs = VectorSet(k, d, epoch, floor, nonce)
        rows = conn.execute(
            "SELECT seq, rec FROM tl_vec WHERE workspace = %s AND seq > %s ORDER BY seq",
            (self.workspace, vs.upto), binary=True).fetchall()
        return vs, rows

    @staticmethod
    def _decode(vs: VectorSet, rows: list[Any]) -> list[Record]:
        out: list[Record] = []
        for seq, rec in rows:
            got, partial = decode_records(bytes(rec), vs.dim, vs.nonce)
            if partial or len(got) != 1 or got[0].seq != int(seq):
                raise Damaged(f"the vector record of row {seq} is malformed")
            out.append(got[0])
        return out

    def start(self, vs: VectorSet) -> None:
        with self.db.write("start the semantic channel's vectors") as conn:
            conn.execute(SYNC_OFF)
            conn.execute("DELETE FROM tl_vec WHERE workspace = %s", (self.workspace,))
            conn.execute(
                f"INSERT INTO tl_vec_state (workspace, {_STATE}) VALUES (%s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (workspace) DO UPDATE SET key = excluded.key, dim = excluded.dim, "
                "epoch = excluded.epoch, floor = excluded.floor, nonce = excluded.nonce",
                (self.workspace, vs.key, vs.dim, vs.epoch, vs.floor, _signed(vs.nonce)))
        self._vs = vs

    def save(self, vs: VectorSet, records: list[Record]) -> None:
        with self.db.write("keep the semantic channel's vectors") as conn:
            conn.execute(SYNC_OFF)
            got = conn.execute("SELECT nonce FROM tl_vec_state WHERE workspace = %s FOR UPDATE",
                               (self.workspace,)).fetchone()
            if got is None or _unsigned(int(got[0])) != vs.nonce:
                self._vs = None  # a rewrite or another reader started another set
                return
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO tl_vec (workspace, seq, rec) VALUES (%s, %s, %s) "
                    "ON CONFLICT (workspace, seq) DO NOTHING",
                    [(self.workspace, r.seq, r.encode(vs.nonce)) for r in records])


def inspect(conn: Any, workspace: str, epoch: int, floor: int,
            text_of: Any, sample: int = 64) -> list[tuple[str, str]]:
    """Read-only findings about a workspace's vectors in ``conn``'s snapshot
    (as ``files.vectors.inspect``): ``recall_vectors_damaged``,
    ``recall_vectors_stale`` or ``recall_vectors_disagrees``; ``text_of(seq)``
    gives a row's searched text now (None: not shown)."""
    from ledger.core import semantic

    got = conn.execute(f"SELECT {_STATE} FROM tl_vec_state WHERE workspace = %s",
                       (workspace,)).fetchone()
    if got is None:
        return []
    key, dim, v_epoch, v_floor, nonce = got
    if (int(v_epoch), int(v_floor)) != (epoch, floor):
        return [("recall_vectors_stale", "the semantic channel's vectors were computed for "
                 "another state of the log (a rewrite or a new privacy floor since)")]
    rows = conn.execute("SELECT seq, rec FROM tl_vec WHERE workspace = %s ORDER BY seq",
                        (workspace,), binary=True).fetchall()
    vs = VectorSet(str(key), int(dim), int(v_epoch), int(v_floor), _unsigned(int(nonce)))
    try:
        records = PgVectors._decode(vs, rows)
    except Damaged as exc:
        return [("recall_vectors_damaged", f"the semantic channel's vectors are damaged: {exc}")]
    if any(r.seq <= floor for r in records):
        return [("recall_vectors_stale", "the semantic channel holds vectors of rows at or "
                 "before the privacy floor")]
    step = max(1, len(records) // sample)
    for r in records[::step]:
        text = text_of(r.seq)
        if text is None or semantic.text_hash(semantic.embed_text(text)) != r.th:
            return [("recall_vectors_disagrees", f"the vector of row {r.seq} was not computed "
                     "from the row's text in the log")]
    return []
