"""The JSON-domain check of caller rows: the one-walk fast path accepts and
refuses exactly what an encode + decode round trip does."""

from __future__ import annotations

import collections
import math

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.core.errors import InvalidRow
from ledger.core.format import rows as fmt
from ledger.core.rows import _check_json_domain


def round_trip_accepts(row: dict) -> bool:
    """The reference: a row is in the domain when it encodes, every integer
    fits 64 signed bits, and decoding gives back an equal value."""
    stack = [row]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
        elif isinstance(v, int) and not isinstance(v, bool) and not -(2**63) <= v < 2**63:
            return False
    try:
        body = msgspec.json.encode(row)
    except (TypeError, ValueError, OverflowError, UnicodeEncodeError, RecursionError):
        return False
    return msgspec.json.decode(body) == row


scalars = st.one_of(
    st.none(), st.booleans(), st.text(), st.integers(min_value=-(2**66), max_value=2**66),
    st.floats(allow_nan=True, allow_infinity=True),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(st.text(max_size=5), inner, max_size=4),
        st.dictionaries(st.integers(0, 9), inner, min_size=1, max_size=2),
        st.builds(lambda d: collections.OrderedDict(d), st.dictionaries(st.text(max_size=3), inner,
                                                                       max_size=2)),
    ),
    max_leaves=12,
)


@settings(max_examples=300)
@given(values)
def test_fast_check_agrees_with_the_round_trip(value: object) -> None:
    row = {"seq": 1, "role": "user", "parts": [], "meta": {"v": value}}
    try:
        body = _check_json_domain(row, 0)
    except InvalidRow:
        accepted = False
    else:
        accepted = True
        assert msgspec.json.decode(body) == row
    assert accepted == round_trip_accepts(row), value


@pytest.mark.parametrize(
    "bad",
    [math.nan, math.inf, -math.inf, 2**63, -(2**63) - 1, (1, 2), {1: "int key"}],
)
def test_values_outside_the_domain_are_refused(bad: object) -> None:
    with pytest.raises(InvalidRow, match="row 3"):
        _check_json_domain({"role": "user", "meta": {"x": [bad]}}, 3)


@pytest.mark.parametrize("kind", [b"[]", b'{"k":1}', b'["message"]', b"7", b"true"])
def test_a_damaged_line_whose_kind_is_no_string_may_hide_a_reset(kind: bytes) -> None:
    """A line that failed its checksum but still parses, with a ``kind`` that
    is no known kind (no string at all, hashable or not): it may have been a
    reset, so the floor fails closed (an unhashable kind once raised a plain
    TypeError here)."""
    data = b'{"seq":3,"kind":' + kind + b',"role":"user","parts":[]}'
    assert fmt.damage_may_hide_reset(data)
    assert not fmt.damage_may_hide_reset(b'{"seq":3,"kind":"message","role":"user","parts":[]}')
