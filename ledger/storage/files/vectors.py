"""The vectors of a file workspace's semantic channel (``ledger.storage.
vectors``): one file beside the recall index, ``ffmt.VECTORS_NAME``, a
projection like it.

Layout: a header line ``TLVEC 1 <json> <xxh3-64 hex of the json>\\n`` (the
JSON: the embedder's key and dimension, the epoch and floor the set is for,
and a random nonce), then fixed-size records (``vectors.Record``: seq,
window, hint, text hash, the float32 vector, a checksum over the nonce and
the record). A new set is written by temp file and rename; a catch-up
appends its records (one ``write`` per batch, ``O_APPEND``). No fsync: a
lost or torn tail only costs embeddings again (a partial last record is
cut off, a record that fails its checksum discards the file), never a
wrong vector. A record of another file (another nonce) fails its checksum,
so a reader that appends to a file another reader has just replaced writes
into the old, unlinked one. Opened without following links; a link, a
hard link or anything but a regular file is never read (``check`` reports
it; the next set replaces it by rename). Rewrites (reject, truncate, purge,
rewind, repair) delete it (``discard``), so no vector of a row they removed
outlives them.
"""

from __future__ import annotations

import json
import os
import stat as stat_mod
from collections.abc import Callable
from typing import Any

import xxhash

from ledger.core.format import files as ffmt
from ledger.storage.files import segments as segs
from ledger.storage.vectors import Backend, Damaged, Record, VectorSet, decode_records

MAGIC = b"TLVEC 1 "
HEADER_MAX = 4096


def vectors_path(wsdir: str) -> str:
    return os.path.join(wsdir, ffmt.VECTORS_NAME)


def unsafe(wsdir: str) -> str | None:
    """Why the file cannot be read (a link or not a regular file), else None."""
    try:
        st = os.lstat(vectors_path(wsdir))
    except FileNotFoundError:
        return None
    if not stat_mod.S_ISREG(st.st_mode):
        return f"{vectors_path(wsdir)} is {segs.describe_mode(st.st_mode)}"
    if st.st_nlink > 1:
        return f"{vectors_path(wsdir)} has {st.st_nlink} names (a hard link)"
    return None


def discard(wsdir: str) -> None:
    """Delete the vectors (a rewrite's clean-up; the next search rebuilds them)."""
    try:
        os.unlink(vectors_path(wsdir))
    except FileNotFoundError:
        pass


def _header(vs: VectorSet) -> bytes:
    doc = json.dumps({"key": vs.key, "dim": vs.dim, "epoch": vs.epoch, "floor": vs.floor,
                      "nonce": vs.nonce}, sort_keys=True, separators=(",", ":")).encode()
    return MAGIC + doc + b" " + xxhash.xxh3_64_hexdigest(doc).encode() + b"\n"


def parse_header(data: bytes) -> tuple[dict[str, Any], int]:
    """The header's fields and its length (``Damaged`` when it fails)."""
    nl = data.find(b"\n", 0, HEADER_MAX)
    if not data.startswith(MAGIC) or nl < 0:
        raise Damaged("its header is not a vector file's")
    doc, _, digest = data[len(MAGIC) : nl].rpartition(b" ")
    if xxhash.xxh3_64_hexdigest(doc).encode() != digest:
        raise Damaged("its header fails its checksum")
    try:
        fields = json.loads(doc)
        for name in ("key", "dim", "epoch", "floor", "nonce"):
            want = str if name == "key" else int
            if not isinstance(fields[name], want) or isinstance(fields[name], bool):
                raise Damaged(f"its header's {name} is malformed")
    except (ValueError, KeyError, TypeError):
        raise Damaged("its header is malformed") from None
    if not 1 <= fields["dim"] <= 4096:
        raise Damaged("its header's dimension is out of range")
    return fields, nl + 1


def _read(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def read_set(wsdir: str) -> tuple[VectorSet, int, tuple[int, int], int]:
    """The file's set (every record verified), how many bytes of a partial
    last record follow it, the file's identity, and how many records it
    holds of rows at or before its floor (never added to the set).
    ``Damaged`` when it fails; FileNotFoundError when there is none."""
    fd = os.open(vectors_path(wsdir), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
                 | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat_mod.S_ISREG(st.st_mode) or st.st_nlink > 1:
            raise Damaged("it is not a regular file of its own")
        data = _read(fd)
    finally:
        os.close(fd)
    fields, at = parse_header(data)
    vs = VectorSet(fields["key"], fields["dim"], fields["epoch"], fields["floor"],
                   fields["nonce"])
    records, partial = decode_records(data[at:], vs.dim, vs.nonce)
    vs.add(sorted(_unique(records), key=lambda r: r.seq))
    below = sum(r.seq <= vs.floor for r in records)
    return vs, partial, (st.st_dev, st.st_ino), below


def _unique(records: list[Record]) -> list[Record]:
    """One record per seq (two readers may have caught up at once: the same
    records twice); the first kept."""
    seen: dict[int, Record] = {}
    for r in records:
        seen.setdefault(r.seq, r)
    return list(seen.values())


class FileVectors(Backend):
    """The vectors file of one workspace directory, its set cached in this
    process while the file is the same (same identity, grown only by
    appends)."""

    def __init__(self, wsdir: str) -> None:
        self.wsdir = wsdir
        self._vs: VectorSet | None = None
        self._ident: tuple[int, int] = (0, 0)
        self._size = 0

    def load(self, key: str, dim: int) -> VectorSet | None:
        path = vectors_path(self.wsdir)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            self._vs = None
            return None
        if unsafe(self.wsdir) is not None:
            self._vs = None
            return None  # replaced by rename when a set is started
        if self._vs is not None and (st.st_dev, st.st_ino) == self._ident \
                and st.st_size >= self._size:
            if st.st_size > self._size and not self._more(st.st_size):
                self._vs = None
                return None
            return self._vs
        try:
            vs, partial, ident, _ = read_set(self.wsdir)
        except (Damaged, OSError):
            self._vs = None
            return None
        if partial:  # a torn tail: written again without it
            self._rewrite(vs)
            st = os.lstat(path)
            ident = (st.st_dev, st.st_ino)
        self._vs, self._ident, self._size = vs, ident, st.st_size
        return vs

    def _more(self, size: int) -> bool:
        """Read what others appended since; False when it fails."""
        assert self._vs is not None
        try:
            fd = os.open(vectors_path(self.wsdir), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            if (os.fstat(fd).st_dev, os.fstat(fd).st_ino) != self._ident:
                return False
            data = os.pread(fd, size - self._size, self._size)
        finally:
            os.close(fd)
        try:
            records, partial = decode_records(data, self._vs.dim, self._vs.nonce)
        except Damaged:
            return False
        if partial:
            return False
        upto = self._vs.upto
        self._vs.add(sorted((r for r in _unique(records) if r.seq > upto),
                            key=lambda r: r.seq))
        self._size = size
        return True

    def _rewrite(self, vs: VectorSet) -> None:
        body = [_header(vs)] + [r.encode(vs.nonce) for r in vs.records()]
        self._replace(body)

    def _replace(self, chunks: list[bytes]) -> None:
        tmp = vectors_path(self.wsdir) + f".tmp-{os.getpid()}-{os.urandom(4).hex()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        try:
            os.write(fd, b"".join(chunks))
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        os.close(fd)
        os.replace(tmp, vectors_path(self.wsdir))

    def start(self, vs: VectorSet) -> None:
        self._replace([_header(vs)])
        st = os.lstat(vectors_path(self.wsdir))
        self._vs, self._ident, self._size = vs, (st.st_dev, st.st_ino), st.st_size

    def save(self, vs: VectorSet, records: list[Record]) -> None:
        data = b"".join(r.encode(vs.nonce) for r in records)
        try:
            fd = os.open(vectors_path(self.wsdir), os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW
                         | os.O_CLOEXEC)
        except OSError:
            return  # gone (a rewrite): the set is kept in this process only
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != self._ident or st.st_size != self._size:
                self._vs = None  # another reader's file, or it appended: read it again
                return
            os.write(fd, data)
            self._size += len(data)
        finally:
            os.close(fd)


def inspect(wsdir: str, st: Any, read_text: Callable[[int], str | None],
            sample: int = 64) -> list[tuple[str, str]]:
    """Read-only findings about the vectors against the log state ``st``:
    ``recall_vectors_unsafe`` (a link or not a regular file),
    ``recall_vectors_damaged`` (a header or record that fails its checksum),
    ``recall_vectors_stale`` (for another epoch or floor), or
    ``recall_vectors_disagrees`` (records of rows at or before the floor, or
    one of up to ``sample`` records, spread over the set, whose text hash is
    not that of the row's text in the log now; ``read_text(seq)`` gives it,
    None for a row not shown)."""
    from ledger.core import semantic

    why = unsafe(wsdir)
    if why is not None:
        return [("recall_vectors_unsafe", f"the semantic channel's vectors are not read: "
                 f"{why}, not a regular file of its own. Move it away (`tledger repair` "
                 "removes it)")]
    try:
        vs, partial, _, below = read_set(wsdir)
    except FileNotFoundError:
        return []
    except (Damaged, OSError) as exc:
        return [("recall_vectors_damaged", f"the semantic channel's vectors are damaged: {exc}")]
    floor = int(st.floor.seq) if st.floor is not None else 0
    if (vs.epoch, vs.floor) != (st.epoch, floor) or vs.upto > st.next_seq - 1:
        return [("recall_vectors_stale", "the semantic channel's vectors were computed for "
                 "another state of the log (a rewrite or a new privacy floor since)")]
    out = []
    if below:
        out.append(("recall_vectors_disagrees", f"the vectors file holds {below} vectors of "
                    "rows at or before the privacy floor (never used)"))
    if partial:
        out.append(("recall_vectors_damaged", f"the vectors file ends in a torn record "
                    f"({partial} bytes)"))
    n = len(vs.seqs)
    step = max(1, n // sample)
    for i in range(0, n, step):
        seq = vs.seqs[i]
        text = read_text(seq)
        if text is None or semantic.text_hash(semantic.embed_text(text)) != vs.ths[i]:
            out.append(("recall_vectors_disagrees", f"the vector of row {seq} was not "
                        "computed from the row's text in the log"))
            break
    return out
