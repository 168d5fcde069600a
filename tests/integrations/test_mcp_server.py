"""``tledger mcp`` (extra ``mcp``): the server runs as a subprocess and the
``mcp`` SDK's own client drives it over stdio: tools, the three actions,
cursors, every bound and every error code, the privacy floor, read-only
by default, and the refusals."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed "
                    "(pip install 'transcript-ledger[mcp]')")

from mcp import Client
from mcp.client.stdio import StdioServerParameters

from ledger import Store
from ledger.storage.files.lock import locked
from tests.helpers import PYTHON, msg, subprocess_env, tree

KIB16 = 16 * 1024
LONG = "".join(f"{i:05d}é " for i in range(6000))  # 42,000 code points, non-ASCII too


@asynccontextmanager
async def serve(root: Path, ws: str, *flags: str) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=PYTHON, args=["-m", "ledger", "mcp", "--root", str(root), "--workspace", ws,
                              *flags], env=subprocess_env())
    async with Client(params) as client:
        yield client


async def call(client: Client, **args: Any) -> dict[str, Any]:
    result = await client.call_tool("session_history", args)
    text = result.content[0].text
    assert len(text.encode("utf-8")) <= KIB16
    doc: dict[str, Any] = json.loads(text)
    assert result.is_error == ("error" in doc)
    return doc


def code(doc: dict[str, Any]) -> str | None:
    return doc.get("error", {}).get("code")


def _build(root: Path) -> dict[str, int]:
    h = Store(root, durability="off").history("ws")
    h.append_many([msg("the secret is tulip")])
    floor = h.clear_soft().seqs[0]
    notes = h.append_many([msg(f"note {i}") for i in range(30)]).seqs
    h.append_many([msg(f"filler {i}", role="assistant") for i in range(520)])
    h.rollover([msg("go on")])
    long_seq = h.append(msg(LONG)).seqs[0]
    huge_seq = h.append(msg("h" * (1 << 20) + "uge")).seqs[0]
    return {"floor": floor, "first_note": notes[0], "last_note": notes[-1],
            "long": long_seq, "huge": huge_seq}


async def _follow(client: Client, **args: Any) -> list[dict[str, Any]]:
    pages = [await call(client, **args)]
    while pages[-1].get("cursor"):
        pages.append(await call(client, **args, cursor=pages[-1]["cursor"]))
    return pages


def test_a_read_only_server_serves_session_history_within_its_bounds(tmp_path: Path) -> None:
    seqs = _build(tmp_path)
    before = tree(tmp_path)

    async def scenario() -> None:
        async with serve(tmp_path, "ws") as client:
            tools = (await client.list_tools()).tools
            assert [t.name for t in tools] == ["session_history"]
            assert set(tools[0].input_schema["properties"]) == {
                "action", "query", "mode", "window", "current", "seq", "offset", "cursor",
                "limit"}
            assert "ranked" in tools[0].input_schema["properties"]["mode"]["description"]
            query = tools[0].input_schema["properties"]["query"]
            assert {"type": "array", "items": {"type": "string"}} in query["anyOf"]
            window = await client.read_resource("ledger://window")
            rows = json.loads(window.contents[0].text)
            view = Store(tmp_path).history("ws").provider_view()
            assert rows == [r.to_dict() for r in view] and rows[0]["kind"] == "lead_in"

            windows = [w for p in await _follow(client, action="list") for w in p["items"]]
            assert [w["reason"] for w in windows] == ["manual", "rollover"]
            assert windows[0]["window"] == seqs["floor"]  # nothing before the floor

            pages = await _follow(client, action="search", query="NOTE", limit=7)
            found = [i["seq"] for p in pages for i in p["items"]]
            assert found == list(range(seqs["first_note"], seqs["last_note"] + 1))
            assert max(len(p["items"]) for p in pages) == 7

            assert (await call(client, action="search", query="tulip"))["items"] == []
            assert code(await call(client, action="read", seq=seqs["floor"] - 1)) == "not_found"

            pages = await _follow(client, action="read", seq=seqs["long"])
            assert len(pages) >= 3 and all(p["items"][0]["truncated"] for p in pages[:-1])
            assert "".join(p["items"][0]["text"] for p in pages) == LONG

            # 500 rows examined per call: a search without a match pauses with a cursor.
            miss = await call(client, action="search", query="absent", window=windows[0]["window"])
            assert miss["items"] == [] and miss["cursor"] is not None
            # A line over 1 MiB is not decoded; it is listed under skipped.
            listed = await _follow(client, action="list", window=windows[1]["window"])
            skipped = [s for p in listed for s in p["skipped"]]
            assert skipped and skipped[0]["seq"] == seqs["huge"] and skipped[0]["bytes"] > 1 << 20

            assert code(await call(client, action="search", query="x", limit=26)) == "bad_request"
            assert code(await call(client, action="list", limit=51)) == "bad_request"
            assert code(await call(client, action="read", seq=seqs["long"], limit=16001)) == \
                "bad_request"
            assert code(await call(client, action="search", query="q" * 1025)) == "bad_request"
            assert code(await call(client, action="search", query="")) == "bad_request"
            assert code(await call(client, action="drop")) == "bad_request"
            assert code(await call(client, action="search", query="note",
                                   cursor="not-a-cursor")) == "invalid_cursor"
            first = await call(client, action="search", query="note", limit=2)
            assert code(await call(client, action="search", query="other",
                                   cursor=first["cursor"])) == "invalid_cursor"
            assert tree(tmp_path) == before  # the server wrote nothing

            # Ranked search (it writes its recall index beside the segments).
            best = await call(client, action="search", query="which note was 7?", mode="ranked",
                              limit=3, current=True)
            assert best["items"][0]["text"] == "note 7" and best["items"][0]["score"] > 0
            # Several phrasings in one call, fused (a list means ranked).
            both = await call(client, action="search", query=["which note was 7?", "note 3"],
                              limit=3, current=True)
            assert {i["text"] for i in both["items"][:2]} == {"note 7", "note 3"}
            assert code(await call(client, action="search", query=["x"] * 5)) == "bad_request"
            assert (await call(client, action="search", query="secret tulip",
                               mode="ranked", current=True))["items"] == []  # before the floor

            Store(tmp_path, durability="off").history("ws").clear_soft()  # a new floor
            assert code(await call(client, action="search", query="note",
                                   cursor=first["cursor"])) == "stale_cursor"
            assert (await call(client, action="search", query="note"))["items"] == []

    asyncio.run(scenario())


def test_lock_timeout_and_disabled_retrieval_come_back_as_their_codes(tmp_path: Path) -> None:
    h = Store(tmp_path, durability="off").history("ws")
    h.append_many([msg("hello")])

    async def scenario() -> None:
        async with serve(tmp_path, "ws", "--lock-timeout", "0.1") as client:
            assert (await call(client, action="search", query="hello"))["items"]
            with locked(h.engine.path, "ws", 5.0, shared=False):
                assert code(await call(client, action="search", query="hello")) == \
                    "history_unavailable"
        async with serve(tmp_path, "ws", "--no-retrieval") as client:
            assert code(await call(client, action="list")) == "retrieval_disabled"

    asyncio.run(scenario())


def test_writes_only_with_the_explicit_flag(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serve(tmp_path, "ws") as client:
            with pytest.raises(Exception, match="append"):
                result = await client.call_tool("append", {"rows": [msg("x")]})
                if result.is_error:
                    raise RuntimeError(result.content[0].text)
        assert not (tmp_path / "ws").exists()
        async with serve(tmp_path, "ws", "--allow-write") as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert names == {"session_history", "append", "clear"}
            out = await client.call_tool("append", {"rows": [msg("written over mcp")]})
            assert json.loads(out.content[0].text)["seqs"] == [1]
            assert (await call(client, action="search", query="over mcp"))["items"]
            await client.call_tool("clear", {})
            assert (await call(client, action="search", query="over mcp"))["items"] == []

    asyncio.run(scenario())


def _tledger(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, "-m", "ledger", *args], capture_output=True, text=True,
                          env=subprocess_env(), timeout=60, stdin=subprocess.DEVNULL)


@pytest.mark.skipif(sys.platform == "win32", reason="symlinks")
def test_path_like_ids_and_workspaces_outside_the_root_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    for bad in ("../etc", "a/b", ".."):
        done = _tledger("mcp", "--root", str(root), "--workspace", bad)
        assert done.returncode == 2, done.stderr
    outside = tmp_path / "elsewhere"
    Store(tmp_path, durability="off").history("elsewhere").append(msg("not yours"))
    os.symlink(outside, root / "linked")
    done = _tledger("mcp", "--root", str(root), "--workspace", "linked")
    assert done.returncode == 1 and "outside the root" in done.stderr


def test_streamable_http_on_the_loopback_interface(tmp_path: Path) -> None:
    import socket
    import time

    Store(tmp_path, durability="off").history("ws").append(msg("over http"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [PYTHON, "-m", "ledger", "mcp", "--root", str(tmp_path), "--workspace", "ws",
         "--http", str(port)], env=subprocess_env(), stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:  # wait until it listens
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "no server"
                time.sleep(0.1)

        async def scenario() -> None:
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                found = await call(client, action="search", query="over http")
                assert [i["text"] for i in found["items"]] == ["over http"]

        asyncio.run(scenario())
    finally:
        server.terminate()
        server.wait(timeout=30)
        assert server.stderr is not None
        server.stderr.close()


def test_a_call_reads_at_most_2_mib(tmp_path: Path) -> None:
    h = Store(tmp_path, durability="off").history("ws")
    h.append_many([msg(f"{i} " + "b" * (900 << 10)) for i in range(4)])  # 3.5 MiB, 4 rows
    h.append(msg("needle"))

    async def scenario() -> None:
        async with serve(tmp_path, "ws") as client:
            first = await call(client, action="search", query="needle")
            assert first["items"] == [] and first["cursor"] is not None  # paused by bytes
            pages = await _follow(client, action="search", query="needle")
            assert len(pages) >= 2
            assert [i["text"] for p in pages for i in p["items"]] == ["needle"]

    asyncio.run(scenario())


@asynccontextmanager
async def serve_logging(root: Path, ws: str, errfile: Path, *flags: str
                        ) -> AsyncIterator[Client]:
    """``serve`` with the server's stderr kept in ``errfile``."""
    params = StdioServerParameters(
        command="/bin/sh",
        args=["-c", 'exec "$0" "$@" 2>>"$TLEDGER_ERRFILE"', PYTHON, "-m", "ledger", "mcp",
              "--root", str(root), "--workspace", ws, *flags],
        env={**subprocess_env(), "TLEDGER_ERRFILE": str(errfile)})
    async with Client(params) as client:
        yield client


def error_of(result: Any) -> dict[str, Any]:
    assert result.is_error
    doc: dict[str, Any] = json.loads(result.content[0].text)
    return doc["error"]  # type: ignore[no-any-return]


def test_refusals_reach_the_client_with_code_and_reason_and_no_traceback(
    tmp_path: Path
) -> None:
    """Issue 20, item 10: an append the store refuses names its reason; the server
    prints no traceback."""
    errfile = tmp_path / "server.err"
    h = Store(tmp_path, durability="off").history("ws")
    h.append(msg("first"))

    async def scenario() -> None:
        async with serve_logging(tmp_path, "ws", errfile, "--allow-write",
                                 "--lock-timeout", "0.1") as client:
            bad = await client.call_tool("append", {"rows": [{"role": "wizard", "parts": []}]})
            err = error_of(bad)
            assert err["code"] == "invalid_row" and "role must be one of" in err["message"]
            huge = await client.call_tool("append", {"rows": [
                {"role": "user", "parts": [], "n": 18446744073709551616}]})
            assert "64-bit" in error_of(huge)["message"]
            extra = await client.call_tool("append", {"rows": [msg("x")], "batch": "b"})
            assert error_of(extra)["code"] == "bad_request"
            with locked(h.engine.path, "ws", 5.0, shared=False):
                busy = await client.call_tool("append", {"rows": [msg("late")]})
                assert error_of(busy)["code"] == "lock_timeout"
                busy = await client.call_tool("clear", {})
                assert error_of(busy)["code"] == "lock_timeout"
            ok = await client.call_tool("append", {"rows": [msg("second")]})
            assert json.loads(ok.content[0].text)["seqs"] == [2]

    asyncio.run(scenario())
    assert [r.to_dict()["parts"][0]["text"] for r in h.rows()] == ["first", "second"]
    assert "Traceback" not in errfile.read_text()


def test_arguments_are_checked_as_the_python_tool_checks_them(tmp_path: Path) -> None:
    """``limit: true`` and unknown arguments are bad_request, as tool.call() says;
    the SDK neither coerces nor drops them (issue 20, item 11)."""
    h = Store(tmp_path, durability="off").history("ws")
    h.append(msg("hello there"))
    tool = h.session_history()
    cases = [
        {"action": "list", "limit": True},
        {"action": "search", "query": "hello", "bogus": 1},
        {"action": "read", "seq": "1"},
        {"action": "search", "query": "hello", "limit": 1.5},
    ]

    async def scenario() -> None:
        async with serve(tmp_path, "ws") as client:
            for args in cases:
                doc = await call(client, **args)
                assert code(doc) == "bad_request", (args, doc)
                assert doc == json.loads(tool.call(args)), args
            assert (await call(client, action="search", query="hello"))["items"]

    asyncio.run(scenario())


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "soon"])
def test_lock_timeout_must_be_a_finite_number(tmp_path: Path, value: str) -> None:
    done = _tledger("mcp", "--root", str(tmp_path), "--workspace", "ws",
                    "--lock-timeout", value)
    assert done.returncode == 2, done.stderr
    assert "--lock-timeout" in done.stderr and "Traceback" not in done.stderr


def test_an_unreadable_window_is_an_error_with_its_reason_and_no_traceback(
    tmp_path: Path
) -> None:
    errfile = tmp_path / "server.err"
    h = Store(tmp_path, durability="off").history("ws")
    h.append_many([msg("first"), msg("second", role="assistant")])
    (Path(h.engine.path) / "FORMAT").write_text("transcript-ledger 99\n")  # a newer version's

    async def scenario() -> None:
        async with serve_logging(tmp_path, "ws", errfile) as client:
            with pytest.raises(Exception) as info:
                await client.read_resource("ledger://window")
            assert "format_error" in str(info.value) and "99" in str(info.value)
            await call(client, action="search", query="first")  # a result, whatever it is

    asyncio.run(scenario())
    assert "Traceback" not in errfile.read_text()
