"""Transcript display for people: a pure function of row dicts.

:func:`layout` turns rows (``to_dict()`` of every row, oldest first) into
:class:`Block`\\ s; :func:`render_text` turns blocks into plain lines, and
:func:`render_rich` into renderables for a terminal (colour; the caller pages).

What a person sees, unlike the model:

- the whole history: every window, old ones included, each ``reset`` row shown
  as a separator naming the window it opens and why (cleared, rollover, compacted);
- lead-ins hidden (they are written for the model);
- warnings and truncation markers as machine messages, not as human prompts;
- integrations' bookkeeping records (empty assistant records with
  ``meta.bookkeeping = true``: LangGraph checkpoints, Claude Code entries that
  are not messages) hidden;
- rejected requests (empty assistant records with ``meta.quarantine = {"v": 1,
  "row": original}``) restored to the original row and marked *rejected*;
- reasoning dimmed (or left out), tool calls with their JSON input, tool results
  with their output (long ones cut to ``max_lines`` lines unless asked for all),
  media as a one-line description, unknown kinds and part types as JSON;
- control characters of stored text written out (``\x1b``), never sent to the
  terminal (:func:`ledger.core.terminal.visible`): every renderer below gets
  blocks that are safe to print.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ledger.core.terminal import visible

_CANONICAL_KEYS = frozenset(
    {"seq", "id", "kind", "role", "parts", "partial", "meta", "ts", "batch", "reset"}
)
_BOUNDARY_LABELS = {
    "manual": "cleared (/clear --soft)",
    "rollover": "rollover: new context window",
    "compaction": "compacted",
}


@dataclass(frozen=True)
class Line:
    """A line of a block's body; ``style`` is one of text, reasoning, call, result,
    error, media, note."""

    style: str
    text: str


@dataclass(frozen=True)
class Block:
    """One thing shown: ``kind`` is boundary, message, warning, truncation,
    rejected, empty or unknown; ``role`` the (original) row's role."""

    kind: str
    seq: int | None
    role: str
    title: str
    lines: list[Line] = field(default_factory=list)


def _when(ts: Any) -> str:
    if isinstance(ts, bool) or not isinstance(ts, int):
        return ""
    try:
        moment = datetime.fromtimestamp(ts / 1000, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return ""
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _json(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    if len(text) <= 100:
        return text
    return json.dumps(value, ensure_ascii=False, indent=2)


def _cut(text: str, style: str, max_lines: int | None) -> list[Line]:
    lines = text.split("\n")
    if max_lines is not None and len(lines) > max_lines:
        hidden = len(lines) - max_lines
        return [*(Line(style, t) for t in lines[:max_lines]),
                Line("note", f"… {hidden} more line{'s' * (hidden != 1)} (--full shows all)")]
    return [Line(style, t) for t in lines]


def _size(data: str) -> str:
    n = len(data) * 3 // 4
    if n < 1024:
        return f"{n} B"
    if n < 1 << 20:
        return f"{n / 1024:.0f} KB"
    return f"{n / (1 << 20):.1f} MB"


def _media(part: Mapping[str, Any]) -> str:
    bits = [str(part.get("mime", "?"))]
    if isinstance(part.get("width"), int) and isinstance(part.get("height"), int):
        bits.append(f"{part['width']}x{part['height']}")
    if isinstance(part.get("data"), str):
        bits.append(_size(part["data"]))
    elif isinstance(part.get("url"), str):
        bits.append(part["url"] if len(part["url"]) <= 120 else part["url"][:117] + "...")
    return "[media " + " ".join(bits) + "]"


def _part_lines(
    part: Any, *, reasoning: bool, max_lines: int | None
) -> list[Line]:
    if not isinstance(part, Mapping):
        return [Line("note", f"[part {_json(part)}]")]
    kind = part.get("type")
    if kind == "text":
        return _cut(str(part.get("text", "")), "text", None)
    if kind == "reasoning":
        if not reasoning:
            return []
        text = str(part.get("text", "")) or "(redacted)"
        return [Line("reasoning", "thinking: " + text.split("\n", 1)[0]),
                *_cut(text, "reasoning", None)[1:]]
    if kind == "tool_call":
        head = f"→ call {part.get('name')} ({part.get('id')})"
        return [Line("call", head), *_cut(_json(part.get("input")), "call", max_lines)]
    if kind == "tool_result":
        error = bool(part.get("error"))
        style = "error" if error else "result"
        head = f"← {'error from' if error else 'result of'} {part.get('id')}"
        output = part.get("output")
        if isinstance(output, list) and output and all(
            isinstance(p, Mapping) and p.get("type") in ("text", "media") for p in output
        ):
            body: list[Line] = []
            for p in output:
                body.extend(_cut(str(p.get("text", "")), style, max_lines)
                            if p.get("type") == "text" else [Line("media", _media(p))])
            return [Line(style, head), *body]
        text = output if isinstance(output, str) else _json(output)
        return [Line(style, head), *_cut(text, style, max_lines)]
    if kind == "media":
        return [Line("media", _media(part))]
    return [Line("note", f"[{kind} part] {_json(dict(part))}")]


def _body(row: Mapping[str, Any], *, reasoning: bool, max_lines: int | None) -> list[Line]:
    got = row.get("parts")
    parts: list[Any] = got if isinstance(got, list) else []
    out: list[Line] = []
    for part in parts:
        out.extend(_part_lines(part, reasoning=reasoning, max_lines=max_lines))
    return out


def _title(seq: Any, *words: str, ts: Any = None, partial: bool = False) -> str:
    bits = [f"#{seq}" if isinstance(seq, int) else "#?", *(w for w in words if w)]
    if partial:
        bits.append("(partial)")
    when = _when(ts)
    if when:
        bits.append("· " + when)
    return " ".join(bits)


def layout(
    rows: Iterable[Mapping[str, Any]], *, reasoning: bool = True, max_lines: int | None = 40
) -> Iterator[Block]:
    """Blocks for ``rows`` in order (see the module docstring). ``max_lines`` caps
    each tool call input and tool output (None: no cap). Titles and lines hold no
    control character (they are written out)."""
    for block in _layout(rows, reasoning=reasoning, max_lines=max_lines):
        yield Block(block.kind, block.seq, visible(block.role), visible(block.title),
                    [Line(line.style, visible(line.text)) for line in block.lines])


def _layout(
    rows: Iterable[Mapping[str, Any]], *, reasoning: bool, max_lines: int | None
) -> Iterator[Block]:
    first = True
    for row in rows:
        kind = row.get("kind", "message")
        seq = row.get("seq")
        role = str(row.get("role", "?"))
        ts = row.get("ts")
        got = row.get("meta")
        meta: Mapping[str, Any] = got if isinstance(got, Mapping) else {}
        if first and kind != "reset":
            yield Block("boundary", 0, "system", "window 0 · start")
        first = False
        if kind == "reset":
            got = row.get("reset")
            info: Mapping[str, Any] = got if isinstance(got, Mapping) else {}
            label = info.get("reason")
            reason = label if isinstance(label, str) and label in _BOUNDARY_LABELS else "manual"
            yield Block("boundary", seq if isinstance(seq, int) else None, "system",
                        f"window {seq} · {_BOUNDARY_LABELS[reason]}")
            continue
        if kind == "lead_in":
            continue
        options: dict[str, Any] = {"reasoning": reasoning, "max_lines": max_lines}
        if "quarantine" in meta:
            q = meta["quarantine"]
            original = q.get("row") if isinstance(q, Mapping) and q.get("v") == 1 else None
            if isinstance(original, Mapping):
                o_role = str(original.get("role", "?"))
                o_kind = original.get("kind", "message")
                what = f"{o_role} {o_kind}" if o_kind != "message" else o_role
                yield Block("rejected", seq, o_role,
                            _title(seq, what, "· REJECTED (not sent to the model)", ts=ts),
                            _body(original, **options))
            else:
                yield Block("rejected", seq, role,
                            _title(seq, "REJECTED request", ts=ts),
                            [Line("note", "[the original is in a format this version cannot "
                                          "read; it is kept in meta.quarantine]")])
            continue
        if kind == "warning":
            yield Block("warning", seq, role, _title(seq, "⚙ machine warning", f"[{role}]", ts=ts),
                        _body(row, **options))
            continue
        if kind == "truncation":
            yield Block("truncation", seq, role,
                        _title(seq, "⚙ truncation marker", f"[{role}]", ts=ts),
                        _body(row, **options))
            continue
        if kind != "message":
            extra = {k: v for k, v in row.items() if k not in _CANONICAL_KEYS}
            note = [Line("note", f"[other fields] {_json(extra)}")] if extra else []
            yield Block("unknown", seq, role, _title(seq, f"unknown kind {kind!r}", ts=ts),
                        [*_body(row, **options), *note])
            continue
        parts = row.get("parts")
        if role == "assistant" and not parts and not row.get("partial", False):
            if meta.get("bookkeeping") is True:
                continue  # an integration's record (a LangGraph checkpoint...), not conversation
            yield Block("empty", seq, role, _title(seq, "assistant (empty record)", ts=ts))
            continue
        yield Block("message", seq, role,
                    _title(seq, role, ts=ts, partial=bool(row.get("partial", False))),
                    _body(row, **options))


def render_text(blocks: Iterable[Block], *, width: int = 80) -> Iterator[str]:
    """Plain lines (no escape codes), for pipes and files."""
    for block in blocks:
        if block.kind == "boundary":
            label = f"──── {block.title} "
            yield label + "─" * max(4, width - len(label))
            continue
        yield block.title
        for line in block.lines:
            yield "    " + line.text if line.style == "reasoning" else "  " + line.text
        yield ""


def _fence(text: str) -> str:
    longest = run = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    return "`" * max(3, longest + 1)


def render_markdown(blocks: Iterable[Block], *, title: str | None = None) -> Iterator[str]:
    """Markdown lines: a heading per window, one per row; calls and results fenced."""
    if title:
        yield f"# {title}"
        yield ""
    for block in blocks:
        if block.kind == "boundary":
            yield f"## {block.title}"
            yield ""
            continue
        yield f"### {block.title}"
        yield ""
        groups: list[tuple[str, list[str]]] = []
        for line in block.lines:
            key = "fence" if line.style in ("call", "result", "error") else line.style
            if groups and groups[-1][0] == key and key != "fence":
                groups[-1][1].append(line.text)
            elif key == "fence" and groups and groups[-1][0] == "fence" and not (
                line.text.startswith(("→ call ", "← result of ", "← error from "))
            ):
                groups[-1][1].append(line.text)
            else:
                groups.append((key, [line.text]))
        for key, texts in groups:
            if key == "fence":
                head, rest = texts[0], texts[1:]
                yield f"**{head}**"
                yield ""
                if rest:
                    body = "\n".join(rest)
                    fence = _fence(body)
                    yield fence
                    yield body
                    yield fence
            elif key == "reasoning":
                yield from ("> " + t if t else ">" for t in texts)
            elif key in ("note", "media"):
                yield from (f"*{t}*" for t in texts)
            elif block.kind in ("warning", "truncation", "rejected"):
                yield from ("> " + t if t else ">" for t in texts)
            else:
                yield from texts
            yield ""


_STYLES = {
    "text": "",
    "reasoning": "dim italic",
    "call": "cyan",
    "result": "green",
    "error": "red",
    "media": "magenta",
    "note": "dim",
}
_TITLE_STYLES = {
    "user": "bold blue",
    "assistant": "bold green",
    "tool": "bold cyan",
    "system": "bold magenta",
}


def render_rich(blocks: Iterable[Block]) -> Iterator[Any]:
    """``rich`` renderables for a terminal (imports rich; only called for a TTY)."""
    from rich.markup import escape
    from rich.padding import Padding
    from rich.rule import Rule
    from rich.text import Text

    for block in blocks:
        if block.kind == "boundary":
            yield Rule(escape(block.title), style="yellow")
            continue
        if block.kind in ("warning", "truncation"):
            title_style = "bold yellow"
        elif block.kind in ("rejected", "empty"):
            title_style = "bold red"
        elif block.kind == "unknown":
            title_style = "bold"
        else:
            title_style = _TITLE_STYLES.get(block.role, "bold")
        yield Text(block.title, style=title_style)
        body = Text()
        for i, line in enumerate(block.lines):
            style = _STYLES.get(line.style, "")
            if block.kind == "rejected" and line.style == "text":
                style = "dim"
            elif block.kind in ("warning", "truncation") and line.style == "text":
                style = "yellow"
            body.append(("\n" if i else "") + line.text, style=style)
        if block.lines:
            yield Padding(body, (0, 0, 0, 2))
        yield Text("")
