"""Rewrite primitives: reject, truncate_after, purge_before_floor, the marker."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ledger.core.format import files as ffmt
from ledger.core.format import rows as fmt
from ledger.storage.files import rewrite
from ledger.storage.files import segments as segs
from ledger.storage.files.retention import read_manifest
from ledger.transcript.store import Store
from recovery.check import check
from tests.helpers import msg
from tests.helpers.recovery import build, quarantined, seg_files


def _last_seg(ws: Path) -> Path:
    return Path(segs.segment_path(str(ws), segs.list_segments(str(ws))[-1]))


def _rows(h: Any) -> list[dict[str, Any]]:
    return [r.to_dict() for r in h.rows()]


# --- reject --------------------------------------------------------------------------


def test_reject_keeps_the_original_bytes_and_checks_clean(tmp_path: Path) -> None:
    """The husk's shape on every engine is in tests/contract/rewrites.py;
    here the file engine's part: the original line's body byte for byte in
    the husk, a clean check, and the second reject reported as ``already``."""
    h = Store(tmp_path, durability="off").history("ws")
    h.append(msg("hi"))
    r = h.append(msg("too big", meta={"skill": "x"}, future_field={"keep": [1, "é"]}))
    h.append(msg("reply", "assistant"))
    seq = r.seqs[0]
    original = h.get(seq)
    assert original is not None
    body = fmt.body_of(original.line)
    epoch = h.epoch
    out = rewrite.reject(h, seq)
    assert out.rejected == [seq]
    husk = h.get(seq)
    assert husk is not None
    d = husk.to_dict()
    assert body is not None and body in husk.line  # the original, byte for byte
    assert rewrite.rejected_original(d) == original.to_dict()
    assert h.epoch != epoch
    assert check(h).findings == []
    again = rewrite.reject(h, seq)
    assert again.rejected == [] and again.already == [seq]
    assert h.get(seq).to_dict() == d  # type: ignore[union-attr]


def test_reject_across_many_segments_finds_old_and_new_rows(tmp_path: Path) -> None:
    # reject reads only the segments whose index entry reaches the lowest seq it
    # names: rows in the first, a middle and the active segment are all found.
    h = Store(tmp_path, durability="off", segment_bytes=300).history("ws")
    for i in range(40):
        h.append(msg(f"row {i}"))
    assert len(seg_files(Path(h.engine.path))) >= 3
    out = rewrite.reject(h, [1, 40])
    assert out.rejected == [1, 40]
    assert rewrite.reject(h, 35).rejected == [35]
    assert [d["seq"] for d in _rows(h) if d["parts"] == []] == [1, 35, 40]
    with pytest.raises(Exception, match="41"):
        rewrite.reject(h, [39, 41])
    assert check(h).findings == []


def test_rewrites_keep_undecodable_lines_byte_for_byte(tmp_path: Path) -> None:
    h = Store(tmp_path, durability="off").history("ws")
    h.append(msg("a"))
    h.append(msg("b"))
    seg = _last_seg(Path(h.engine.path))
    junk = b'{"seq":3,"kind":"re\\u0073et" torn \xff\n'
    seg.write_bytes(seg.read_bytes() + junk)
    rewrite.reject(h, 2)
    assert seg.read_bytes().endswith(junk)
    out = rewrite.truncate_after(h, 1)
    assert out.kept_reset_candidates == 1
    data = seg.read_bytes()
    assert data.endswith(junk) and data.count(b"\n") == 2


# --- truncate ------------------------------------------------------------------------


def test_truncate_after_moves_the_tail_to_quarantine(tmp_path: Path) -> None:
    b = build(tmp_path / "s", segment_bytes=700)
    h = b.history
    rows = _rows(h)
    before = seg_files(b.path)
    high = h.snapshot().next_seq
    cut = rows[6]  # the manual clear: a truncation never removes the newest floor
    assert cut["kind"] == "reset" and cut["batch"]["i"] == cut["batch"]["n"] - 1
    out = rewrite.truncate_after(h, cut["seq"])
    assert [x["seq"] for x in _rows(h)] == [x["seq"] for x in rows[:7]]
    assert out.removed_rows == len(rows) - 7
    removed = b"".join(d for _, _, d in sorted(quarantined(b.path)))
    original_tail = b"".join(before.values())[len(b"".join(seg_files(b.path).values())):]
    assert sorted(removed) == sorted(original_tail)
    assert check(h).findings == []
    assert h.append(msg("new")).seqs == [high]


# --- purge ---------------------------------------------------------------------------


def test_purge_deletes_at_or_before_the_floor_without_quarantine(tmp_path: Path) -> None:
    """What purge leaves on every engine: tests/contract/rewrites.py. Here:
    nothing goes to the quarantine directory, and the result checks clean."""
    h = Store(tmp_path, durability="off", segment_bytes=600).history("ws")
    for i in range(4):
        h.append_many([msg(f"old {i}"), msg(f"old answer {i}", "assistant")])
    c = h.clear_soft()
    h.append(msg("new 1"))
    h.rollover([msg("trigger")])
    after = [x for x in _rows(h) if x["seq"] > c.seqs[0]]
    high = h.snapshot().next_seq
    out = rewrite.purge_before_floor(h)
    assert out.purged_rows == c.seqs[0] and out.floor is not None and out.floor.seq == c.seqs[0]
    assert _rows(h) == after
    assert not (Path(h.engine.path) / ffmt.QUARANTINE_DIR).exists()
    assert check(h).findings == []
    assert h.append(msg("x")).seqs == [high]
    assert rewrite.purge_before_floor(h).purged_rows == 0


def test_purge_keeps_reset_candidates_and_a_floor_inside_a_batch(tmp_path: Path) -> None:
    h = Store(tmp_path, durability="off").history("ws")
    h.append(msg("old"))
    seg = _last_seg(Path(h.engine.path))
    junk = b'{"kind":"reset", torn\n'
    seg.write_bytes(seg.read_bytes() + junk)
    h.append(msg("older but after junk"))
    # A rollover reset without its lead-in counts as manual: a floor in a batch of 2.
    r = h._append([{"kind": "reset", "role": "system", "parts": [],
                    "reset": {"reason": "rollover"}}, msg("same batch")], internal=True)
    h.append(msg("after"))
    out = rewrite.purge_before_floor(h)
    assert out.kept_reset_candidates == 1 and out.purged_rows == 2
    data = b"".join(seg_files(Path(h.engine.path)).values())
    assert data.startswith(junk)
    seqs = [x["seq"] for x in _rows_tolerant(Path(h.engine.path))]
    assert seqs == [*r.seqs, r.seqs[-1] + 1]


def test_purge_keeps_reset_candidates_in_segments_it_purges_whole(tmp_path: Path) -> None:
    # Segments before the floor's are read without asking each readable row whether
    # it is a reset; an unreadable line that may be one still stays byte for byte.
    h = Store(tmp_path, durability="off", segment_bytes=300).history("ws")
    h.append(msg("old"))
    first = _last_seg(Path(h.engine.path))
    junk = b'{"kind":"reset", torn\n'
    first.write_bytes(first.read_bytes() + junk)
    for i in range(6):
        h.append(msg(f"before the floor {i}"))
    h.clear_soft()
    h.append(msg("after"))
    assert len(seg_files(Path(h.engine.path))) >= 3
    out = rewrite.purge_before_floor(h)
    assert out.kept_reset_candidates == 1 and out.purged_rows == 8  # 7 rows and the reset
    assert junk in b"".join(seg_files(Path(h.engine.path)).values())
    assert [x["parts"][0]["text"] for x in _rows_tolerant(Path(h.engine.path))] == ["after"]


def _rows_tolerant(ws: Path) -> list[dict[str, Any]]:
    out = []
    for n in segs.list_segments(str(ws)):
        for line in segs.iter_lines(segs.segment_path(str(ws), n)):
            row = fmt.decode_line(line.data)
            if row is not None:
                out.append(row)
    return out


# --- the marker ----------------------------------------------------------------------


H1 = "a" * 64
H2 = "B" * 64


@pytest.mark.parametrize("doc,valid", [
    ({"finalArchiveHash": H1, "finalChatHash": None}, True),
    ({"finalArchiveHash": H1, "finalChatHash": H2,
      "rawHashes": {"version": 1, "finalArchiveHash": None, "finalChatHash": H1}}, True),
    ({"finalArchiveHash": H1, "finalChatHash": H2,
      "rawHashes": {"version": 2, "finalArchiveHash": H1, "finalChatHash": H1}}, False),
    ({"finalArchiveHash": H1, "finalChatHash": H2,
      "rawHashes": {"version": 1, "finalArchiveHash": "in-flight", "finalChatHash": H1}}, False),
    ({"finalArchiveHash": H1, "finalChatHash": H2,
      "rawHashes": {"version": 1, "finalArchiveHash": H1}}, False),
    ({"finalArchiveHash": H1, "finalChatHash": H2, "rawHashes": None}, False),
    ({"finalArchiveHash": "in-flight", "finalChatHash": "in-flight"}, False),
    ({"finalChatHash": H1}, False),
    ([H1, H2], False),
])
def test_marker_validity(doc: Any, valid: bool) -> None:
    m = rewrite.parse_marker(json.dumps(doc).encode())
    assert (m is not None) == valid
    if m is not None and "rawHashes" in doc:
        assert m.raw == (doc["rawHashes"]["finalArchiveHash"] and
                         doc["rawHashes"]["finalArchiveHash"].lower(),
                         doc["rawHashes"]["finalChatHash"].lower())


def _legacy(tmp: Path, archive: bytes | None, chat: bytes | None, tomb: bytes | None,
            marker: dict[str, Any] | bytes | None) -> tuple[str, list[tuple[str, str]], Any]:
    tmp.mkdir()
    a, c, t, m = (str(tmp / n) for n in ("chat-archive.jsonl", "chat.jsonl",
                                          "chat-archive.jsonl.truncate",
                                          "chat-archive.jsonl.truncate.json"))
    for path, data in ((a, archive), (c, chat), (t, tomb)):
        if data is not None:
            Path(path).write_bytes(data)
    if marker is not None:
        Path(m).write_bytes(marker if isinstance(marker, bytes) else json.dumps(marker).encode())
    tombs = [(t, a)] if tomb is not None else []
    return m, tombs, lambda mk: rewrite.marker_matches(mk, [a], [c])


def _final(archive: bytes | None, chat: bytes | None, *, raw: bool = True) -> dict[str, Any]:
    def d(f: Any, x: bytes | None) -> str | None:
        return None if x is None else f(x)

    doc: dict[str, Any] = {"finalArchiveHash": d(rewrite.text_digest, archive),
                           "finalChatHash": d(rewrite.text_digest, chat)}
    if raw:
        doc["rawHashes"] = {"version": 1, "finalArchiveHash": d(rewrite.raw_digest, archive),
                            "finalChatHash": d(rewrite.raw_digest, chat)}
    return doc


def test_legacy_resolution_table(tmp_path: Path) -> None:
    old, new, chat = b'{"id":"old"}\n', b'{"id":"new \xff"}\n', b'{"id":"chat"}\n'
    cases = [
        # (archive, tomb, marker) -> action, archive afterwards
        ((new, old, None), "settled-tombstones", new),
        ((None, old, None), "settled-tombstones", old),
        ((new, None, _final(new, chat)), "discarded-marker", new),
        ((new, old, _final(new, chat)), "committed", new),
        ((b'{"id":"half"}\n', old, _final(new, chat)), "rolled-back", old),
        ((new, old, _final(new, chat, raw=False)), "committed", new),
        ((new, old, {**_final(new, chat), "rawHashes": {"version": 1}}), "rolled-back", old),
        ((None, old, _final(None, chat)), "committed", None),
        ((new, old, b"{not json"), "rolled-back", old),
    ]
    for k, ((archive, tomb, marker), action, expect) in enumerate(cases):
        d = tmp_path / f"c{k}"
        m, tombs, match = _legacy(d, archive, chat, tomb, marker)
        res = rewrite.decide(m, tombs, match)
        assert res is not None and res.action == action, (k, res)
        rewrite.apply(res, m, tombs, str(d), durability="off")
        a = d / "chat-archive.jsonl"
        assert (a.read_bytes() if a.exists() else None) == expect, k
        assert not (d / "chat-archive.jsonl.truncate").exists()
        assert not (d / "chat-archive.jsonl.truncate.json").exists()
        assert (d / "chat.jsonl").read_bytes() == chat


def test_raw_digests_tell_invalid_utf8_rewrites_apart(tmp_path: Path) -> None:
    a1, a2 = b"row \xff\n", b"row \xfe\n"
    assert rewrite.text_digest(a1) == rewrite.text_digest(a2)  # decoding blurs them
    m, tombs, match = _legacy(tmp_path / "x", a2, b"", b"old\n", _final(a1, b""))
    res = rewrite.decide(m, tombs, match)
    assert res is not None and res.action == "rolled-back"


def test_native_marker_shape(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    b = build(tmp_path / "s", segment_bytes=700)
    seen: dict[str, Any] = {}

    def spy(step: str) -> None:
        if step == "marker":
            seen["doc"] = json.loads((b.path / rewrite.MARKER_NAME).read_bytes())
            seen["tombs"] = sorted(p.name for p in b.path.glob("*.truncate"))

    monkeypatch.setattr(rewrite, "FAULT_HOOK", spy)
    rows = _rows(b.history)
    rewrite.truncate_after(b.history, rows[6]["seq"])
    doc = seen["doc"]
    assert set(doc) >= {"finalArchiveHash", "finalChatHash", "rawHashes", "files"}
    assert doc["rawHashes"]["version"] == 1
    m = rewrite.parse_marker(json.dumps(doc).encode())
    assert m is not None and m.raw is not None
    final = doc["files"]["final"]
    assert seen["tombs"] == sorted(f"{n}.truncate" for n in final)
    for name, digest in final.items():
        path = b.path / name
        assert (rewrite.raw_digest(path.read_bytes()) if path.exists() else None) == digest
    assert not list(b.path.glob("*.truncate")) and not (b.path / rewrite.MARKER_NAME).exists()
    assert [e.source for e in read_manifest(str(b.path))]
