"""Canonical rows: the rules for what a caller may append, and the read side.

Pure: no file is touched here. ``prepare_batch`` turns caller dicts into stored
lines (checked, ordered, framed); :class:`Row` is what readers get back.
"""

from __future__ import annotations

import math
import os
import random
import secrets
import time
from collections.abc import Sequence
from typing import Any

import msgspec

from ledger.core.errors import InvalidRow, RowTooLarge
from ledger.core.format import rows as fmt
from ledger.core.nesting import nests_deeper

_STORE_ASSIGNED = ("seq", "batch", fmt.CHECKSUM_KEY)
_CALLER_KINDS = frozenset({"message", "warning", "truncation"})


# Ids and temp names must be unique, not secret: bits from a generator seeded
# by the OS once per process (and again in each forked child) cost no system
# call.
_rng = random.Random(secrets.token_bytes(32))
os.register_at_fork(after_in_child=lambda: _rng.seed(secrets.token_bytes(32)))


def unique_hex(digits: int) -> str:
    """``digits`` random hex digits (4 bits each) for names that must not clash."""
    return f"{_rng.getrandbits(4 * digits):0{digits}x}"


def new_id(prefix: str) -> str:
    """A unique, time-ordered id: ``prefix`` + 12 hex digits of ms + 16 random."""
    return f"{prefix}{time.time_ns() // 1_000_000:012x}{unique_hex(16)}"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Row(msgspec.Struct, gc=False, eq=False):
    """One stored row. ``to_dict()`` gives the canonical keys plus the caller's
    unknown fields, in stored order, without storage-internal fields.

    ``data`` is the stored dict itself: do not mutate it or assign another
    (``to_dict()`` copies it). A msgspec struct, built in C, that the cyclic
    collector neither counts nor walks (``gc=False``): a provider view builds
    one per row of its window (bench/RESULTS.md, issue 31, sixth round). A
    row holds its line, two numbers and its dict of JSON values: no cycle
    runs through it unless a caller puts the row into its own dict (it would
    then never be freed). Equal only to itself (``eq=False``), as before."""

    line: bytes
    segment: int
    offset: int
    data: dict[str, Any]

    @property
    def seq(self) -> int:
        return int(self.data["seq"])

    @property
    def kind(self) -> str:
        return str(self.data.get("kind", ""))

    @property
    def role(self) -> str:
        return str(self.data.get("role", ""))

    @property
    def id(self) -> str:
        return str(self.data.get("id", ""))

    @property
    def batch(self) -> dict[str, Any]:
        b = self.data.get("batch")
        return b if isinstance(b, dict) else {}

    @property
    def parts(self) -> list[Any]:
        p = self.data.get("parts")
        return p if isinstance(p, list) else []

    @property
    def meta(self) -> dict[str, Any]:
        m = self.data.get("meta")
        return m if isinstance(m, dict) else {}

    @property
    def reset_reason(self) -> str | None:
        if self.kind != "reset":
            return None
        info = self.data.get("reset")
        reason = info.get("reason") if isinstance(info, dict) else None
        return reason if reason in fmt.RESET_REASONS else "manual"

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.data)
        out.pop(fmt.CHECKSUM_KEY, None)
        return out

    def __repr__(self) -> str:
        return f"Row(seq={self.data.get('seq')}, kind={self.kind!r}, role={self.role!r})"


def is_empty_assistant(row: dict[str, Any]) -> bool:
    """An empty, non-partial assistant record (a rejected request's husk)."""
    return (
        row.get("role") == "assistant"
        and row.get("kind", "message") == "message"
        and not row.get("parts")
        and not row.get("partial", False)
    )


_INT_MIN, _INT_MAX = -(1 << 63), (1 << 63) - 1
_SCALARS = (str, bool, type(None))

_OUTSIDE = (
    "does not round-trip through JSON unchanged (NaN/Infinity, integers beyond 64 bits, "
    "non-string keys or tuples are outside the JSON domain)"
)
_TOO_DEEP = f"nested deeper than {fmt.MAX_DEPTH} levels of arrays and objects"


def _plain_json(value: Any) -> bool | str | None:
    """Decide the JSON domain of ``value`` by one walk, level by level, when
    it is built of the plain types only: True when it is in the domain
    (64-bit integers, finite floats, string keys) and nests at most MAX_DEPTH
    arrays and objects deep (``value`` is level 1, as ``too_deep`` counts its
    encoding); the reason when it is not (``_TOO_DEEP`` for the depth); None
    when some value is of another type (a subclass, a tuple, ...), which the
    caller settles by a round trip. The walk stops at the first level past
    MAX_DEPTH, so hostile nesting never reaches the encoder."""
    level = [value]
    depth = 0
    while level:
        depth += 1
        deeper: list[Any] = []
        for v in level:
            t = type(v)
            if t is str or t is bool or v is None:
                continue
            if t is dict:
                if depth > fmt.MAX_DEPTH:
                    return _TOO_DEEP
                for k in v:
                    if type(k) is not str:
                        return None
                deeper.extend(v.values())
            elif t is list:
                if depth > fmt.MAX_DEPTH:
                    return _TOO_DEEP
                deeper.extend(v)
            elif t is int:
                if not _INT_MIN <= v <= _INT_MAX:
                    return "an integer is outside the 64-bit range"
            elif t is float:
                if not math.isfinite(v):
                    return _OUTSIDE
            else:
                return None
        level = deeper
    return True


def _ints_in_range(value: Any) -> bool:
    """True when every integer in ``value`` fits in 64 signed bits."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, int) and not isinstance(v, bool) and not _INT_MIN <= v <= _INT_MAX:
            return False
    return True


def _check_json_domain(row: dict[str, Any], index: int, caller: dict[str, Any] | None = None
                       ) -> bytes:
    """The JSON body of the stored ``row``, or InvalidRow when it is outside
    the JSON domain or nests too deep. ``caller`` is the caller's row that
    ``row`` was built from (``stored_row``): the walk then covers just the
    caller's values (the store's own are plain ints and strings)."""
    plain = _plain_json(row if caller is None else caller)
    if plain is _TOO_DEEP:
        raise too_deep_error(index)
    if isinstance(plain, str):
        raise InvalidRow(f"row {index}: {plain}", index)
    if plain is None and not _ints_in_range(row):
        raise InvalidRow(f"row {index}: an integer is outside the 64-bit range", index)
    try:
        body = fmt.encode_json(row)
    except RecursionError:
        raise too_deep_error(index) from None
    except (TypeError, ValueError, OverflowError, UnicodeEncodeError) as exc:
        raise InvalidRow(f"row {index}: not encodable as JSON: {exc}", index) from exc
    if plain is True:
        # Plain types in the domain encode to JSON that decodes to an equal
        # value (msgspec writes floats in shortest round-trip form), and what
        # msgspec can encode it can decode: no round trip needed. The walk
        # counted the depth (the same levels as the encoding's brackets).
        return body
    if fmt.too_deep(body):
        raise too_deep_error(index)
    try:
        back = fmt.decode_json(body)
    except (msgspec.DecodeError, RecursionError) as exc:  # pragma: no cover - msgspec round-trips
        raise InvalidRow(f"row {index}: does not round-trip through JSON: {exc}", index) from exc
    if back != row:
        raise InvalidRow(f"row {index}: {_OUTSIDE}", index)
    return body


def too_deep_error(index: int | None = None, what: str = "row") -> InvalidRow:
    """The error for input nested deeper than a row may (``what`` ``index``)."""
    where = f"{what} {index}" if index is not None else f"the {what}"
    return InvalidRow(f"{where}: nested deeper than {fmt.MAX_DEPTH} levels of arrays and "
                      "objects (the limit for a row)", index)


def check_depth(value: Any, index: int | None = None, what: str = "row") -> None:
    """Raise :class:`InvalidRow` when ``value`` (a row, or what becomes one: an
    SDK item, a message's content) nests deeper than a row may. The runtime
    calls it on its input before any adapter, copy or encoder recurses into
    it, so hostile nesting is refused as such, never a ``RecursionError``."""
    if nests_deeper(value):
        raise too_deep_error(index, what)


def check_batch_id(batch_id: Any) -> None:
    """Raise :class:`InvalidRow` for a caller's batch id that some engine
    could not store as given: not a string of 1 to 200 characters, a NUL
    (PostgreSQL text cannot hold U+0000) or a lone surrogate (not UTF-8).
    Every engine refuses the same ids, so a history moves between engines."""
    if not isinstance(batch_id, str) or not 0 < len(batch_id) <= 200:
        raise InvalidRow("batch_id must be a string of 1 to 200 characters")
    if "\x00" in batch_id:
        raise InvalidRow(f"batch_id {batch_id!r} holds NUL (U+0000), which no engine may "
                         "store (PostgreSQL text cannot); use printable characters")
    try:
        batch_id.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidRow(f"batch_id {batch_id!r} holds a lone surrogate "
                         f"(U+{ord(batch_id[exc.start]):04X}), not encodable as UTF-8") from None


def _check_parts(parts: Any, index: int) -> None:
    if not isinstance(parts, list):
        raise InvalidRow(f"row {index}: 'parts' must be a list, got {type(parts).__name__}", index)
    for j, part in enumerate(parts):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise InvalidRow(f"row {index}: part {j} must be an object with a string 'type'", index)
        ptype = part["type"]
        if ptype in ("text", "reasoning") and not isinstance(part.get("text"), str):
            raise InvalidRow(f"row {index}: part {j} ({ptype}) needs a string 'text'", index)
        if ptype == "tool_call" and not (
            isinstance(part.get("id"), str) and isinstance(part.get("name"), str)
        ):
            raise InvalidRow(
                f"row {index}: part {j} (tool_call) needs string 'id' and 'name'", index
            )
        if ptype == "tool_result" and not isinstance(part.get("id"), str):
            raise InvalidRow(f"row {index}: part {j} (tool_result) needs a string 'id'", index)
        if ptype == "media" and not isinstance(part.get("mime"), str):
            raise InvalidRow(f"row {index}: part {j} (media) needs a string 'mime'", index)


def check_caller_row(row: Any, index: int, *, internal: bool = False) -> None:
    """Raise :class:`InvalidRow` naming ``index`` when ``row`` breaks the rules."""
    if not isinstance(row, dict):
        raise InvalidRow(f"row {index}: must be a JSON object, got {type(row).__name__}", index)
    for key in _STORE_ASSIGNED:
        if key in row:
            raise InvalidRow(f"row {index}: '{key}' is assigned by the store", index)
    kind = row.get("kind", "message")
    if not isinstance(kind, str):
        raise InvalidRow(f"row {index}: 'kind' must be a string", index)
    allowed = fmt.KINDS if internal else _CALLER_KINDS
    if kind not in allowed:
        if kind in fmt.KINDS:
            raise InvalidRow(
                f"row {index}: kind {kind!r} is written only by clear_soft(), rollover(), "
                "compact() and recovery",
                index,
            )
        raise InvalidRow(f"row {index}: unknown kind {kind!r}", index)
    if not isinstance(row.get("role"), str) or row["role"] not in fmt.ROLES:
        raise InvalidRow(
            f"row {index}: role must be one of {sorted(fmt.ROLES)}, got {row.get('role')!r}", index
        )
    _check_parts(row.get("parts", []), index)
    if "id" in row and (not isinstance(row["id"], str) or not row["id"]):
        raise InvalidRow(f"row {index}: 'id' must be a non-empty string", index)
    if "meta" in row and not isinstance(row["meta"], dict):
        raise InvalidRow(f"row {index}: 'meta' must be an object", index)
    if "partial" in row and not isinstance(row["partial"], bool):
        raise InvalidRow(f"row {index}: 'partial' must be true or false", index)
    if "ts" in row and (isinstance(row["ts"], bool) or not isinstance(row["ts"], int)):
        raise InvalidRow(f"row {index}: 'ts' must be an integer (ms since the epoch)", index)
    if kind == "reset":
        info = row.get("reset")
        if not isinstance(info, dict) or info.get("reason") not in fmt.RESET_REASONS:
            raise InvalidRow(f"row {index}: a reset row needs reset.reason", index)


def stored_row(
    row: dict[str, Any], seq: int, batch_id: str, n: int, i: int, ts: int,
    rid: str | None = None,
) -> dict[str, Any]:
    """The stored dict for a checked caller row: canonical keys first, in order,
    then ``reset``, then unknown fields in the caller's order. ``rid`` is the
    id to give a row that has none (else a new one)."""
    out: dict[str, Any] = {
        "seq": seq,
        "id": row.get("id") or rid or new_id("r_"),
        "kind": row.get("kind", "message"),
        "role": row["role"],
        "parts": row.get("parts", []),
        "partial": row.get("partial", False),
        "meta": row.get("meta", {}),
        "ts": row.get("ts", ts),
        "batch": {"id": batch_id, "n": n, "i": i},
    }
    if out["kind"] == "reset" and "reset" in row:
        out["reset"] = row["reset"]
    for key, value in row.items():
        if key not in out:
            out[key] = value
    return out


def _row_ids(n: int) -> list[str]:
    """``n`` new row ids (``new_id("r_")`` each) for one batch: one clock
    read and one draw of random bits for all of them."""
    ms = f"r_{time.time_ns() // 1_000_000:012x}"
    bits = f"{_rng.getrandbits(64 * n):0{16 * n}x}"
    return [ms + bits[k : k + 16] for k in range(0, 16 * n, 16)]


def prepare_batch(
    rows: Sequence[Any],
    first_seq: int,
    batch_id: str,
    max_row_bytes: int,
    *,
    internal: bool = False,
) -> tuple[list[dict[str, Any]], list[bytes]]:
    """Check, encode and frame a batch; raises InvalidRow (nothing is written)."""
    stored, bodies = prepare_bodies(rows, first_seq, batch_id, max_row_bytes, internal=internal)
    return stored, [fmt.frame(body) for body in bodies]


def prepare_bodies(
    rows: Sequence[Any],
    first_seq: int,
    batch_id: str,
    max_row_bytes: int,
    *,
    internal: bool = False,
) -> tuple[list[dict[str, Any]], list[bytes]]:
    """``prepare_batch`` without the framing: the checked JSON bodies, for a
    writer that learns the real seqs later (``renumber`` frames them)."""
    if not isinstance(rows, Sequence) or isinstance(rows, (str, bytes, dict)):
        raise InvalidRow("rows must be a list of row objects")
    if not rows:
        raise InvalidRow("a batch needs at least one row")
    check_batch_id(batch_id)
    ts = now_ms()
    n = len(rows)
    ids = _row_ids(n)
    stored: list[dict[str, Any]] = []
    bodies: list[bytes] = []
    limit = max_row_bytes - fmt.LINE_SUFFIX
    for i, row in enumerate(rows):
        check_caller_row(row, i, internal=internal)
        out = stored_row(row, first_seq + i, batch_id, n, i, ts, ids[i])
        body = _check_json_domain(out, i, row)
        if len(body) > limit:
            raise RowTooLarge(
                f"row {i}: {len(body)} bytes encoded, above max_row_bytes={max_row_bytes}", i
            )
        stored.append(out)
        bodies.append(body)
    return stored, bodies


_SEQ_KEY = b'{"seq":'


def renumber(stored: list[dict[str, Any]], bodies: list[bytes], first_seq: int,
             max_row_bytes: int) -> list[bytes]:
    """Give bodies prepared with placeholder seqs their real ones and frame
    them: rewrite the ``seq`` prefix of each (the rest is already checked)."""
    out = []
    for i, body in enumerate(bodies):
        seq = first_seq + i
        assert body.startswith(_SEQ_KEY)
        body = b'{"seq":%d' % seq + body[body.index(b",", len(_SEQ_KEY)) :]
        if len(body) + fmt.LINE_SUFFIX > max_row_bytes:
            raise RowTooLarge(
                f"row {i}: {len(body)} bytes encoded, above max_row_bytes={max_row_bytes}", i
            )
        stored[i]["seq"] = seq
        out.append(fmt.frame(body))
    return out
