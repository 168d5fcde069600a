"""Hostile ``type`` and ``kind`` values and row shapes reaching the counts.

A ``type`` that is no string, also one that cannot be hashed (``[]``,
``{}``), is a type the rules do not know, exactly like an unknown string
(``ledger.tokens.bodies``, ``ledger.tokens.rows``, ``ledger.tokens.shapes``);
an unhashable ``kind`` is an unknown kind, never sent (DESIGN.md 3). A row that
is no object, or whose ``parts`` is no list, is an :class:`InvalidRow` naming
its index. Nothing of it may surface as a plain ``TypeError`` or
``AttributeError``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger import Store
from ledger.adapters import ADAPTERS
from ledger.adapters.validate import VALIDATORS
from ledger.cli import main
from ledger.cli.core import stat_report
from ledger.core.errors import InvalidRow, LedgerError
from ledger.rollover.guards import check_request, request_bound, request_counter
from ledger.rollover.rules import ProviderRequest
from ledger.tokens.counting import TokenCounter
from ledger.tokens.rows import CANONICAL
from ledger.tokens.shapes import shape_for
from ledger.tokens.units import PART_FRAMING_OTHER, Count

MODELS = ("gpt-4o", "claude-sonnet-4-5")
SHAPES = (None, "openai-chat", "openai-responses", "anthropic", "canonical")
HOSTILE = ([], {}, ["image_url"], {"type": "text"})


def _user(*parts: Any) -> dict[str, Any]:
    return {"kind": "message", "role": "user", "parts": [{"type": "text", "text": "hi"}, *parts]}


def _tokens(rows: list[Any], model: str = "gpt-4o", api: str | None = None, **kw: Any) -> int:
    shape = None if api is None else shape_for(api=api)
    return check_request(model, rows=rows, cache=None, shape=shape, **kw).tokens


@pytest.mark.parametrize("value", HOSTILE)
@pytest.mark.parametrize("api", SHAPES)
def test_a_part_type_that_is_no_string_counts_as_an_unknown_type(value: Any,
                                                                 api: str | None) -> None:
    """``{"type": []}`` as a part is counted as ``{"type": "unknown"}`` is,
    by every shape: the adapters drop it, the canonical shape charges the
    part as JSON, the unknown part's framing and the part's own JSON."""
    part = {"type": value, "text": "x"}
    for model in MODELS:
        got = _tokens([_user(part)], model, api)
        if api == "canonical":
            counter = TokenCounter(model, cache=None)
            acct = counter.accountant()
            assert counter.raw_rows([_user(part)], CANONICAL) == (
                counter.raw_rows([_user()], CANONICAL) + Count(PART_FRAMING_OTHER, False)
                + acct.json(part))
        else:
            assert got == _tokens([_user({"type": "zz", "text": "x"})], model, api)


@pytest.mark.parametrize("value", HOSTILE)
@pytest.mark.parametrize("api", ["openai-chat", "openai-responses", "anthropic"])
def test_a_nested_type_that_is_no_string_is_walked_like_an_unknown_one(value: Any,
                                                                       api: str) -> None:
    """A part kept from an import is sent back as it was: a node inside it
    with an unhashable ``type`` is an unknown type (its text counted, never
    media) for OpenAI's body walk (``check_request``) and its bound alike;
    Anthropic's count charges it as JSON."""
    prefix = {"openai-chat": "openai-chat", "openai-responses": "openai-responses",
              "anthropic": "anthropic"}[api]

    def kept(kind: Any) -> dict[str, Any]:
        return {"type": f"{prefix}:input_text",
                "raw": {"type": "input_text", "text": "kept text",
                        "inner": {"type": kind, "text": "nested words here"}}}

    rows = [_user(kept(value))]
    twin = [_user(kept("zz"))]
    got = _tokens(rows, "gpt-4o", api)
    assert got > _tokens([_user()], "gpt-4o", api)
    if api != "anthropic":  # Anthropic's: the body as JSON, the value's own bytes
        assert got == _tokens(twin, "gpt-4o", api)
        request = ProviderRequest("gpt-4o", "sys", (), tuple(rows), "")
        bound, count = request_bound()(request), request_counter()(request)
        assert bound is not None and bound >= count[0]
        assert bound == request_bound()(ProviderRequest("gpt-4o", "sys", (), tuple(twin), ""))


def test_an_unhashable_kind_is_an_unknown_kind_never_sent() -> None:
    for model in MODELS:
        for api in SHAPES:
            unknown = _tokens([_user(), {**_user(), "kind": "zz"}], model, api)
            assert _tokens([_user(), {**_user(), "kind": []}], model, api) == unknown
    for adapter in ADAPTERS.values():
        assert adapter.to_request([{**_user(), "kind": {}}, _user()]) == adapter.to_request(
            [_user()])


@pytest.mark.parametrize("bad, said", [
    ("not a row", "row 1: a row must be an object, not str"),
    (7, "row 1: a row must be an object, not int"),
    ({"role": "user", "parts": 5}, "row 1: 'parts' must be a list, not int"),
    ({"role": "user", "parts": "text"}, "row 1: 'parts' must be a list, not str"),
    ({"role": "user", "parts": {"type": "text"}}, "row 1: 'parts' must be a list, not dict"),
])
def test_a_row_that_is_no_row_is_named(bad: Any, said: str) -> None:
    """Whatever the shape and whether a system message comes first, the
    index is the caller's."""
    for model in MODELS:
        for api in SHAPES:
            for system in ("", "be brief"):
                with pytest.raises(InvalidRow) as caught:
                    _tokens([_user(), bad], model, api, system=system)
                assert said in str(caught.value), (model, api, system)
    for adapter in ADAPTERS.values():
        with pytest.raises(InvalidRow, match=said):
            adapter.to_request([_user(), bad])


def test_stored_kept_parts_with_hostile_types_are_counted(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    """Rows the store accepts (a part kept from an import holds anything)
    reach the counts through the provider view: ``stat`` reports the
    window's tokens and ``count --rows`` counts the file, each as the twin
    with a string type."""
    def kept(kind: Any) -> dict[str, Any]:
        return {"type": "openai-chat:image_url",
                "raw": {"type": kind, "image_url": {"url": "https://e.com/a.png"},
                        "text": "words"}}

    tokens = []
    for name, kind in (("hostile", []), ("twin", "zz")):
        store = Store(str(tmp_path / name))
        h = store.history("ws")
        h.append_many([_user(kept(kind)), {"role": "assistant",
                                           "parts": [{"type": "text", "text": "ok"}]}])
        report = stat_report(h, "gpt-4o")
        assert "window_tokens_error" not in report
        tokens.append(report["window_tokens"]["tokens"])
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r.to_dict()) + "\n" for r in h.provider_view()))
        assert main(["count", "--rows", str(path)]) == 0
        tokens.append(json.loads(capsys.readouterr().out)["tokens"])
        assert main(["--root", str(tmp_path / name), "stat", "ws", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["window_tokens"]["tokens"] == tokens[-1]
    assert tokens[:2] == tokens[2:]


_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text(max_size=4),
                  st.sampled_from(["text", "media", "tool_call", "tool_result", "image_url",
                                   "input_image", "file", "input_audio", "function_call"]))
_VALUE = st.recursive(_LEAF, lambda inner: st.one_of(
    st.lists(inner, max_size=3),
    st.dictionaries(st.sampled_from(["type", "text", "id", "url", "data", "image_url",
                                     "content", "output"]), inner, max_size=3)),
    max_leaves=8)
_TYPE = st.one_of(st.sampled_from(["text", "reasoning", "tool_call", "tool_result", "media",
                                   "zz", "openai-chat:x", "openai-responses:x", "anthropic:x"]),
                  st.just([]), st.just({}), _VALUE)
_PART = st.fixed_dictionaries({"type": _TYPE}, optional={
    "text": _VALUE, "id": st.one_of(st.sampled_from(["c1", "c2"]), _VALUE),
    "name": _VALUE, "input": _VALUE, "error": _VALUE, "data": _VALUE, "url": _VALUE,
    "mime": st.one_of(st.sampled_from(["image/png", "audio/wav", "application/pdf"]), _VALUE),
    "output": st.one_of(_VALUE, st.lists(st.fixed_dictionaries(
        {"type": _TYPE}, optional={"text": _VALUE, "mime": st.just("image/png"),
                                   "data": st.just("AAAA")}), max_size=3)),
    "raw": st.one_of(_VALUE, st.fixed_dictionaries({"type": _TYPE}, optional={
        "text": _VALUE, "content": _VALUE, "image_url": _VALUE}))})
_ROW = st.fixed_dictionaries(
    {"role": st.one_of(st.sampled_from(["user", "assistant", "tool", "system"]), _VALUE),
     "parts": st.one_of(st.lists(st.one_of(_PART, _VALUE), max_size=4), _VALUE)},
    optional={"kind": st.one_of(st.sampled_from(["message", "lead_in", "warning", "reset"]),
                                _VALUE),
              "meta": _VALUE, "seq": st.integers(1, 9), "partial": _VALUE})


def test_hostile_part_shapes_raise_nothing_but_ledger_errors() -> None:
    """Random rows with hostile part types, kinds, parts and values, through
    every counting and rendering entry point: a count, or a LedgerError."""
    counter, bound = request_counter(cache=None), request_bound(cache=None)

    def entry_points(rows: list[Any]) -> list[Any]:
        calls: list[Any] = [
            lambda api=api, model=model: _tokens(rows, model, api)
            for model in MODELS for api in SHAPES]
        calls += [lambda: counter(ProviderRequest("gpt-4o", "sys", (), tuple(rows), "")),
                  lambda: bound(ProviderRequest("gpt-4o", "sys", (), tuple(rows), "")),
                  lambda: Store("memory://hostile").history("ws").append_many(rows)]
        calls += [lambda api=api: VALIDATORS[api](ADAPTERS[api].to_request(rows))
                  for api in ADAPTERS]
        return calls

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(_ROW, min_size=1, max_size=4))
    def check(rows: list[Any]) -> None:
        for call in entry_points(rows):
            try:
                call()
            except LedgerError:
                pass

    check()
