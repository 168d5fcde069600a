"""The alternatives the ledger is measured against, implemented as their users
run them and never tuned to lose.

``RewriteTranscript``
    The reference design of the design record: ``appendManyToHistory`` reads
    the whole ``chat.jsonl``, writes old bytes plus the batch to a temporary
    file, fsyncs and renames it (``write-file-atomic``: no directory fsync),
    with a small receipt published the same way (temp + fsync + rename) before
    and after. Every batch costs O(history). It does the cheapest honest
    version of that work: the old bytes are copied raw, never parsed.
``JsonlAppend``
    What popular agent CLIs do: each row is one ``write`` to the transcript
    opened with ``O_APPEND`` (open, write, close per row, like Node's
    ``appendFileSync``), no lock and no fsync. Fast, and neither atomic per
    batch nor durable; shown for scale.
``SqliteSession``
    A SQLite session store in the shape of the OpenAI Agents SDK's
    ``SQLiteSession`` (tables ``agent_sessions`` / ``agent_messages``, index on
    ``(session_id, created_at)``), in WAL mode with ``synchronous=FULL``.
    ``add_items`` is one transaction; ``get_items`` reads all of the
    session's items back, which is what its users' turns do. Items are
    encoded and decoded with msgspec (faster than the SDK's ``json``).
"""

from __future__ import annotations

import os
import secrets
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder()


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def encode_rows(rows: Sequence[dict[str, Any]]) -> list[bytes]:
    return [_enc.encode(r) + b"\n" for r in rows]


def _write_atomic(
    directory: str, name: str, chunks: Sequence[bytes], *, fsync_dir_too: bool
) -> None:
    tmp = os.path.join(directory, f".{name}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        for chunk in chunks:
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, os.path.join(directory, name))
    if fsync_dir_too:
        fsync_dir(directory)


class RewriteTranscript:
    """The reference design: whole-transcript rewrite per batch."""

    def __init__(self, directory: str) -> None:
        self.dir = directory
        os.makedirs(directory, mode=0o700, exist_ok=True)
        self.path = os.path.join(directory, "chat.jsonl")
        self.epoch = 1
        if not os.path.exists(self.path):
            with open(self.path, "wb"):
                pass

    def grow(self, lines: Iterable[bytes]) -> None:
        """Build: append bytes without the protocol (untimed set-up)."""
        with open(self.path, "ab") as f:
            for line in lines:
                f.write(line)

    def size(self) -> int:
        return os.path.getsize(self.path)

    def _receipt(self, state: str) -> None:
        st = os.stat(self.path)
        body = _enc.encode(
            {"state": state, "epoch": self.epoch, "size": st.st_size, "ino": st.st_ino,
             "mtime_ns": st.st_mtime_ns}
        )
        _write_atomic(self.dir, "receipt.json", [body], fsync_dir_too=False)

    def append_many(self, lines: Sequence[bytes]) -> None:
        self._receipt("pending")
        with open(self.path, "rb") as f:
            old = f.read()
        _write_atomic(self.dir, "chat.jsonl", [old, *lines], fsync_dir_too=False)
        self._receipt("stable")


class JsonlAppend:
    """Plain O_APPEND JSONL, one write per row, no lock, no fsync."""

    def __init__(self, directory: str) -> None:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        self.path = os.path.join(directory, "session.jsonl")
        if not os.path.exists(self.path):
            with open(self.path, "wb"):
                pass

    def grow(self, lines: Iterable[bytes]) -> None:
        with open(self.path, "ab") as f:
            for line in lines:
                f.write(line)

    def size(self) -> int:
        return os.path.getsize(self.path)

    def append_many(self, lines: Sequence[bytes]) -> None:
        for line in lines:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)


_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS agent_sessions (
        session_id TEXT PRIMARY KEY,
        created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
        updated_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP)""",
    """CREATE TABLE IF NOT EXISTS agent_messages (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id TEXT NOT NULL,
        message_data TEXT NOT NULL,
        created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
        FOREIGN KEY (session_id) REFERENCES agent_sessions (session_id) ON DELETE CASCADE)""",
    """CREATE INDEX IF NOT EXISTS idx_agent_messages_session_id
        ON agent_messages (session_id, created_at)""",
)


_NEW_SESSION = "INSERT OR IGNORE INTO agent_sessions (session_id) VALUES (?)"


class SqliteSession:
    """An Agents-SDK-shaped SQLite session store, WAL + synchronous=FULL."""

    def __init__(self, path: str, session_id: str = "bench") -> None:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        self.path = path
        self.session_id = session_id
        self.conn = sqlite3.connect(path, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        for stmt in _SCHEMA:
            self.conn.execute(stmt)
        self.conn.commit()

    def close(self) -> None:
        self.conn.close()

    def size(self) -> int:
        total = 0
        for suffix in ("", "-wal"):
            try:
                total += os.path.getsize(self.path + suffix)
            except FileNotFoundError:
                pass
        return total

    def grow(self, batches: Iterable[Sequence[dict[str, Any]]]) -> None:
        """Build: bulk insert without per-batch syncs (untimed set-up)."""
        c = self.conn
        c.execute("PRAGMA synchronous=OFF")
        c.execute(_NEW_SESSION, (self.session_id,))
        pending: list[tuple[str, bytes]] = []
        for batch in batches:
            pending.extend((self.session_id, _enc.encode(item)) for item in batch)
            if len(pending) >= 5000:
                self._insert(pending)
                pending = []
        if pending:
            self._insert(pending)
        c.commit()
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        c.execute("PRAGMA synchronous=FULL")

    def _insert(self, pending: list[tuple[str, bytes]]) -> None:
        # message_data is TEXT: bind str, as the SDK's json.dumps does.
        self.conn.executemany(
            "INSERT INTO agent_messages (session_id, message_data) VALUES (?, ?)",
            [(s, d.decode("utf-8")) for s, d in pending],
        )
        self.conn.commit()

    def add_items(self, items: Sequence[dict[str, Any]]) -> None:
        c = self.conn
        c.execute(_NEW_SESSION, (self.session_id,))
        c.executemany(
            "INSERT INTO agent_messages (session_id, message_data) VALUES (?, ?)",
            [(self.session_id, _enc.encode(item).decode("utf-8")) for item in items],
        )
        c.execute(
            "UPDATE agent_sessions SET updated_at = CURRENT_TIMESTAMP WHERE session_id = ?",
            (self.session_id,),
        )
        c.commit()

    def get_items(self) -> list[Any]:
        cur = self.conn.execute(
            "SELECT message_data FROM agent_messages WHERE session_id = ? ORDER BY created_at ASC",
            (self.session_id,),
        )
        return [_dec.decode(data) for (data,) in cur.fetchall()]
