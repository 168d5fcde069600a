"""``ledger.core.windows.provider_rows`` against the definition it replaced.

The orphan path (a tool result whose call is not in the window, or whose call
already has a result, served as user text in a copy of its row) was rewritten
for speed (bench/RESULTS.md, issue 31, sixth round). ``_reference`` below is
the code as it stood before (8aae9f6 and floors, 386ae0b), kept verbatim; the
property is that both give the same rows, Row for Row and dict for dict, on
windows of calls, results, reused and missing ids, several results to a row,
non-dict parts, every role, and outputs of every shape. One rule was added
since (pairs9, ``_reference_other_kind``): only message rows hold calls and
results; a lead-in's or a warning's tool parts are served as text. And one
reason (req10): a result whose newest call with its id sat in such a row
earlier in the window says so, not that its call is in an earlier context
window (nor, when an older call with the id had a result, that it is late).
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ledger.core.format import rows as fmt
from ledger.core.rows import Row
from ledger.core.windows import PROVIDER_KINDS, provider_rows


def _reference_text(part: dict[str, Any], *, late: bool | str = False) -> dict[str, Any]:
    where = (late if isinstance(late, str) else "it came after its call was settled" if late
             else "its call is in an earlier context window")
    error = " (error)" if part.get("error") else ""
    label = f"[result of tool call {part.get('id')}{error}; {where}]"
    output = part.get("output")
    if isinstance(output, str):
        text = output
    elif isinstance(output, list) and all(
        isinstance(p, dict) and isinstance(p.get("text"), str) for p in output
    ):
        text = "\n".join(p["text"] for p in output)
    else:
        text = fmt.encode_json(output).decode("utf-8")
    return {"type": "text", "text": f"{label}\n{text}"}


def _media_parts(output: Any) -> bool:
    """An output of text and media parts holding a media part (tidy3: kept
    as parts after the label, as the adapters always kept them)."""
    def ok(p: Any) -> bool:
        return isinstance(p, dict) and (
            (p.get("type") == "text" and isinstance(p.get("text"), str))
            or (p.get("type") == "media" and isinstance(p.get("mime"), str)
                and (isinstance(p.get("data"), str) or isinstance(p.get("url"), str))))
    return (isinstance(output, list) and bool(output) and all(map(ok, output))
            and any(p["type"] == "media" for p in output))


def _reference_parts(part: dict[str, Any], *, late: bool | str = False) -> list[Any]:
    text = _reference_text(part, late=late)
    if _media_parts(part.get("output")):
        return [{"type": "text", "text": text["text"].split("\n", 1)[0]},
                *[dict(p) for p in part["output"]]]
    return [text]


def _reference_served(item: Any, row: dict[str, Any], parts: list[Any],
                      orphans: dict[int, bool | str]) -> Any:
    new_parts = [q for i, p in enumerate(parts)
                 for q in (_reference_parts(p, late=orphans[i]) if i in orphans else [p])]
    row = {**row, "parts": new_parts}
    if row.get("role") == "tool" and not any(
        [isinstance(p, dict) and p.get("type") == "tool_result" for p in new_parts]
    ):
        row["role"] = "user"
    row.pop(fmt.CHECKSUM_KEY, None)
    return row if isinstance(item, dict) else Row(item.line, item.segment, item.offset, row)


def _reference_other_kind(item: Any, row: dict[str, Any], kind: str) -> Any:
    """The rule added later (pairs9): a lead-in's or a warning's tool parts
    are text, never a call or a result; the row, a copy, is never a tool row."""
    parts = row.get("parts")
    if not isinstance(parts, list) or not any(
            isinstance(p, dict) and p.get("type") in ("tool_call", "tool_result") for p in parts):
        return item
    why = f"it sat in a {kind} row, not a message row"
    new_parts: list[Any] = []
    for p in parts:
        if isinstance(p, dict) and p.get("type") == "tool_result":
            new_parts.extend(_reference_parts(p, late=why))
            continue
        elif isinstance(p, dict) and p.get("type") == "tool_call":
            inp = fmt.encode_json(p.get("input")).decode("utf-8")
            label = f"[tool call {p.get('id')} to {p.get('name')}; {why}]"
            p = {"type": "text", "text": f"{label}\n{inp}"}
        new_parts.append(p)
    new = {**row, "parts": new_parts}
    if new.get("role") == "tool":
        new["role"] = "user"
    new.pop(fmt.CHECKSUM_KEY, None)
    return new if isinstance(item, dict) else Row(item.line, item.segment, item.offset, new)


def _reference(rows: list[Any]) -> list[Any]:
    out: list[Any] = []
    waiting: dict[str, int] = {}
    answered: set[str] = set()
    stray: dict[str, str] = {}  # req10: call id -> the other kind its newest call sat in
    for item in rows:
        row = item if isinstance(item, dict) else item.data
        kind = row.get("kind", "message")
        if kind not in PROVIDER_KINDS:
            continue
        if kind != "message":
            out.append(_reference_other_kind(item, row, kind))
            for p in row.get("parts") if isinstance(row.get("parts"), list) else []:
                if isinstance(p, dict) and p.get("type") == "tool_call":
                    stray[str(p.get("id"))] = kind
                    answered.discard(str(p.get("id")))
            continue
        parts = row.get("parts")
        if not parts:
            if (kind == "message" and row.get("role") == "assistant"
                    and not row.get("partial", False)):
                continue
            out.append(item)
            continue
        if not isinstance(parts, list):
            out.append(item)
            continue
        orphans: dict[int, bool | str] | None = None
        added: list[str] | None = None
        i = -1
        for p in parts:
            i += 1
            if not isinstance(p, dict):
                continue
            t = p.get("type")
            if t == "tool_result":
                pid = str(p.get("id"))
                if waiting.get(pid):
                    waiting[pid] -= 1
                    answered.add(pid)
                    stray.pop(pid, None)
                else:
                    if orphans is None:
                        orphans = {}
                    orphans[i] = (pid in answered if pid in answered or pid not in stray
                                  else f"its call sat in a {stray[pid]} row, not a message row")
            elif t == "tool_call":
                if added is None:
                    added = []
                added.append(str(p.get("id")))
        if orphans is not None:
            item = _reference_served(item, row, parts, orphans)
        if added is not None:
            for pid in added:
                waiting[pid] = waiting.get(pid, 0) + 1
        out.append(item)
    return out


IDS = st.sampled_from(["a", "b", "c", 7, None])
OUTPUT = st.one_of(
    st.text(max_size=8),
    st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=5)}),
             max_size=3),
    st.lists(st.one_of(st.integers(), st.fixed_dictionaries({"text": st.integers()})),
             max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.none(), st.integers(),
)
PART = st.one_of(
    st.builds(lambda i: {"type": "tool_call", "id": i, "name": "f", "input": {}}, IDS),
    st.builds(lambda i, o, e: {"type": "tool_result", "id": i, "output": o, "error": e},
              IDS, OUTPUT, st.sampled_from([False, True, None, "yes"])),
    st.builds(lambda t: {"type": "text", "text": t}, st.text(max_size=5)),
    st.sampled_from(["a string part", 3, None]),
)
ROW = st.builds(
    lambda kind, role, parts, partial, checksum: {
        "seq": 1, "kind": kind, "role": role, "parts": parts, "partial": partial,
        **({fmt.CHECKSUM_KEY: "0" * 16} if checksum else {})},
    st.sampled_from(["message", "message", "message", "lead_in", "warning", "reset", "fork"]),
    st.sampled_from(["tool", "tool", "assistant", "user", "system"]),
    st.one_of(st.lists(PART, max_size=4), st.just("not a list"), st.none()),
    st.booleans(), st.booleans(),
)


def _same(got: list[Any], want: list[Any]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert type(g) is type(w)
        if isinstance(w, Row):
            assert (g.line, g.segment, g.offset) == (w.line, w.segment, w.offset)
            assert g.data == w.data and list(g.data) == list(w.data)  # keys in order
        else:
            assert g == w and list(g) == list(w)


@given(st.lists(ROW, max_size=12))
def test_the_same_rows_as_the_definition_it_replaced(rows: list[dict[str, Any]]) -> None:
    for i, row in enumerate(rows):
        row["seq"] = i + 1
    as_rows = [Row(b"line %d" % i, 3, 10 * i, row) for i, row in enumerate(rows)]
    _same(provider_rows(as_rows), _reference(as_rows))
    _same(provider_rows(rows), _reference(rows))


@given(st.lists(ROW, max_size=12))
def test_rows_handed_over_are_served_alike_and_changed_only_where_served_as_text(
        rows: list[dict[str, Any]]) -> None:
    # owned=True (History.provider_view: rows read for that view alone) serves
    # the same rows as the copying path, changing in place only the rows it
    # serves as text: each such row is the one handed over, no copy.
    for i, row in enumerate(rows):
        row["seq"] = i + 1
    want = _reference([Row(b"line %d" % i, 3, 10 * i, row) for i, row in enumerate(rows)])
    handed = [Row(b"line %d" % i, 3, 10 * i, copy.deepcopy(row)) for i, row in enumerate(rows)]
    got = provider_rows(list(handed), owned=True)
    _same(got, want)
    for g in got:
        assert any(g is h for h in handed)
    dicts = copy.deepcopy(rows)
    got_dicts = provider_rows(list(dicts), owned=True)
    _same(got_dicts, _reference(rows))
    for g in got_dicts:
        assert any(g is d for d in dicts)


# Few ids and only tool parts: calls in lead-ins and warnings meet results
# naming them (the reason a result gives for its call's place, req10).
TOOL_ROW = st.builds(
    lambda kind, role, parts: {"seq": 1, "kind": kind, "role": role, "parts": parts},
    st.sampled_from(["message", "message", "lead_in", "warning"]),
    st.sampled_from(["tool", "assistant", "user"]),
    st.lists(st.one_of(
        st.builds(lambda i: {"type": "tool_call", "id": i, "name": "f", "input": {}},
                  st.sampled_from(["a", "b"])),
        st.builds(lambda i: {"type": "tool_result", "id": i, "output": "o"},
                  st.sampled_from(["a", "b"]))), min_size=1, max_size=3),
)


@given(st.lists(TOOL_ROW, max_size=10))
def test_the_same_rows_as_the_definition_where_calls_sit_in_other_kinds(
        rows: list[dict[str, Any]]) -> None:
    for i, row in enumerate(rows):
        row["seq"] = i + 1
    _same(provider_rows([dict(r) for r in rows]), _reference(rows))


def test_an_orphan_result_is_served_as_user_text_and_the_row_kept_is_untouched() -> None:
    # The bench window's shape: a tool row of one result whose call is in an
    # earlier window, then a call and its result, then the same id again.
    rows = [
        {"seq": 1, "kind": "message", "role": "tool", "_c": "0" * 16,
         "parts": [{"type": "tool_result", "id": "x", "output": "old", "error": True}]},
        {"seq": 2, "kind": "message", "role": "assistant",
         "parts": [{"type": "tool_call", "id": "x", "name": "f", "input": {}}]},
        {"seq": 3, "kind": "message", "role": "tool",
         "parts": [{"type": "tool_result", "id": "x", "output": [{"type": "text", "text": "a"},
                                                                {"type": "text", "text": "b"}]},
                   {"type": "tool_result", "id": "x", "output": {"k": 1}}]},
    ]
    got = provider_rows([Row(b"", 1, i, r) for i, r in enumerate(rows)])
    assert got[0].data == {"seq": 1, "kind": "message", "role": "user", "parts": [
        {"type": "text",
         "text": "[result of tool call x (error); its call is in an earlier context window]\nold"}]}
    assert rows[0]["role"] == "tool" and rows[0]["parts"][0]["type"] == "tool_result"
    assert got[1].data is rows[1]  # a row without orphans is served as it is stored
    assert got[2].data["role"] == "tool"  # its first result answers the call: still a tool row
    assert got[2].data["parts"] == [
        rows[2]["parts"][0],
        {"type": "text",
         "text": '[result of tool call x; it came after its call was settled]\n{"k":1}'}]


def test_tool_parts_in_a_lead_in_or_warning_are_text_and_pair_with_nothing() -> None:
    # Hostile or old bytes: a lead-in holding a call and a warning holding a
    # result for it and for a message's call. Only message rows pair.
    call = {"type": "tool_call", "id": "m", "name": "f", "input": {"q": [1, "x"]}}
    rows = [
        {"seq": 1, "kind": "message", "role": "assistant", "parts": [call]},
        {"seq": 2, "kind": "lead_in", "role": "system", "_c": "0" * 16, "parts": [
            {"type": "text", "text": "window 2"},
            {"type": "tool_call", "id": "w", "name": "g", "input": None}, 5]},
        {"seq": 3, "kind": "warning", "role": "tool", "parts": [
            {"type": "tool_result", "id": "w", "output": "ww", "error": True},
            {"type": "tool_result", "id": "m", "output": ["not text"]}]},
        {"seq": 4, "kind": "message", "role": "tool", "parts": [
            {"type": "tool_result", "id": "m", "output": "mm"}]},
        {"seq": 5, "kind": "warning", "role": "system", "parts": [{"type": "text", "text": "t"}]},
    ]
    got = provider_rows([Row(b"", 1, i, r) for i, r in enumerate(rows)])
    assert got[0].data is rows[0]
    assert got[1].data == {"seq": 2, "kind": "lead_in", "role": "system", "parts": [
        {"type": "text", "text": "window 2"},
        {"type": "text", "text": "[tool call w to g; it sat in a lead_in row, not a message row]"
                                 "\nnull"}, 5]}
    assert got[2].data == {"seq": 3, "kind": "warning", "role": "user", "parts": [
        {"type": "text",
         "text": "[result of tool call w (error); it sat in a warning row, not a message row]\nww"},
        {"type": "text",
         "text": '[result of tool call m; it sat in a warning row, not a message row]\n'
                 '["not text"]'}]}
    assert got[3].data is rows[3]  # the message's result answers the message's call
    assert got[4].data is rows[4]
    assert rows[2]["parts"][0]["type"] == "tool_result" and rows[1]["_c"]  # stored rows untouched


def test_a_result_whose_call_sat_in_a_lead_in_or_warning_says_so() -> None:
    """The call is in this window, in a row that is not a message: the
    result is an orphan (text), and its text says where the call is, not
    that it is in an earlier context window; ids no such row holds keep
    that reason. The newest call with the id decides: a result after its
    message call's own is late, after a warning's call again it says so."""
    rows = [
        {"seq": 1, "kind": "warning", "role": "assistant", "parts": [
            {"type": "tool_call", "id": "w", "name": "g", "input": {}}]},
        {"seq": 2, "kind": "lead_in", "role": "system", "parts": [
            {"type": "text", "text": "window 2"},
            {"type": "tool_call", "id": "l", "name": "g", "input": {}}]},
        {"seq": 3, "kind": "message", "role": "tool", "parts": [
            {"type": "tool_result", "id": "w", "output": "one"}]},
        {"seq": 4, "kind": "message", "role": "tool", "parts": [
            {"type": "tool_result", "id": "l", "output": "two", "error": True},
            {"type": "tool_result", "id": "gone", "output": "three"}]},
        {"seq": 5, "kind": "message", "role": "assistant", "parts": [
            {"type": "tool_call", "id": "w", "name": "g", "input": {}}]},
        {"seq": 6, "kind": "message", "role": "tool", "parts": [
            {"type": "tool_result", "id": "w", "output": "four"}]},
        {"seq": 7, "kind": "message", "role": "tool", "parts": [
            {"type": "tool_result", "id": "w", "output": "five"}]},
        {"seq": 8, "kind": "warning", "role": "assistant", "parts": [
            {"type": "tool_call", "id": "w", "name": "g", "input": {}}]},
        {"seq": 9, "kind": "message", "role": "tool", "parts": [
            {"type": "text", "text": "six:"}, {"type": "tool_result", "id": "w", "output": "6"}]},
    ]
    got = provider_rows([dict(r) for r in rows])
    texts = [[p.get("text") for p in r["parts"]] for r in got]
    assert texts[2] == [
        "[result of tool call w; its call sat in a warning row, not a message row]\none"]
    assert texts[3] == [
        "[result of tool call l (error); its call sat in a lead_in row, not a message row]"
        "\ntwo",
        "[result of tool call gone; its call is in an earlier context window]\nthree"]
    assert got[3]["role"] == "user" and got[2]["role"] == "user"
    assert got[5] == rows[5]  # the message's call answered: a result, as stored
    assert texts[6] == ["[result of tool call w; it came after its call was settled]\nfive"]
    assert texts[8] == [
        "six:", "[result of tool call w; its call sat in a warning row, not a message row]\n6"]


def test_the_view_serves_other_kinds_tool_parts_in_the_one_wording() -> None:
    """``other_kind_parts`` is the one wording of a lead-in's or warning's
    tool parts: the view serves exactly it (and the adapters send it for
    raw rows, tests/adapters/test_other_kinds.py)."""
    from ledger.core.windows import other_kind_parts

    call = {"type": "tool_call", "id": "c", "name": "bash", "input": {"cmd": "ls"}}
    res = {"type": "tool_result", "id": "r", "output": [{"type": "text", "text": "a"}],
           "error": True}
    for kind in ("lead_in", "warning"):
        row = {"kind": kind, "role": "assistant", "parts": [call, res]}
        assert provider_rows([row])[0]["parts"] == [*other_kind_parts(call, kind),
                                                     *other_kind_parts(res, kind)]
    assert [p["text"] for p in other_kind_parts(call, "warning")] == [
        '[tool call c to bash; it sat in a warning row, not a message row]\n{"cmd":"ls"}']
    assert [p["text"] for p in other_kind_parts(res, "lead_in")] == [
        "[result of tool call r (error); it sat in a lead_in row, not a message row]\na"]
