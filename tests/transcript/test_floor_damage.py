"""The privacy floor fails closed under damage (issue 20, item 1).

A small history (4 KiB over four segments) holds rows before its newest
manual reset (their text says "secret"), rollovers, a compaction and an
older manual reset. A bit flipped at every byte of every segment file, a
cut at every byte, and inside the manual reset lines a newline, a NUL, a
quote and a brace written at every byte, are each made as an untracked edit
(a new file renamed over the segment, so its stamp changes). For each, no
"secret" row may come out of ``provider_view()`` or ``session_history``
(the windows, each window's rows, a search, reads): an error is fine (fail
closed), a leak never is. Every bit flip and cut of the floor's own line is
then repaired (salvage) and the same must hold, with a result that checks
clean; Hypothesis adds any byte value anywhere with every repair policy.
One example each goes through the MCP server's tool, the Agents SDK session
and the LangChain message history. A cut of a sealed segment at its floor
with RECEIPT deleted is caught through INDEX's record of that segment.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger import History, LedgerError, Store
from ledger.core.format import rows as fmt
from ledger.storage.files import segments as segs
from recovery.check import check
from recovery.repair import repair
from tests.helpers import msg

WS = "ws"
SECRET = "secret"


def _build(root: Path) -> list[int]:
    """The history; returns the seqs that must stay unreachable."""
    h = Store(root, durability="off", segment_bytes=700).history(WS)
    out = h.append_many([msg(f"{SECRET} a"), msg(f"{SECRET} b")]).seqs
    out += h.rollover([msg(f"{SECRET} c")]).seqs
    out += h.clear_soft().seqs
    out += h.compact([msg(f"{SECRET} e")]).seqs
    out += h.clear_soft().seqs  # the newest floor
    h.append(msg("public f"))
    h.rollover([msg("public g")])
    h.append(msg("public h"))
    return out


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Where the cases run: a tmpfs when there is one (rewrites fsync, and
    thousands of cases run here), else pytest's temp directory."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        d = Path(tempfile.mkdtemp(prefix="tledger-floor-", dir=shm))
        yield d
        shutil.rmtree(d, ignore_errors=True)
    else:
        yield tmp_path_factory.mktemp("scratch")


@pytest.fixture(scope="module")
def pristine(scratch: Path) -> tuple[Path, list[int]]:
    root = scratch / "pristine"
    seqs = _build(root)
    numbers = segs.list_segments(str(root / WS))
    assert len(numbers) >= 3, "the history must span sealed segments and an active one"
    return root, seqs


def _texts(obj: Any) -> Iterator[str]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == "text" and isinstance(v, str):
                yield v
            else:
                yield from _texts(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _texts(v)


def _tool_leaks(call: Callable[[dict[str, Any]], str], seqs: list[int]) -> list[str]:
    """Every "secret" text a session_history call hands out (errors are fine):
    the windows and each window's rows, a search, and a read of the row
    before the floor and the oldest row (``seqs``: those to read)."""
    leaks: list[str] = []

    def run(args: dict[str, Any]) -> dict[str, Any]:
        res = json.loads(call(args))
        leaks.extend(f"{args}: {t!r}" for t in _texts(res.get("items", [])) if SECRET in t)
        return res

    windows = run({"action": "list", "limit": 50})
    if windows.get("error", {}).get("code") == "history_unavailable":
        # Refused before any scan (a damaged floor): every call is, but read one anyway.
        run({"action": "read", "seq": seqs[-2]})
        return leaks
    for w in windows.get("items", []):
        run({"action": "list", "window": w["window"], "limit": 25})
    res = run({"action": "search", "query": SECRET, "limit": 25})
    for _ in range(5):
        if not res.get("cursor"):
            break
        res = run({"action": "search", "query": SECRET, "limit": 25, "cursor": res["cursor"]})
    for s in (seqs[0], seqs[-2]):
        run({"action": "read", "seq": s})
    return leaks


def _view_leaks(h: History) -> list[str]:
    try:
        view = h.provider_view()
    except LedgerError:
        return []  # refused: fail closed
    return [f"provider_view: {t!r}" for r in view for t in _texts(r.to_dict()) if SECRET in t]


def _leaks(root: Path, seqs: list[int]) -> list[str]:
    h = Store(root, durability="off").history(WS)
    return _view_leaks(h) + _tool_leaks(h.session_history().call, seqs)


def _replace(path: Path, data: bytes) -> None:
    """An untracked edit: new bytes renamed over the file (a new stamp)."""
    tmp = path.with_name(path.name + ".edit")
    tmp.write_bytes(data)
    os.rename(tmp, path)


def _segment_files(root: Path) -> list[Path]:
    ws = str(root / WS)
    return [Path(segs.segment_path(ws, n)) for n in segs.list_segments(ws)]


def _after_repair(root: Path, seqs: list[int], policy: str = "salvage") -> list[str]:
    h = Store(root, durability="off").history(WS)
    rep = repair(h, policy=policy)
    problems = _leaks(root, seqs)
    if rep.refused is None and not rep.consistent:  # rep.after: check after the repair
        problems.append(f"repair ({policy}) left damage: {rep.text()}")
    return problems


def _reset_spans(data: bytes) -> list[range]:
    """Byte ranges of the manual reset lines in a segment."""
    out = []
    for line in segs.split_lines(data):
        if b'"reason":"manual"' in line.data:
            out.append(range(line.offset, line.offset + len(line.data) + 1))
    return out


def _mutations(data: bytes) -> Iterator[tuple[str, bytes]]:
    """A bit flipped at every byte and a cut at every point; inside manual
    reset lines also a newline, a NUL, a quote and a brace at every byte."""
    for i in range(len(data)):
        yield f"flip@{i}", data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1 :]
    for k in range(len(data)):
        yield f"cut@{k}", data[:k]
    for span in _reset_spans(data):
        for i in span:
            for b in (b"\n", b"\x00", b'"', b"}"):
                if data[i : i + 1] != b:
                    yield f"{b!r}@{i}", data[:i] + b + data[i + 1 :]


WORKERS = 2  # forked processes sharing the damage loop (the CI machine has two cores)


def _damage_share(src: Path, seqs: list[int], worker: int) -> tuple[int, list[str]]:
    """Every WORKERS-th case of the loop, from ``worker`` on, in a copy of its own."""
    work = Path(tempfile.mkdtemp(dir=src.parent))
    shutil.copytree(src, work, dirs_exist_ok=True)
    failures: list[str] = []
    cases = k = 0
    for path in _segment_files(work):
        data = path.read_bytes()
        for name, damaged in _mutations(data):
            k += 1
            if k % WORKERS != worker:
                continue
            cases += 1
            _replace(path, damaged)
            found = _leaks(work, seqs)
            _replace(path, data)
            failures += [f"{path.name} {name}: {f}" for f in found]
            if len(failures) > 20:
                break
    shutil.rmtree(work)
    return cases, failures


def test_every_byte_change_and_cut_keeps_the_floor(
    pristine: tuple[Path, list[int]], tmp_path: Path
) -> None:
    src, seqs = pristine
    work = Path(tempfile.mkdtemp(dir=src.parent))
    shutil.copytree(src, work, dirs_exist_ok=True)
    assert _leaks(work, seqs) == []
    expected = sum(1 for path in _segment_files(work) for _ in _mutations(path.read_bytes()))
    with multiprocessing.get_context("fork").Pool(WORKERS) as pool:
        shares = pool.starmap(_damage_share, [(src, seqs, w) for w in range(WORKERS)])
    cases = sum(n for n, _ in shares)
    failures = [f for _, found in shares for f in found]
    assert cases > 10_000
    assert failures or cases == expected, f"{cases} of {expected} cases ran"
    assert failures == [], "\n".join(failures[:20])


def test_every_change_of_a_reset_line_survives_repair(
    pristine: tuple[Path, list[int]], tmp_path: Path
) -> None:
    """Every bit flip and cut inside the newest floor's line (the cut at its
    start included), then repair: the floor is kept -- a manual reset
    stands in its place -- and nothing before it is served."""
    src, seqs = pristine
    h = Store(src, durability="off").history(WS)
    floor = h.snapshot().floor
    assert floor is not None and floor.readable
    seg = Path(segs.segment_path(h.engine.path, floor.segment))
    data = seg.read_bytes()
    end = data.index(b"\n", floor.offset) + 1
    cases: list[tuple[str, bytes]] = []
    for i in range(floor.offset, end):
        cases.append((f"flip@{i}", data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1 :]))
        cases.append((f"cut@{i}", data[:i]))
    failures: list[str] = []
    for name, damaged in cases:
        work = Path(tempfile.mkdtemp(dir=src.parent))
        shutil.copytree(src, work, dirs_exist_ok=True)
        _replace(work / WS / seg.name, damaged)
        failures += [f"{name}: {f}" for f in _after_repair(work, seqs)]
        shutil.rmtree(work)
        if len(failures) > 20:
            break
    assert len(cases) > 300
    assert failures == [], "\n".join(failures[:20])


@given(
    which=st.integers(0, 1 << 16),
    pos=st.integers(0, 1 << 16),
    value=st.integers(0, 255),
    cut=st.booleans(),
    policy=st.sampled_from(["salvage", "tail", "prefix", "strict"]),
)
def test_any_byte_any_policy(
    pristine: tuple[Path, list[int]], which: int, pos: int, value: int, cut: bool, policy: str,
) -> None:
    src, seqs = pristine
    work = Path(tempfile.mkdtemp(dir=src.parent))
    shutil.copytree(src, work, dirs_exist_ok=True)
    files = _segment_files(work)
    path = files[which % len(files)]
    data = path.read_bytes()
    i = pos % len(data)
    _replace(path, data[:i] if cut else data[:i] + bytes([value]) + data[i + 1 :])
    assert _leaks(work, seqs) == []
    assert _after_repair(work, seqs, policy) == []
    shutil.rmtree(work)


def _flip_floor_kind(root: Path) -> None:
    """Flip a bit inside the newest floor's ``"kind":"reset"`` (its
    ``"reset":{"reason":"manual"}`` stays)."""
    h = Store(root, durability="off").history(WS)
    floor = h.snapshot().floor
    assert floor is not None
    seg = Path(segs.segment_path(h.engine.path, floor.segment))
    data = seg.read_bytes()
    i = data.index(b'"kind":"reset"', floor.offset) + 9
    _replace(seg, data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1 :])


def test_flipped_kind_blocks_reads_until_repair_restores_the_floor(
    pristine: tuple[Path, list[int]], tmp_path: Path
) -> None:
    src, _ = pristine
    shutil.copytree(src, tmp_path / "w")
    root = tmp_path / "w"
    _flip_floor_kind(root)
    h = Store(root, durability="off").history(WS)
    with pytest.raises(LedgerError, match=r"workspace 'ws': segment seg-\d+\.jsonl offset \d+"):
        h.provider_view()
    res = json.loads(h.session_history().call({"action": "search", "query": "public"}))
    assert res["error"]["code"] == "history_unavailable"
    assert h.stat().floor.damaged is True
    rep = repair(h)
    assert rep.consistent and rep.changed
    assert h.stat().floor.damaged is False
    reset = [r.to_dict() for r in h.rows() if r.kind == "reset"]
    recovered = [r for r in reset if "recovered" in r["meta"]]
    assert len(recovered) == 1 and recovered[0]["reset"] == {"reason": "manual"}
    assert recovered[0]["meta"]["recovered"] == rep.removals[0].entry
    view = [t for r in h.provider_view() for t in _texts(r.to_dict())]
    assert view[-2:] == ["public g", "public h"] and not any(SECRET in t for t in view)
    found = h.session_history().search("public")
    assert [i["text"] for i in found["items"]] == ["public f", "public g", "public h"]


def test_cut_at_the_floor_line_start_is_refused_by_strict(
    pristine: tuple[Path, list[int]], tmp_path: Path
) -> None:
    """A cut exactly at the start of the floor's line leaves a clean-looking
    log: only the receipt knows a floor was there. Reads are refused, check
    reports it, strict refuses, salvage puts the reset back."""
    src, seqs = pristine
    root = tmp_path / "w"
    shutil.copytree(src, root)
    h = Store(root, durability="off").history(WS)
    floor = h.snapshot().floor
    assert floor is not None
    seg = Path(segs.segment_path(h.engine.path, floor.segment))
    _replace(seg, seg.read_bytes()[: floor.offset])
    for n in segs.list_segments(h.engine.path):
        if n > floor.segment:
            os.unlink(segs.segment_path(h.engine.path, n))
    assert [r.seq for r in h.rows()] == list(range(1, floor.seq))  # every line reads
    with pytest.raises(LedgerError, match="privacy floor"):
        h.provider_view()
    report = check(h)
    assert not report.ok and "floor_lost" in {f.code for f in report.findings}
    strict = repair(h, policy="strict")
    assert strict.refused and "privacy floor" in strict.refused
    with pytest.raises(LedgerError):
        h.provider_view()
    fixed = repair(h)
    assert fixed.consistent
    assert h.provider_view() == []
    assert _leaks(root, seqs) == []
    h.append(msg("public new"))
    assert [t for r in h.provider_view() for t in _texts(r.to_dict())] == ["public new"]


def test_framework_readers_fail_closed(
    pristine: tuple[Path, list[int]], tmp_path: Path
) -> None:
    """The MCP server's tool, the Agents SDK session and the LangChain
    message history read through History: with the floor's kind flipped they
    refuse rather than serve the rows before it."""
    src, seqs = pristine
    root = tmp_path / "w"
    shutil.copytree(src, root)
    _flip_floor_kind(root)

    pytest.importorskip("mcp", reason="the mcp extra is not installed")
    from ledger.integrations.mcp_server import build_server

    server = build_server(str(root), WS)

    def mcp_call(args: dict[str, Any]) -> str:
        async def go() -> str:
            result = await server.call_tool("session_history", args)
            content = result[0] if isinstance(result, tuple) else result
            blocks = getattr(content, "content", content)
            return "".join(getattr(b, "text", "") for b in blocks)
        return asyncio.run(go())

    assert _tool_leaks(mcp_call, seqs) == []
    assert json.loads(mcp_call({"action": "search", "query": "public"}))["error"]["code"] \
        == "history_unavailable"

    pytest.importorskip("agents", reason="the agents extra is not installed")
    from ledger.integrations.openai_agents import LedgerSession

    session = LedgerSession(WS, root=str(root))
    with pytest.raises(LedgerError):
        session.items()

    pytest.importorskip("langchain_core", reason="the langchain extra is not installed")
    from ledger.integrations.langchain import LedgerChatMessageHistory

    chat = LedgerChatMessageHistory(WS, root=str(root))
    with pytest.raises(LedgerError):
        _ = chat.messages


def test_index_remembers_a_floor_when_the_receipt_is_gone(
    pristine: tuple[Path, list[int]], tmp_path: Path
) -> None:
    """RECEIPT deleted and the sealed segment holding the floor cut at the
    floor's line: the log looks clean, and INDEX's entry for that segment
    (written when it was sealed) is what still knows where the floor was."""
    src, seqs = pristine
    root = tmp_path / "w"
    shutil.copytree(src, root)
    h = Store(root, durability="off").history(WS)
    floor = h.snapshot().floor
    assert floor is not None and floor.segment != segs.list_segments(h.engine.path)[-1]
    (root / WS / "RECEIPT").unlink()
    seg = Path(segs.segment_path(h.engine.path, floor.segment))
    _replace(seg, seg.read_bytes()[: floor.offset])
    assert _leaks(root, seqs) == []
    with pytest.raises(LedgerError, match="privacy floor"):
        h.provider_view()
    assert "floor_lost" in {f.code for f in check(h).findings}
    assert repair(h).consistent
    assert _leaks(root, seqs) == []
    view = [t for r in h.provider_view() for t in _texts(r.to_dict())]
    assert view and not any(SECRET in t for t in view)


def test_every_byte_value_at_every_byte_of_a_reset_line_leaves_a_floor(
    pristine: tuple[Path, list[int]]
) -> None:
    """Exhaustive at the line level: every one of the 255 other values at
    every byte of the newest manual reset line (a newline splits it in two)
    leaves a line that counts as a privacy floor -- the same classification
    readers, check and repair use (``fmt.line_may_be_reset`` for a line that
    does not verify)."""
    src, _ = pristine
    h = Store(src, durability="off").history(WS)
    floor = h.snapshot().floor
    assert floor is not None
    data = Path(segs.segment_path(h.engine.path, floor.segment)).read_bytes()
    line = data[floor.offset : data.index(b"\n", floor.offset)]
    assert fmt.decode_line(line) is not None
    missed = []
    for i in range(len(line)):
        for v in range(256):
            if v == line[i]:
                continue
            pieces = (line[:i] + bytes([v]) + line[i + 1 :]).split(b"\n")
            if not any(
                fmt.line_may_be_reset(p) if fmt.decode_line(p) is None
                else fmt.decode_line(p).get("kind") == "reset"  # type: ignore[union-attr]
                for p in pieces
            ):
                missed.append((i, v))
    assert missed == [], missed[:10]
