"""Token costs of JSON values as an API serialises them, and of media parts
(images by tile, PDFs by page, other media by allowance).
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from ledger.core.errors import TokenizerError
from ledger.tokens.units import (
    JSON_ESCAPE_TOKENS_PER_BYTE,
    JSON_PUNCT_TOKENS_PER_BYTE,
    MEDIA_OTHER_TOKENS,
    PDF_DEFAULT_PAGES,
    PDF_PAGE_TOKENS,
    Count,
    _len_utf8,
)

__all__ = [
    "MediaHook",
    "TextFn",
    "image_tokens",
    "json_cost",
    "media_info",
    "media_tokens",
]

# --------------------------------------------------------------------------- JSON

TextFn = Callable[[str], Count]
MediaHook = Callable[[Mapping[str, Any], tuple[Any, ...]], "int | None"]
"""Called on each object of a provider body with its path; returns a media
allowance for a genuine media node (its subtree is then not counted as text)."""


def _json_bytes(obj: Any) -> int:
    try:
        return len(msgspec.json.encode(obj))
    except (TypeError, ValueError, OverflowError) as exc:
        raise TokenizerError(f"cannot count a value outside the JSON domain: {exc}") from exc


_NEEDS_ESCAPE = re.compile(r'[\x00-\x1f"\\]')


def _escaped_len(text: str, raw: int) -> int:
    if _NEEDS_ESCAPE.search(text) is None:
        return raw
    return len(msgspec.json.encode(text)) - 2


def json_cost(obj: Any, text: TextFn, media: MediaHook | None = None) -> Count:
    """Strings (keys and values) encoded as text; the rest of the compact JSON
    charged by bytes: ``JSON_PUNCT_TOKENS_PER_BYTE`` per byte outside strings
    and ``JSON_ESCAPE_TOKENS_PER_BYTE`` per byte that escaping adds."""
    tokens = 0
    raw_bytes = 0
    escaped_bytes = 0
    media_bytes = 0
    stack: list[tuple[Any, tuple[Any, ...]]] = [(obj, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, str):
            tokens += text(node).tokens
            raw = _len_utf8(node)
            raw_bytes += raw
            escaped_bytes += _escaped_len(node, raw)
        elif isinstance(node, Mapping):
            if media is not None:
                allowance = media(node, path)
                if allowance is not None:
                    tokens += allowance
                    media_bytes += _json_bytes(node)
                    continue
            for key, value in node.items():
                if isinstance(key, str):
                    stack.append((key, path))
                stack.append((value, (*path, key) if media is not None else path))
        elif isinstance(node, (list, tuple)):
            if media is not None:
                stack.extend((v, (*path, i)) for i, v in enumerate(node))
            else:
                stack.extend((v, path) for v in node)
    structural = _json_bytes(obj) - escaped_bytes - media_bytes
    expansion = escaped_bytes - raw_bytes
    tokens += math.ceil(
        max(structural, 0) * JSON_PUNCT_TOKENS_PER_BYTE + expansion * JSON_ESCAPE_TOKENS_PER_BYTE
    )
    return Count(tokens, False)


# -------------------------------------------------------------------------- media

_PAGE = re.compile(rb"/Type\s*/Page(?![A-Za-z])")


def image_tokens(profile: str, width: int | None, height: int | None) -> int:
    """The image allowance of a media profile (``openai``, ``anthropic``,
    ``google`` or anything else = the largest of the three)."""
    known = width is not None and height is not None and width > 0 and height > 0
    if profile == "openai":
        if not known:
            return 1445
        assert width is not None and height is not None
        w, h = float(width), float(height)
        scale = min(1.0, 2048 / max(w, h))
        w, h = w * scale, h * scale
        scale = min(1.0, 768 / min(w, h))
        w, h = w * scale, h * scale
        return 85 + 170 * math.ceil(w / 512) * math.ceil(h / 512)
    if profile == "anthropic":
        if not known:
            return 1600
        assert width is not None and height is not None
        w, h = float(width), float(height)
        scale = min(1.0, 1568 / max(w, h), math.sqrt(1_150_000 / (w * h)))
        return min(1600, math.ceil(w * scale * h * scale / 750))
    if profile == "google":
        if not known:
            return 1548
        assert width is not None and height is not None
        small = width <= 384 and height <= 384
        tiles = 1 if small else math.ceil(width / 768) * math.ceil(height / 768)
        return max(1120, 258 * tiles)
    return max(image_tokens(p, width, height) for p in ("openai", "anthropic", "google"))


def _b64_prefix(data: str, want: int) -> bytes:
    if data.startswith("data:"):
        comma = data.find(",")
        data = data[comma + 1 :] if comma >= 0 else ""
    head = data[: -(-want // 3) * 4]
    try:
        return base64.b64decode(head + "=" * (-len(head) % 4))
    except (binascii.Error, ValueError):
        return b""


def _sniff_size(data: str) -> tuple[int | None, int | None]:
    head = _b64_prefix(data, 24)
    if head.startswith(b"\x89PNG\r\n\x1a\n") and len(head) >= 24:
        return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    if head[:6] in (b"GIF87a", b"GIF89a") and len(head) >= 10:
        return int.from_bytes(head[6:8], "little"), int.from_bytes(head[8:10], "little")
    return None, None


def _pdf_pages(data: str | None, pages: Any) -> int:
    if isinstance(pages, int) and not isinstance(pages, bool) and pages > 0:
        return pages
    if data:
        raw = _b64_prefix(data, len(data))
        found = len(_PAGE.findall(raw))
        if found:
            return found
    return PDF_DEFAULT_PAGES


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def media_tokens(
    profile: str,
    mime: str,
    *,
    data: str | None = None,
    width: int | None = None,
    height: int | None = None,
    pages: Any = None,
) -> int:
    """The allowance for one genuine media item."""
    mime = mime.lower()
    if mime.startswith("image/"):
        if (width is None or height is None) and data:
            width, height = _sniff_size(data)
        return image_tokens(profile, width, height)
    if mime == "application/pdf":
        return PDF_PAGE_TOKENS * _pdf_pages(data, pages)
    return MEDIA_OTHER_TOKENS


def _media_part(part: Mapping[str, Any]) -> dict[str, Any] | None:
    """``{"mime", "data", "width", "height", "pages"}`` of a canonical media part
    (``{"type": "media", "mime", "data" | "url", ...}``), else None."""
    if part.get("type") != "media":
        return None
    mime, data, url = part.get("mime"), part.get("data"), part.get("url")
    if not isinstance(data, str):
        if not isinstance(url, str):
            return None
        data = url if url.startswith("data:") else None  # inline data in a data URL
    if not isinstance(mime, str):
        mime = "application/octet-stream"
    return {
        "mime": mime,
        "data": data if isinstance(data, str) else None,
        "width": _int_or_none(part.get("width")),
        "height": _int_or_none(part.get("height")),
        "pages": part.get("pages"),
    }


def media_info(part: Mapping[str, Any]) -> dict[str, Any] | None:
    """The allowance inputs of a genuine canonical media part, else None."""
    return _media_part(part)
