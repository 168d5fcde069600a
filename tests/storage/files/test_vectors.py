"""The file engine's vectors of the semantic channel (``RECALL.vectors``,
``ledger.storage.files.vectors``), hardened like the recall index: any byte
changed or the file cut answers exactly as a fresh projection; a stale or
forged one (records of rows before the floor with valid checksums, a header
claiming the current state) never lets a row at or before the floor out;
``check`` reports damage, staleness and disagreement with the log as notices
(a link in its place as damage); ``repair`` removes it; rewrites delete it
before they touch a segment.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from ledger import Store
from ledger.core import semantic
from ledger.core.format import files as ffmt
from ledger.storage import vectors
from ledger.storage.files import vectors as fvec
from recovery.check import check
from recovery.repair import repair
from tests.helpers import msg

pytest.importorskip("wordllama")  # the semantic extra (.ci/run installs it)

ROWS = ["the database migration failed on postgres", "we adopted a kitten named whiskers",
        "deploy to the kubernetes cluster tomorrow", "my favourite fruit is mango",
        "the violin quartet rehearses on fridays", "our tabby cat sleeps on the sofa"]
QUERIES = ("pet cat", "tropical fruit", "postgres migration", "music rehearsal")
_EMB: dict[int, Any] = {}


def embedder(dim: int = 64) -> Any:
    from ledger.core.embedders import WordLlamaEmbedder

    return _EMB.setdefault(dim, WordLlamaEmbedder(dim))


def history(root: Path, dim: int = 64) -> Any:
    return Store(str(root), durability="off", embedder=embedder(dim)).history("w")


def answers(h: Any) -> list[str]:
    tool = h.session_history()
    return [tool.call({"action": "search", "query": q, "mode": "ranked", "current": True,
                       "limit": 25}) for q in QUERIES]


def path(h: Any) -> Path:
    return Path(h.engine.path) / ffmt.VECTORS_NAME


def filled(root: Path) -> tuple[Any, list[str]]:
    h = history(root)
    h.append_many([msg(t) for t in ROWS])
    return h, answers(h)


def codes(h: Any) -> set[str]:
    return {f.code for f in check(h).findings}


def test_any_byte_changed_or_cut_answers_as_a_fresh_projection(tmp_path: Path) -> None:
    h, fresh = filled(tmp_path / "a")
    data = path(h).read_bytes()
    size = vectors.record_size(64)
    assert len(data) > 6 * size
    header = data.index(b"\n") + 1
    spots = sorted({0, 5, header - 2, header, header + 3, header + 40, header + size - 1,
                    len(data) - 1, len(data) // 2})
    for at in spots:
        flipped = bytearray(data)
        flipped[at] ^= 0x41
        path(h).write_bytes(bytes(flipped))
        fresh_h = history(tmp_path / "a")  # a new process's view: nothing cached
        assert answers(fresh_h) == fresh, at
    for cut in (1, header - 1, header + size // 2, len(data) - 3):
        path(h).write_bytes(data[:cut])
        assert answers(history(tmp_path / "a")) == fresh, cut
    # a torn last record is cut off and the rest kept
    path(h).write_bytes(data[: len(data) - size // 2])
    assert answers(history(tmp_path / "a")) == fresh
    assert len(path(h).read_bytes()) == len(data)  # caught up again


def test_check_reports_damage_and_staleness_repair_removes_it(tmp_path: Path) -> None:
    h, fresh = filled(tmp_path)
    assert not [c for c in codes(h) if "vectors" in c]
    data = path(h).read_bytes()
    broken = bytearray(data)
    broken[-5] ^= 1
    path(h).write_bytes(bytes(broken))
    report = check(h)
    assert {f.code for f in report.findings} == {"recall_vectors_damaged"} and report.ok
    repair(h)
    assert not path(h).exists() and check(h).ok and not check(h).findings
    assert answers(h) == fresh and path(h).exists()
    # stale: the file of an older epoch put back after a rewrite
    old = path(h).read_bytes()
    h.append(msg("a later row about dogs"))
    h.reject(7)
    assert not path(h).exists()  # the rewrite deleted it first
    path(h).write_bytes(old)
    assert "recall_vectors_stale" in codes(h)
    assert answers(h) == answers(history(tmp_path, 64))  # rebuilt for the new epoch
    assert not [c for c in codes(h) if "vectors" in c]


def test_a_forged_set_never_lets_a_row_before_the_floor_out(tmp_path: Path) -> None:
    """Records of rows before the floor, with valid checksums, in a file whose
    header claims the current epoch and floor: still nothing at or before the
    floor is returned, and check says the vectors disagree with the log."""
    h = history(tmp_path)
    h.append_many([msg("our kitten chases a laser pointer"), msg("cats sleep all day")])
    tool = h.session_history()
    call = {"action": "search", "query": "pet cat", "mode": "ranked", "current": True,
            "limit": 25}
    assert [i["seq"] for i in json.loads(tool.call(call))["items"]][:2] in ([1, 2], [2, 1])
    before = fvec.read_set(h.engine.path)[0]
    floor = h.clear_soft().seqs[0]
    h.append(msg("the release notes mention the new api"))
    json.loads(tool.call(call))  # vectors for the new state
    now = fvec.read_set(h.engine.path)[0]
    held = vectors.VectorSet(now.key, now.dim, now.epoch, now.floor, now.nonce)
    held.add(before.records() + now.records())  # a set refuses rows at or before its floor
    assert held.seqs == now.seqs
    chunks = [fvec._header(now)] + [r.encode(now.nonce)
                                   for r in before.records() + now.records()]
    path(h).write_bytes(b"".join(chunks))
    got = [i["seq"] for i in json.loads(history(tmp_path).session_history().call(call))["items"]]
    assert got and all(s > floor for s in got), got
    # the file's records for the rows before the floor are found by check
    assert "recall_vectors_disagrees" in codes(h)


def test_a_link_in_its_place_is_never_followed(tmp_path: Path) -> None:
    h, fresh = filled(tmp_path / "root")
    outside = tmp_path / "outside.bin"
    outside.write_bytes(path(h).read_bytes())
    path(h).unlink()
    os.symlink(outside, path(h))
    report = check(h)
    assert "recall_vectors_unsafe" in {f.code for f in report.findings} and not report.ok
    assert answers(history(tmp_path / "root")) == fresh  # replaced by rename, not followed
    assert outside.read_bytes() and not path(h).is_symlink()
    assert check(h).ok


def test_another_embedder_starts_another_set(tmp_path: Path) -> None:
    h, _ = filled(tmp_path)
    first = fvec.read_set(h.engine.path)[0]
    assert first.key == semantic.key(embedder(64)) and len(first.seqs) == len(ROWS)
    other = history(tmp_path, 128)
    answers(other)
    second = fvec.read_set(h.engine.path)[0]
    assert second.key == semantic.key(embedder(128)) and second.dim == 128
    assert second.seqs == first.seqs and second.nonce != first.nonce


def test_purge_and_truncate_delete_the_vectors_before_the_log_changes(tmp_path: Path) -> None:
    h, _ = filled(tmp_path)
    h.clear_soft()
    h.append(msg("a kitten again"))
    answers(h)
    assert path(h).exists()
    kept = fvec.read_set(h.engine.path)[0]
    assert kept.seqs == [8]  # nothing at or before the floor
    h.purge_before_floor()
    assert not path(h).exists()
    answers(h)
    h.append(msg("one more row"))
    answers(h)
    h.truncate_after(h.snapshot().next_seq - 2)
    assert not path(h).exists()
