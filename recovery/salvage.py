"""Salvage of damaged JSONL: every readable record out, every unreadable byte aside.

Pure: bytes in, :class:`Salvage` out. Agent transcripts (Claude Code, Codex) are
JSONL written by processes that get killed, by editors, and by sync tools. The
damage users report, and what happens to it here:

- **Torn last line** (no newline, does not decode): quarantined, reason
  ``torn-tail``. A last line without a newline that decodes is a record.
- **Torn line with the next record glued on** (``…"prNu{"parentUuid"…``): the
  record that starts inside the damaged bytes is imported (counted as
  *salvaged*); the torn head is quarantined (``torn-record``). Two records glued
  without a newline (``{…}{…}``) are both imported.
- **Runs of NUL bytes** (a file extended by a crash): quarantined (``nul-run``,
  or ``nul-bytes`` when mixed with other bytes); records around them survive.
- **Raw U+2028 / U+2029**: valid inside JSON strings, so lines are split on
  ``\\n`` only (never ``str.splitlines``, which splits on them). A stray one
  outside a string (or inside an escape or a UTF-8 sequence) is taken out of the
  record, which is then imported as salvaged; its three bytes are quarantined
  (``stray-line-separator``).
- **Anything else unreadable** (invalid UTF-8, a truncated middle, JSON that is not
  an object, JSON nested deeper than the reader's stack -- ``nested-too-deeply``):
  quarantined with its reason; the next line is read as usual.

Every quarantine entry names the line of the input it was on (``line``, 1-based).

Guarantees: every byte of the input is in an imported record's span, a quarantine
entry, or is whitespace between records (``\\n``, ``\\r``, space, tab); spans and
entries do not overlap, except that a record salvaged by taking out stray
separators keeps its whole span while the separators' bytes are quarantined;
quarantine entries hold the input's bytes at their offsets, byte for byte; nothing
is invented -- a record is imported only when its bytes (minus stray separators)
decode as one JSON object, and a record found after unreadable bytes must pass the
format's ``looks_like_record`` check (so a nested object of a torn record is not
mistaken for a record; without a check it must reach the end of its line). Time is linear in
clean input; a damaged line costs at most one decode attempt per ``{"`` in it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import xxhash

_WS = b" \t\r"
_SEPARATORS = ("\u2028", "\u2029")
_decoder = json.JSONDecoder()


@dataclass(frozen=True)
class Record:
    """One readable JSON object: its first byte's offset, span length, line number."""

    offset: int
    length: int
    line: int
    value: dict[str, Any]
    salvaged: bool = False


@dataclass(frozen=True)
class Quarantined:
    """Unreadable bytes: where they were, why, the bytes themselves, and the
    (1-based) line of the source they were on."""

    offset: int
    length: int
    reason: str
    data: bytes
    line: int | None = None

    @property
    def digest(self) -> str:
        return xxhash.xxh3_128_hexdigest(self.data)

    def manifest(self, source: str) -> dict[str, Any]:
        """The manifest entry ``{source, offset, length, line, reason, digest}``."""
        return {"source": source, "offset": self.offset, "length": self.length,
                "line": self.line, "reason": self.reason, "digest": self.digest}


@dataclass
class Salvage:
    """The outcome of reading one file."""

    records: list[Record] = field(default_factory=list)
    quarantine: list[Quarantined] = field(default_factory=list)

    @property
    def salvaged(self) -> int:
        return sum(1 for r in self.records if r.salvaged)

    @property
    def quarantined_bytes(self) -> int:
        return sum(q.length for q in self.quarantine)


def _decode_object(data: bytes) -> dict[str, Any] | None:
    try:
        value = msgspec.json.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _reason(data: bytes, *, tail: bool, glued: bool) -> str:
    if data and data.strip(b"\x00") == b"":
        return "nul-run"
    if b"\x00" in data:
        return "nul-bytes"
    if tail:
        return "torn-tail"
    if glued:
        return "torn-record"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return "invalid-utf8"
    return "unreadable"


class _Line:
    """A damaged line, decoded losslessly so char positions map back to bytes."""

    def __init__(self, raw: bytes, base: int) -> None:
        self.raw = raw
        self.base = base
        self.text = raw.decode("utf-8", "surrogateescape")
        self._offsets: list[int] | None = None
        if len(self.text) != len(raw):
            offsets = [0]
            for ch in self.text:
                code = ord(ch)
                width = 1 if code < 0x80 or 0xDC80 <= code <= 0xDCFF else (
                    2 if code < 0x800 else 3 if code < 0x10000 else 4)
                offsets.append(offsets[-1] + width)
            self._offsets = offsets

    def byte(self, index: int) -> int:
        """Byte offset within the line of char ``index``."""
        return index if self._offsets is None else self._offsets[index]

    def object_at(self, index: int) -> int | None:
        """End char index of a JSON object starting exactly at ``index``, verified
        strictly (msgspec) on its bytes; None when there is none."""
        try:
            value, end = _decoder.raw_decode(self.text, index)
        except (ValueError, RecursionError):
            return None
        if not isinstance(value, dict):
            return None
        if _decode_object(self.raw[self.byte(index) : self.byte(end)]) is None:
            return None
        return end


def _strip_strays(text: str) -> tuple[str, list[int]] | None:
    """``text`` without the U+2028/U+2029 that cannot be JSON string content (outside
    strings, inside an escape, or between the bytes of a UTF-8 sequence), with the
    char indexes removed; None when there is none to remove."""
    removed: list[int] = []
    n = len(text)
    i = 0

    def take(count: int) -> str:
        nonlocal i
        got = ""
        while count > 0 and i < n:
            if text[i] in _SEPARATORS:
                removed.append(i)
            else:
                got = text[i]
                count -= 1
            i += 1
        return got

    in_string = False
    while i < n:
        ch = text[i]
        if ch in _SEPARATORS:
            torn_utf8 = (i > 0 and "\udc80" <= text[i - 1] <= "\udcff") or (
                i + 1 < n and "\udc80" <= text[i + 1] <= "\udcff"
            )
            if not in_string or torn_utf8:
                removed.append(i)
            i += 1
            continue
        i += 1
        if not in_string:
            in_string = ch == '"'
        elif ch == '"':
            in_string = False
        elif ch == "\\" and take(1) == "u":
            take(4)
    if not removed:
        return None
    keep = set(removed)
    return "".join(c for j, c in enumerate(text) if j not in keep), removed


class _Reader:
    def __init__(
        self, data: bytes, looks_like_record: Callable[[dict[str, Any]], bool] | None
    ) -> None:
        self.data = data
        self.anywhere = looks_like_record is not None
        self.looks_like_record = looks_like_record or (lambda _value: True)
        self.out = Salvage()
        self.number = 0  # the line being read

    def run(self) -> Salvage:
        pos = 0
        number = 0
        size = len(self.data)
        while pos < size:
            end = self.data.find(b"\n", pos)
            terminated = end != -1
            if not terminated:
                end = size
            number += 1
            self.number = number
            self._line(pos, end, number, tail=not terminated)
            pos = end + 1
        return self.out

    def _quarantine(self, start: int, stop: int, *, tail: bool = False, glued: bool = False,
                    reason: str | None = None) -> None:
        if stop <= start:
            return
        chunk = self.data[start:stop]
        why = reason or _reason(chunk, tail=tail, glued=glued)
        self.out.quarantine.append(Quarantined(start, stop - start, why, chunk, self.number))

    def _line(self, start: int, end: int, number: int, *, tail: bool) -> None:
        raw = self.data[start:end]
        body = raw.strip(_WS)
        if not body:
            return
        lead = len(raw) - len(raw.lstrip(_WS))
        first = start + lead
        try:
            value = msgspec.json.decode(body)
        except (msgspec.DecodeError, UnicodeDecodeError):
            value = None
        except RecursionError:  # valid JSON, but nested deeper than a reader's stack
            self._quarantine(first, first + len(body), reason="nested-too-deeply")
            return
        else:
            if not isinstance(value, dict):
                self._quarantine(first, first + len(body), reason="not-an-object")
                return
            self.out.records.append(Record(first, len(body), number, value))
            return
        if self._strays(body, first, number):
            return
        self._damaged(_Line(body, first), number, tail=tail)

    def _strays(self, body: bytes, first: int, number: int) -> bool:
        text = body.decode("utf-8", "surrogateescape")
        if "\u2028" not in text and "\u2029" not in text:
            return False
        stripped = _strip_strays(text)
        if stripped is None:
            return False
        clean, removed = stripped
        try:
            fixed = clean.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            return False
        value = _decode_object(fixed)
        if value is None:
            return False
        line = _Line(body, first)
        self.out.records.append(Record(first, len(body), number, value, salvaged=True))
        for index in removed:
            at = first + line.byte(index)
            self._quarantine(at, at + 3, reason="stray-line-separator")
        return True

    def _damaged(self, line: _Line, number: int, *, tail: bool) -> None:
        text = line.text
        n = len(text)
        i = 0
        while i < n:
            while i < n and text[i] in " \t\r":
                i += 1
            if i >= n:
                return
            end = line.object_at(i) if text[i] == "{" else None
            if end is not None:
                self.out.records.append(
                    Record(line.base + line.byte(i), line.byte(end) - line.byte(i), number,
                           self._value(line, i, end), salvaged=True)
                )
                i = end
                continue
            # Unreadable from i: garbage up to the first record that starts
            # inside it, or to the end of the line.
            q = text.find('{"', i + 1)
            while q != -1:
                stop = line.object_at(q)
                if stop is not None and (self.anywhere or not text[stop:].strip(" \t\r")):
                    value = self._value(line, q, stop)
                    if self.looks_like_record(value):
                        self._quarantine(line.base + line.byte(i), line.base + line.byte(q),
                                         glued=True)
                        self.out.records.append(
                            Record(line.base + line.byte(q), line.byte(stop) - line.byte(q),
                                   number, value, salvaged=True)
                        )
                        i = stop
                        break
                q = text.find('{"', q + 1)
            else:
                self._quarantine(line.base + line.byte(i), line.base + len(line.raw), tail=tail)
                return

    @staticmethod
    def _value(line: _Line, start: int, stop: int) -> dict[str, Any]:
        value = _decode_object(line.raw[line.byte(start) : line.byte(stop)])
        assert value is not None  # object_at verified these bytes
        return value


def salvage_jsonl(
    data: bytes, looks_like_record: Callable[[dict[str, Any]], bool] | None = None
) -> Salvage:
    """Read ``data`` as JSONL, salvaging what is readable (see the module docstring).

    ``looks_like_record`` decides whether an object found after unreadable bytes
    in a damaged line is a top-level record of the format; with it, such a record
    is salvaged wherever it ends. Without it, any object is accepted there, but
    only when it reaches the end of its line.
    """
    return _Reader(data, looks_like_record).run()
