"""Property: any canonical row in the msgspec JSON domain round-trips exactly
through append_many and rows/get, key order included."""

from __future__ import annotations

import itertools
import shutil
import tempfile
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from ledger import Store
from ledger.core.format import rows as fmt
from tests.helpers import segment_files

SPECIAL = ["\u2028", "\u2029", "\x85", "\x00", "\r", "\n", "\r\n", '"', "\\", "/", "\t", "\x1f",
           "\x7f", "\ufeff", "\U0001f600", "\U0010ffff", "\ue000", "</script>", "\\u0000",
           '"kind":"reset"', "_c"]
# Strings without lone surrogates; pieces so that the special sequences show up often.
PIECE = st.one_of(st.characters(exclude_categories=("Cs",)), st.sampled_from(SPECIAL))
TEXT = st.lists(PIECE, max_size=12).map("".join)
KEY = st.one_of(TEXT, st.sampled_from(["kind", "seq", "reset", "batch", "_c", "type", ""]))
SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    TEXT,
)
JSON = st.recursive(
    SCALAR,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(KEY, inner, max_size=4)
    ),
    max_leaves=12,
)
OBJ = st.dictionaries(KEY, JSON, max_size=4)


def _with(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        out.setdefault(k, v)
    return out


PART = st.one_of(
    st.builds(lambda t, x: _with({"type": "text", "text": t}, x), TEXT, OBJ),
    st.builds(lambda t, x: _with({"type": "reasoning", "text": t}, x), TEXT, OBJ),
    st.builds(
        lambda i, n, inp, x: _with({"type": "tool_call", "id": i, "name": n, "input": inp}, x),
        TEXT, TEXT, JSON, OBJ,
    ),
    st.builds(
        lambda i, o, e, x: _with({"type": "tool_result", "id": i, "output": o, "error": e}, x),
        TEXT, JSON, st.booleans(), OBJ,
    ),
    st.builds(lambda m, u, x: _with({"type": "media", "mime": m, "url": u, "width": 3}, x),
              TEXT, TEXT, OBJ),
    # Unknown part types from a newer build, with nested unknown fields.
    st.builds(lambda t, x: _with({"type": t}, x),
              TEXT.filter(lambda t: t not in ("text", "reasoning", "tool_call", "tool_result",
                                              "media")), OBJ),
)

CANONICAL_CALLER = ("id", "kind", "role", "parts", "partial", "meta", "ts")
# "reset" on a message row is an unknown field too; its order is tested on its own below.
RESERVED = {*fmt.CANONICAL_KEYS, fmt.CHECKSUM_KEY, "reset"}
UNKNOWN = st.dictionaries(
    TEXT.filter(lambda k: k not in RESERVED), JSON, max_size=4
)


@st.composite
def caller_rows(draw: st.DrawFn) -> dict[str, Any]:
    role = draw(st.sampled_from(["user", "assistant", "system", "tool"]))
    fields: dict[str, Any] = {"role": role}
    if draw(st.booleans()):
        fields["kind"] = draw(st.sampled_from(["message", "warning", "truncation"]))
    if draw(st.booleans()):
        fields["id"] = draw(TEXT.filter(bool))
    if draw(st.booleans()):
        fields["parts"] = draw(st.lists(PART, max_size=4))
    if draw(st.booleans()):
        fields["partial"] = draw(st.booleans())
    if draw(st.booleans()):
        fields["meta"] = draw(OBJ)
    if draw(st.booleans()):
        fields["ts"] = draw(st.integers(min_value=-(2**63), max_value=2**63 - 1))
    unknown = draw(UNKNOWN)
    order = draw(st.permutations([*fields, *unknown]))
    merged = {**fields, **unknown}
    return {k: merged[k] for k in order}


def expected(row: dict[str, Any], seq: int, bid: str, n: int, i: int, got: dict[str, Any]
             ) -> dict[str, Any]:
    out = {
        "seq": seq,
        "id": row["id"] if "id" in row else got["id"],
        "kind": row.get("kind", "message"),
        "role": row["role"],
        "parts": row.get("parts", []),
        "partial": row.get("partial", False),
        "meta": row.get("meta", {}),
        "ts": row["ts"] if "ts" in row else got["ts"],
        "batch": {"id": bid, "n": n, "i": i},
    }
    for k, v in row.items():
        if k not in CANONICAL_CALLER:
            out[k] = v
    return out


def _same(a: Any, b: Any) -> bool:
    """Equal with key order, int/float and -0.0 told apart, at every depth."""
    return msgspec.json.encode(a) == msgspec.json.encode(b) and a == b


_counter = itertools.count()


@given(st.lists(caller_rows(), min_size=1, max_size=3), st.lists(caller_rows(), max_size=2))
def test_rows_round_trip_exactly(batch: list[dict[str, Any]], second: list[dict[str, Any]]) -> None:
    root = Path(tempfile.mkdtemp(prefix="tl-rt-"))
    try:
        h = Store(root, durability="off", segment_bytes=4096).history(f"ws{next(_counter)}")
        snapshot = msgspec.json.encode(batch)
        r = h.append_many(batch)
        assert msgspec.json.encode(batch) == snapshot  # the caller's rows are not mutated
        results = [(batch, r)]
        if second:
            results.append((second, h.append_many(second, batch_id="b-second")))
        got_all = [row.to_dict() for row in h.rows()]
        k = 0
        for rows, res in results:
            assert res.seqs == list(range(k + 1, k + len(rows) + 1))
            for i, row in enumerate(rows):
                got = got_all[k]
                want = expected(row, res.seqs[i], res.batch_id, len(rows), i, got)
                assert list(got) == list(want), "key order"
                assert _same(got, want)
                assert isinstance(got["id"], str) and got["id"]
                assert isinstance(got["ts"], int)
                one = h.get(res.seqs[i])
                assert one is not None and _same(one.to_dict(), want)
                k += 1
        assert k == len(got_all)
        # Lines are split on b"\n" only: one stored line per row, whatever the text holds.
        lines = b"".join(p.read_bytes() for p in segment_files(root / h.workspace))
        assert lines.endswith(b"\n") and lines.count(b"\n") == k
    finally:
        shutil.rmtree(root, ignore_errors=True)


