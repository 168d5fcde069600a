"""A tool result that answers no call reads the same whatever path served it
(tidy3): the provider view (``History.provider_view``) and the adapters
given the window's raw rows both send ``[result of tool call ID (error);
WHY]`` and its output, from one place (``ledger.core.windows.
orphan_result_parts``), WHY being the view's: its call is in an earlier
window, its call had its result already, or its call sat in a warning. An
output of text and media keeps its media as media on both paths (the view
used to send the image's base64 inside the text)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ledger import Store
from ledger.adapters import to_request
from ledger.adapters.validate import problems
from tests.helpers import msg

APIS = ("openai-chat", "openai-responses", "anthropic")
PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQ"
       "AAAABJRU5ErkJggg==")
EARLIER = "its call is in an earlier context window"
LATE = "it came after its call was settled"
IN_WARNING = "its call sat in a warning row, not a message row"


def call(cid: str) -> dict[str, Any]:
    return {"kind": "message", "role": "assistant",
            "parts": [{"type": "tool_call", "id": cid, "name": "shot", "input": {}}]}


def result(cid: str, output: Any, error: bool = False) -> dict[str, Any]:
    return {"kind": "message", "role": "tool",
            "parts": [{"type": "tool_result", "id": cid, "output": output, "error": error}]}


def history(tmp_path: Path) -> Any:
    h = Store(str(tmp_path), durability="off").history("w")
    h.append_many([msg("take two shots"), call("old"), call("pic")])
    h.clear_soft()  # a manual clear may split them: the calls stay in the window before
    h.append(msg("go on"))
    h.append_many([
        result("old", "stale text", error=True),
        result("pic", [{"type": "text", "text": "here"},
                       {"type": "media", "mime": "image/png", "data": PNG}]),
        call("c2"), result("c2", "first"), result("c2", "second"),
        {"kind": "warning", "role": "assistant", "parts": [
            {"type": "tool_call", "id": "w1", "name": "bash", "input": {}}]},
        result("w1", "out"),
        msg("what now?"),
    ])
    return h


def flat(request: Any) -> str:
    return json.dumps(request, sort_keys=True)


@pytest.mark.parametrize("api", APIS)
def test_an_orphan_reads_the_same_through_the_view_and_raw_rows(
        tmp_path: Path, api: str) -> None:
    h = history(tmp_path)
    viewed = to_request(api, [r.to_dict() for r in h.provider_view()], model="m")
    raw = to_request(api, [r.to_dict() for r in h.window_rows()], model="m")
    assert problems(api, viewed) == [] and problems(api, raw) == []
    assert viewed == raw
    text = flat(viewed)
    for label in (f"[result of tool call old (error); {EARLIER}]\\nstale text",
                  f"[result of tool call pic; {EARLIER}]",
                  f"[result of tool call c2; {LATE}]\\nsecond",
                  f"[result of tool call w1; {IN_WARNING}]\\nout"):
        assert label in text, label
    # The image is sent once, as an image part, never inside a text.
    assert text.count(PNG) == 1
    assert not any(PNG in t for t in _texts(viewed))


def _texts(value: Any) -> list[str]:
    """Every string under a "text" key of the request."""
    if isinstance(value, dict):
        return [t for k, v in value.items()
                for t in ([v] if k == "text" and isinstance(v, str) else _texts(v))]
    if isinstance(value, list):
        return [t for v in value for t in _texts(v)]
    return []


def test_the_view_keeps_an_orphans_media_as_media(tmp_path: Path) -> None:
    rows = history(tmp_path).provider_view()
    pic = next(r for r in rows if any(
        p.get("type") == "text" and p["text"].startswith("[result of tool call pic")
        for p in r.data["parts"]))
    assert pic.data["role"] == "user"
    assert pic.data["parts"] == [
        {"type": "text", "text": f"[result of tool call pic; {EARLIER}]"},
        {"type": "text", "text": "here"},
        {"type": "media", "mime": "image/png", "data": PNG}]
