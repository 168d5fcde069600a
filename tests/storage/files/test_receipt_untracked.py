"""Untracked edits (writers that bypass the lock and the protocol).

Each one must show at once (``snapshot().verified`` False), the next tracked
append must re-baseline (new epoch, verified again, high-water mark kept),
and reset candidates written behind the store's back must become the privacy
floor wherever they land.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from ledger import Store
from ledger.cli.core import stat_report
from ledger.core.format import files as ffmt
from ledger.core.format import rows as fmt
from ledger.storage.files import watch
from tests.helpers import dicts, msg, segment_files


@pytest.fixture(autouse=True, params=["stat-every-segment", "segment-table"])
def segment_table(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every edit here must show on both paths: a stat of every segment, and
    the table kept by kernel events that big histories use (watch.py)."""
    if request.param == "segment-table":
        if not watch.available():
            pytest.skip("no inotify on this system")
        monkeypatch.setattr(watch, "WATCH_MIN_SEGMENTS", 1)


def _history(root: Path):
    h = Store(root, durability="off", segment_bytes=300).history("ws")
    for k in range(14):
        h.append_many([msg(f"row {k}.{i} " + "z" * (k * 11 % 60)) for i in range(1 + k % 2)])
    assert len(segment_files(root / "ws")) >= 4
    assert h.snapshot().verified
    return h


def _bump_mtime(p: Path) -> None:
    st = p.stat()
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def append_garbage(p: Path) -> None:
    with open(p, "ab") as f:
        f.write(b'{"x": 1}\n')


def append_valid_line(p: Path) -> None:
    first = p.read_bytes().split(b"\n")[0] + b"\n"
    with open(p, "ab") as f:
        f.write(first)


def truncate_torn(p: Path) -> None:
    with open(p, "r+b") as f:
        f.truncate(p.stat().st_size - 7)


def truncate_at_line(p: Path) -> None:
    data = p.read_bytes()
    cut = data.rstrip(b"\n").rfind(b"\n") + 1
    if cut == 0:  # a one-line segment: drop its last byte instead
        cut = len(data) - 1
    with open(p, "r+b") as f:
        f.truncate(cut)


def rewrite_same_bytes(p: Path) -> None:
    data = p.read_bytes()
    with open(p, "r+b") as f:
        f.write(data)
    _bump_mtime(p)


def touch_mtime(p: Path) -> None:
    _bump_mtime(p)


def rewrite_other_size(p: Path) -> None:
    data = p.read_bytes()
    with open(p, "wb") as f:  # same inode, new content
        f.write(data + data.split(b"\n")[0] + b"\n")


def flip_a_byte_same_size(p: Path) -> None:
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0x01
    with open(p, "r+b") as f:
        f.write(bytes(data))
    # so it is not a same-size rewrite inside one tick (docs/explanation/storage.md)
    _bump_mtime(p)


def replace_with_copy(p: Path) -> None:
    tmp = p.with_name("copy.tmp")
    shutil.copy2(p, tmp)  # same bytes and mtime, another inode
    os.replace(tmp, p)


def delete(p: Path) -> None:
    p.unlink()


EDITS: dict[str, Callable[[Path], None]] = {
    f.__name__: f
    for f in (append_garbage, append_valid_line, truncate_torn, truncate_at_line,
              rewrite_same_bytes, touch_mtime, rewrite_other_size, flip_a_byte_same_size,
              replace_with_copy, delete)
}


def _check_rebaseline(h, epoch: int, next_seq: int) -> None:
    assert not h.snapshot().verified, "the untracked edit went unseen"
    r = h.append_many([msg("tracked"), msg("again", role="assistant")])
    assert r.epoch != epoch, "re-baselined append kept the old epoch"
    assert r.seqs[0] >= next_seq, f"high-water mark went back: {r.seqs} < {next_seq}"
    snap = h.snapshot()
    assert snap.verified and snap.epoch == r.epoch == h.epoch
    r2 = h.append(msg("verified append"))
    assert r2.epoch == r.epoch and r2.seqs == [r.seqs[-1] + 1]


@pytest.mark.parametrize("target", ["active", "oldest-sealed", "middle-sealed"])
@pytest.mark.parametrize("edit", sorted(EDITS))
def test_untracked_edit_is_seen_and_rebaselined(store_root: Path, edit: str, target: str) -> None:
    h = _history(store_root)
    segs = segment_files(store_root / "ws")
    path = {"active": segs[-1], "oldest-sealed": segs[0], "middle-sealed": segs[len(segs) // 2]}[
        target]
    snap = h.snapshot()
    EDITS[edit](path)
    _check_rebaseline(h, snap.epoch, snap.next_seq)


@pytest.mark.parametrize("content", [b"", b"not json\n", None], ids=["empty", "garbage", "copy"])
def test_untracked_added_segment(store_root: Path, content: bytes | None) -> None:
    h = _history(store_root)
    segs = segment_files(store_root / "ws")
    snap = h.snapshot()
    new = segs[-1].with_name(ffmt.segment_name(ffmt.segment_number(segs[-1].name) + 1))
    new.write_bytes(segs[0].read_bytes() if content is None else content)
    _check_rebaseline(h, snap.epoch, snap.next_seq)


def test_untracked_segment_in_a_numbering_gap(store_root: Path) -> None:
    h = _history(store_root)
    snap = h.snapshot()
    segs = segment_files(store_root / "ws")
    # Renumber the active segment upwards, leaving a gap where a segment "appears".
    last = ffmt.segment_number(segs[-1].name)
    os.rename(segs[-1], segs[-1].with_name(ffmt.segment_name(last + 2)))
    _check_rebaseline(h, snap.epoch, snap.next_seq)


CANDIDATES = {
    "torn-json": b'{"kind":"reset","x":\n',
    "torn-tail-no-newline": b'{"kind":"reset","x":',
    "u-escapes": b'{"\\u006bind":"\\u0072\\u0065set"}\n',
    "control-chars": b'{ "ki\x00nd" :\t"re\x1fset" }\n',
    "legacy-key": b'{"contextBoundaryKind":"reset"}\n',
    "unframed-valid-json": b'{"seq":3,"kind":"reset","role":"system","parts":[]}\n',
    "after-comma": b'{"role":"system",\n "kind" : "reset"}\n',
}


@pytest.mark.parametrize("name", sorted(CANDIDATES))
def test_reset_candidate_in_the_oldest_sealed_segment_is_the_floor(
    store_root: Path, name: str
) -> None:
    h = _history(store_root)
    oldest = segment_files(store_root / "ws")[0]
    offset = oldest.stat().st_size
    with open(oldest, "ab") as f:
        f.write(CANDIDATES[name])
    if name == "after-comma":
        offset += len(b'{"role":"system",\n')  # the candidate is the second line
    for when in ("immediately", "after the next tracked append"):
        snap = h.snapshot()
        floor = snap.floor
        assert floor is not None, f"{when}: no privacy floor for the candidate"
        assert (floor.segment, floor.offset) == (1, offset), f"{when}: floor at {floor}"
        assert floor.seq == ffmt.FLOOR_UNREADABLE and not floor.readable
        assert stat_report(h)["floor"] == {"seq": None, "segment": oldest.name, "offset": offset,
                                           "damaged": False}
        if when == "immediately":
            assert not snap.verified
            h.append(msg("tracked"))
            assert h.snapshot().verified


def test_duplicate_kind_reset_line_is_the_floor(store_root: Path) -> None:
    """A framed, checksum-valid line whose first ``kind`` is reset and whose
    duplicate key says message (a last-wins decoder sees a message)."""
    h = _history(store_root)
    oldest = segment_files(store_root / "ws")[0]
    offset = oldest.stat().st_size
    body = (b'{"seq":2,"id":"dup","kind":"reset","role":"system","parts":[],"partial":false,'
            b'"meta":{},"ts":1,"batch":{"id":"dup","n":1,"i":0},"kind":"message"}')
    with open(oldest, "ab") as f:
        f.write(fmt.frame(body))
    floor = h.snapshot().floor
    assert floor is not None and (floor.segment, floor.offset) == (1, offset)


def test_newest_floor_wins_over_an_older_candidate(store_root: Path) -> None:
    h = _history(store_root)
    cleared = h.clear_soft()
    h.append(msg("after clear"))
    oldest = segment_files(store_root / "ws")[0]
    with open(oldest, "ab") as f:
        f.write(CANDIDATES["torn-json"])
    floor = h.snapshot().floor
    assert floor is not None and floor.seq == cleared.seqs[0]


def test_mentions_of_the_marker_in_readable_rows_are_not_floors(store_root: Path) -> None:
    h = Store(store_root, durability="off", segment_bytes=300).history("ws")
    h.append_many([
        msg('{"kind":"reset"}'),
        msg('x,"kind":"reset" and "contextBoundaryKind": "reset"'),
        msg("m", meta={"kind": "reset", "nested": {"kind": "reset"}}),
        {"role": "user", "parts": [{"type": "note", "kind": "reset"}]},
        msg("u", extra={"kind": "reset"}),
    ])
    h.append(msg("tail"))
    for seg in segment_files(store_root / "ws"):
        _bump_mtime(seg)  # force a full re-derivation from the log
    snap = h.snapshot()
    assert not snap.verified
    assert snap.floor is None and snap.window_seq == 0
    assert [d["seq"] for d in dicts(h)] == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("where", ["active", "newest-sealed"])
def test_newer_candidate_beats_the_receipts_floor(store_root: Path, where: str) -> None:
    h = _history(store_root)
    h.clear_soft()
    for k in range(6):
        h.append(msg(f"after clear {k} " + "q" * 40))
    segs = segment_files(store_root / "ws")
    receipt_floor = h.snapshot().floor
    target = segs[-1] if where == "active" else segs[-2]
    assert ffmt.segment_number(target.name) > receipt_floor.segment
    offset = target.stat().st_size
    with open(target, "ab") as f:
        f.write(CANDIDATES["u-escapes"])
    floor = h.snapshot().floor
    assert (floor.segment, floor.offset) == (ffmt.segment_number(target.name), offset)
    h.append(msg("tracked"))
    floor = h.snapshot().floor
    assert (floor.segment, floor.offset) == (ffmt.segment_number(target.name), offset)


def test_directory_named_like_a_segment_is_a_ledger_error(store_root: Path) -> None:
    """Every error the library raises is a LedgerError (ledger/core/errors.py): a
    directory where a segment should be is damage, not a raw OSError."""
    from ledger import LedgerError

    h = _history(store_root)
    last = segment_files(store_root / "ws")[-1]
    (last.with_name(ffmt.segment_name(ffmt.segment_number(last.name) + 1))).mkdir()
    for what, call in [("snapshot", h.snapshot), ("rows", lambda: list(h.rows())),
                       ("provider_view", h.provider_view),
                       ("append", lambda: h.append(msg("x")))]:
        try:
            call()
        except LedgerError:
            pass
        except OSError as exc:
            pytest.fail(f"{what}: raw {type(exc).__name__} ({exc}) instead of a LedgerError")
