"""Rows as the provider receives them: framing, JSON allowance, media versus
text, tool-output media wrappers, advertised tool schemas and the row cache."""

from __future__ import annotations

import base64
import json
import math
import random
import struct
import zlib
from pathlib import Path
from typing import Any

import msgspec
import pytest

from ledger.tokens.counting import (
    JSON_ESCAPE_TOKENS_PER_BYTE,
    JSON_PUNCT_TOKENS_PER_BYTE,
    MEDIA_OTHER_TOKENS,
    MESSAGE_FRAMING,
    PART_FRAMING,
    PART_FRAMING_OTHER,
    PDF_DEFAULT_PAGES,
    PDF_PAGE_TOKENS,
    TOOL_FRAMING,
    TOOLS_FRAMING,
    Count,
    InvalidTools,
    RenderedShape,
    RowTokenCache,
    TokenCounter,
    image_tokens,
    json_cost,
    text_counter,
)
from ledger.tokens.encodings import get_encoding

ENC = "o200k_base"


def n(text: str) -> int:
    return len(get_encoding(ENC).encode_ordinary(text))


def png(width: int, height: int) -> str:
    """A real (tiny-bodied) PNG of the given size, base64."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    body = struct.pack(">I", len(ihdr)) + chunk + struct.pack(">I", zlib.crc32(chunk))
    pixels = random.Random(width * 7919 + height).randbytes(3000)  # stands for the image data
    return base64.b64encode(b"\x89PNG\r\n\x1a\n" + body + pixels).decode()


def row(*parts: dict[str, Any], role: str = "user", kind: str = "message") -> dict[str, Any]:
    return {"kind": kind, "role": role, "parts": list(parts), "meta": {"big": "x" * 5000}}


def counter(model: str = "gpt-4o") -> TokenCounter:
    return TokenCounter(model, cache=None)


def expected_json(obj: Any) -> int:
    """The documented JSON arithmetic, recomputed independently."""
    strings: list[str] = []

    def walk(o: Any) -> None:
        if isinstance(o, str):
            strings.append(o)
        elif isinstance(o, dict):
            for k, v in o.items():
                strings.append(k)
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)

    walk(obj)
    escaped = sum(len(json.dumps(s, ensure_ascii=False).encode()) - 2 for s in strings)
    raw = sum(len(s.encode()) for s in strings)
    structural = len(json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()) - escaped
    return sum(n(s) for s in strings) + math.ceil(
        structural * JSON_PUNCT_TOKENS_PER_BYTE + (escaped - raw) * JSON_ESCAPE_TOKENS_PER_BYTE
    )


def test_text_row_arithmetic_and_meta_is_not_sent() -> None:
    text = "Please summarise the design record."
    got = counter().rows([row({"type": "text", "text": text})])
    assert got.tokens == MESSAGE_FRAMING + PART_FRAMING["text"] + n(text)
    assert not got.exact  # framing is an allowance
    assert got.encoding == ENC


def test_invisible_rows_count_zero() -> None:
    rows = [
        row(kind="reset", role="system"),
        {"kind": "a-future-kind", "role": "user", "parts": [{"type": "text", "text": "x" * 99}]},
    ]
    assert counter().rows(rows).tokens == 0


def test_tool_call_and_result_arithmetic() -> None:
    call_input = {"path": '/tmp/a "b".txt', "lines": [1, 20], "flags": {"all": True}}
    call = {"type": "tool_call", "id": "call_1", "name": "read_file", "input": call_input}
    result = {"type": "tool_result", "id": "call_1", "output": "line one\nline two", "error": False}
    got = counter().rows([row(call, role="assistant"), row(result, role="tool")])
    expected = (
        2 * MESSAGE_FRAMING
        + PART_FRAMING["tool_call"]
        + n("read_file")
        + n("call_1")
        + expected_json(call_input)
        + PART_FRAMING["tool_result"]
        + n("call_1")
        + n("line one\nline two")
    )
    assert got.tokens == expected
    structured = {"type": "tool_result", "id": "c", "output": {"rows": [1, 2], "ok": True}}
    got = counter().rows([row(structured, role="tool")])
    assert got.tokens == MESSAGE_FRAMING + PART_FRAMING["tool_result"] + n("c") + expected_json(
        {"rows": [1, 2], "ok": True}
    )


def test_json_allowance_is_conservative_on_real_transcripts(real_transcripts: Path) -> None:
    """Every JSON object and array of the real transcripts: the allowance is
    never below tiktoken's count of its compact or ``json.dumps`` form."""
    values: list[Any] = []
    for path in sorted(real_transcripts.rglob("*.jsonl")):
        for line in path.read_bytes().splitlines():
            stack = [msgspec.json.decode(line)]
            while stack:
                value = stack.pop()
                if isinstance(value, dict):
                    values.append(value)
                    stack.extend(value.values())
                elif isinstance(value, list) and value:
                    values.append(value)
                    stack.extend(value)
    assert len(values) > 10_000
    text = text_counter(ENC).count
    enc = get_encoding(ENC)
    ours_total = compact_total = 0
    for value in values[::3]:  # a third of them keeps the test fast
        ours = json_cost(value, text).tokens
        compact = len(enc.encode_ordinary(msgspec.json.encode(value).decode()))
        spaced = len(enc.encode_ordinary(json.dumps(value, ensure_ascii=False)))
        assert ours >= max(compact, spaced), json.dumps(value)[:200]
        ours_total += ours
        compact_total += compact
    assert ours_total < 1.3 * compact_total  # conservative, not absurd


def test_data_url_in_text_is_text_but_media_part_is_media() -> None:
    data = png(1024, 768)
    as_text = {"type": "text", "text": f"look: data:image/png;base64,{data}"}
    got_text = counter().rows([row(as_text)]).tokens
    assert got_text == MESSAGE_FRAMING + PART_FRAMING["text"] + n(as_text["text"])
    media = {"type": "media", "mime": "image/png", "data": data}
    got_media = counter().rows([row(media)]).tokens
    assert got_media == MESSAGE_FRAMING + PART_FRAMING["media"] + 765  # 2 x 2 tiles
    assert got_text > 1000 > got_media - MESSAGE_FRAMING
    sized = {
        "type": "media",
        "mime": "image/jpeg",
        "url": "https://x/y.jpg",
        "width": 4096,
        "height": 2048,
    }
    assert counter().rows([row(sized)]).tokens == MESSAGE_FRAMING + PART_FRAMING["media"] + 1105


def test_media_shaped_objects_in_ordinary_json_stay_text() -> None:
    block = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": png(64, 64)},
    }
    call = {"type": "tool_call", "id": "c", "name": "upload", "input": {"image": block}}
    got = counter().rows([row(call, role="assistant")]).tokens
    assert got == MESSAGE_FRAMING + PART_FRAMING["tool_call"] + n("upload") + n("c") + (
        expected_json({"image": block})
    )
    nested = {"type": "tool_result", "id": "c", "output": {"result": {"screenshot": block}}}
    got = counter().rows([row(nested, role="tool")]).tokens
    assert got == MESSAGE_FRAMING + PART_FRAMING["tool_result"] + n("c") + expected_json(
        nested["output"]
    )
    as_string = {"type": "tool_result", "id": "c", "output": json.dumps([block])}
    got = counter().rows([row(as_string, role="tool")]).tokens
    assert got == MESSAGE_FRAMING + PART_FRAMING["tool_result"] + n("c") + n(as_string["output"])


IMG = png(512, 512)  # one tile for OpenAI: 85 + 170 = 255
TEXT_PART = {"type": "text", "text": "Screenshot of the page"}


@pytest.mark.parametrize(
    "media",
    [
        {"type": "media", "mime": "image/png", "data": IMG},
        {"type": "media", "mime": "image/png", "url": f"data:image/png;base64,{IMG}"},
        {
            "type": "media",
            "mime": "image/png",
            "url": "https://x/y.png",
            "width": 300,
            "height": 400,
        },
    ],
)
def test_tool_output_media_wrapper(media: dict[str, Any]) -> None:
    """A list of canonical text and media parts: what the adapters send as media."""
    output = [TEXT_PART, media]
    got = counter().rows([row({"type": "tool_result", "id": "c", "output": output}, role="tool")])
    expected = (
        MESSAGE_FRAMING
        + PART_FRAMING["tool_result"]
        + n("c")
        + 2
        + PART_FRAMING["text"]
        + n(TEXT_PART["text"])
        + PART_FRAMING["media"]
        + 255
    )
    assert got.tokens == expected
    assert got.tokens < n(IMG)  # the base64 payload is never read as text


OTHER_SHAPES = {
    "ai-sdk part": [TEXT_PART, {"type": "media", "mediaType": "image/png", "data": IMG}],
    "mcp block": [{"type": "image", "mimeType": "image/png", "data": IMG}],
    "anthropic block": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": IMG}}
    ],
    "openai block": [{"type": "image_url", "image_url": {"url": f"data:image/png;base64,{IMG}"}}],
    "mcp result": {"content": [TEXT_PART, {"type": "media", "mime": "image/png", "data": IMG}]},
    "ai-sdk content": {
        "type": "content",
        "value": [{"type": "media", "mime": "image/png", "data": IMG}],
    },
    "single part": {"type": "media", "mime": "image/png", "data": IMG},
    "mixed list": [TEXT_PART, {"type": "media", "mime": "image/png", "data": IMG}, {"n": 1}],
    "media without mime": [{"type": "media", "data": IMG}],
}


@pytest.mark.parametrize("shape", sorted(OTHER_SHAPES))
def test_other_media_shaped_outputs_stay_json_text(shape: str) -> None:
    """The adapters send these as JSON text, so the provider reads the base64."""
    output = OTHER_SHAPES[shape]
    got = counter().rows([row({"type": "tool_result", "id": "c", "output": output}, role="tool")])
    assert got.tokens == MESSAGE_FRAMING + PART_FRAMING["tool_result"] + n("c") + expected_json(
        output
    )
    assert got.tokens > n(IMG)


def test_image_allowances() -> None:
    assert image_tokens("openai", 1024, 1024) == 765
    assert image_tokens("openai", 4096, 2048) == 1105
    assert image_tokens("openai", 100, 100) == 255
    assert image_tokens("openai", None, None) == 1445
    assert image_tokens("anthropic", 1000, 1000) == 1334
    assert image_tokens("anthropic", 8000, 8000) == 1534  # fitted to 1.15 MP
    assert image_tokens("anthropic", None, None) == 1600
    assert image_tokens("google", 300, 300) == 1120
    assert image_tokens("google", 3000, 3000) == 258 * 16
    assert image_tokens("acme", 1000, 1000) == max(
        image_tokens(p, 1000, 1000) for p in ("openai", "anthropic", "google")
    )
    claude = TokenCounter("claude-sonnet-4", cache=None)
    media = {"type": "media", "mime": "image/png", "data": png(1000, 1000)}
    raw = MESSAGE_FRAMING + PART_FRAMING["media"] + 1334
    assert claude.rows([row(media)]).tokens == math.ceil(raw * 1.35)


def test_pdf_and_other_media_allowances() -> None:
    pdf = base64.b64encode(
        b"%PDF-1.4 1 0 obj <</Type /Page>> 2 0 obj <</Type/Page>> 3 0 obj <</Type /Pages>>"
    ).decode()
    base = MESSAGE_FRAMING + PART_FRAMING["media"]
    cases = [
        ({"type": "media", "mime": "application/pdf", "data": pdf}, 2 * PDF_PAGE_TOKENS),
        ({"type": "media", "mime": "application/pdf", "url": "u", "pages": 3}, 3 * PDF_PAGE_TOKENS),
        (
            {"type": "media", "mime": "application/pdf", "url": "u"},
            PDF_DEFAULT_PAGES * PDF_PAGE_TOKENS,
        ),
        ({"type": "media", "mime": "audio/wav", "url": "u"}, MEDIA_OTHER_TOKENS),
    ]
    for part, allowance in cases:
        assert counter().rows([row(part)]).tokens == base + allowance


def test_unknown_parts_count_as_json() -> None:
    part = {"type": "citation", "source": "https://example.com", "span": [3, 9]}
    got = counter().rows([row(part)]).tokens
    assert got == MESSAGE_FRAMING + PART_FRAMING_OTHER + expected_json(part)


TOOLS = {
    "read_file": {
        "name": "read_file",
        "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
    "search": {"type": "function", "function": {"name": "search", "description": "Search."}},
    "huge": {"name": "huge", "description": "x " * 5000},
}


def test_only_advertised_schemas_count() -> None:
    c = counter()
    before = json.dumps(TOOLS)
    everything = c.tools(TOOLS).tokens
    advertised = c.tools(TOOLS, advertised=["read_file"]).tokens
    assert advertised == TOOLS_FRAMING + TOOL_FRAMING + expected_json(TOOLS["read_file"])
    assert everything == TOOLS_FRAMING + sum(
        TOOL_FRAMING + expected_json(t) for t in TOOLS.values()
    )
    assert everything > advertised + 5000
    assert c.tools(list(TOOLS.values()), advertised={"search"}).tokens == (
        TOOLS_FRAMING + TOOL_FRAMING + expected_json(TOOLS["search"])
    )
    assert c.tools(TOOLS, advertised=[]).tokens == 0
    assert json.dumps(TOOLS) == before  # the full tool map is untouched
    with pytest.raises(InvalidTools, match="nope"):
        c.tools(TOOLS, advertised=["read_file", "nope"])
    with pytest.raises(InvalidTools):
        c.tools([{"description": "no name"}])


def test_rebudgeting_costs_only_the_new_rows() -> None:
    cache = RowTokenCache()
    c = TokenCounter("gpt-4o", cache=cache)
    window = [row({"type": "text", "text": f"message number {i} " * 20}) for i in range(500)]
    cold = c.rows(window).tokens
    assert (cache.hits, cache.misses) == (0, 500)
    window.append(row({"type": "text", "text": "one more"}))
    warm = c.rows(window).tokens
    assert (cache.hits, cache.misses) == (500, 501)
    assert warm == cold + MESSAGE_FRAMING + PART_FRAMING["text"] + n("one more")
    assert warm == TokenCounter("gpt-4o", cache=None).rows(window).tokens
    # a different model does not reuse gpt-4o's entries
    TokenCounter("gpt-4", cache=cache).rows(window[:1])
    assert cache.misses == 502
    # seq, id, ts and meta are not part of the key: same content, same entry
    c.rows([{**window[0], "seq": 99, "meta": {}}])
    assert cache.misses == 502


def test_cache_is_bounded() -> None:
    cache = RowTokenCache(maxsize=3)
    c = TokenCounter("gpt-4o", cache=cache)
    for i in range(10):
        c.rows([row({"type": "text", "text": f"t{i}"})])
    assert len(cache) == 3


def test_rendered_shape_hook_counts_adapter_bodies() -> None:
    """An adapter renders a row to its provider's JSON and names the media
    nodes; the same JSON allowance applies and media are not read as text."""

    def render(r: dict[str, Any]) -> Any:
        out = []
        for p in r["parts"]:
            if p["type"] == "text":
                out.append({"type": "input_text", "text": p["text"]})
            else:
                out.append(
                    {"type": "input_image", "image_url": "data:image/png;base64," + p["data"]}
                )
        return {"role": r["role"], "content": out}

    def media(node: Any, path: tuple[Any, ...]) -> int | None:
        return 255 if path[:1] == ("content",) and node.get("type") == "input_image" else None

    shape = RenderedShape("test-adapter-1", render, media)
    r = row({"type": "text", "text": "see"}, {"type": "media", "mime": "image/png", "data": IMG})
    got = counter().rows([r], shape).tokens
    body = render(r)
    without_image = {"role": "user", "content": [body["content"][0]]}
    # the image node's bytes are not structural; only the comma before it is
    assert got == MESSAGE_FRAMING + 255 + expected_json(without_image) + 1
    assert got < n(IMG)


def test_approx_mode_rows() -> None:
    c = TokenCounter("gpt-4o", mode="approx", cache=None)
    got = c.rows([row({"type": "text", "text": "abcd" * 100})])
    assert got.tokens == MESSAGE_FRAMING + PART_FRAMING["text"] + 100
    assert not got.exact and got.mode == "approx"


def test_bad_rows_are_named() -> None:
    from ledger.core.errors import InvalidRow

    with pytest.raises(InvalidRow, match="row 1"):
        counter().rows([row(), {"kind": "message", "role": "user", "parts": "oops"}])
    with pytest.raises(InvalidRow, match="row 0"):
        counter().rows(["not a row"])  # type: ignore[list-item]
    assert json_cost({"a": 1}, lambda s: Count(1, True)).exact is False
