"""``tledger mcp`` and fork/rewind (extra ``mcp``): a served workspace offers
no fork, rewind or branches tool unless the operator passes
``--allow-branches``; with it, they work through the ``mcp`` SDK's client,
and a rewind can never undo a manual reset (no ``restore_cleared``)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed "
                    "(pip install 'transcript-ledger[mcp]')")

from ledger import Store
from tests.helpers import msg, tree
from tests.integrations.test_mcp_server import call, serve


async def tool(client: Any, name: str, **args: Any) -> tuple[bool, dict[str, Any]]:
    result = await client.call_tool(name, args)
    return bool(result.is_error), json.loads(result.content[0].text)


def test_no_fork_rewind_or_branches_without_the_operators_flag(tmp_path: Path) -> None:
    h = Store(tmp_path, durability="off").history("ws")
    h.append_many([msg("one"), msg("two", role="assistant")])
    before = tree(tmp_path)

    async def scenario() -> None:
        for flags in ((), ("--allow-write",)):
            async with serve(tmp_path, "ws", *flags) as client:
                names = {t.name for t in (await client.list_tools()).tools}
                assert not names & {"fork", "rewind", "branches"}
                for name, args in (("fork", {"new_workspace": "copy"}), ("rewind", {"to": 1}),
                                   ("branches", {})):
                    with pytest.raises(Exception, match=name):
                        result = await client.call_tool(name, args)
                        if result.is_error:
                            raise RuntimeError(result.content[0].text)

    asyncio.run(scenario())
    assert tree(tmp_path) == before  # nothing forked, nothing rewound
    assert Store(tmp_path).branches("ws") == []


def test_with_the_flag_a_client_forks_rewinds_and_lists_but_never_past_the_floor(
        tmp_path: Path) -> None:
    h = Store(tmp_path, durability="off").history("ws")
    h.append_many([msg("the secret is tulip")])
    floor = h.clear_soft().seqs[0]
    kept = h.append_many([msg("about herons"), msg("noted", role="assistant")]).seqs
    h.append_many([msg("about owls")])

    async def scenario() -> None:
        async with serve(tmp_path, "ws", "--allow-branches") as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert names == {"session_history", "fork", "rewind", "branches"}
            err, forked = await tool(client, "fork", new_workspace="ws-b", at=kept[-1])
            assert not err and (forked["source"], forked["seq"]) == ("ws", kept[-1])
            err, listed = await tool(client, "branches")
            assert not err and [b["workspace"] for b in listed["branches"]] == ["ws-b"]
            err, refused = await tool(client, "fork", new_workspace="ws-c", at=floor)
            assert err and refused["error"]["code"] == "fork_refused"
            # bad arguments are bad_request, never coerced
            for args in ({"new_workspace": "x", "at": "3"}, {"new_workspace": 7},
                         {"new_workspace": "x", "at": True}, {}):
                err, bad = await tool(client, "fork", **args)
                assert err and bad["error"]["code"] == "bad_request", args
            # no restore_cleared here: undoing the user's reset is not the model's to do
            err, bad = await tool(client, "rewind", to=floor - 1, restore_cleared=True)
            assert err and bad["error"]["code"] == "bad_request"
            err, refused = await tool(client, "rewind", to=floor - 1)
            assert err and refused["error"]["code"] == "rewrite_refused"
            assert (await call(client, action="search", query="tulip"))["items"] == []
            epoch = Store(tmp_path).history("ws").epoch
            err, stale = await tool(client, "rewind", to=kept[-1], expect_epoch=epoch + 1)
            assert err and stale["error"]["code"] == "epoch_changed"
            assert (await call(client, action="search", query="owls"))["items"]
            err, done = await tool(client, "rewind", to=kept[-1], expect_epoch=epoch)
            assert not err and done["to"] == kept[-1] and done["rewound"]
            assert (await call(client, action="search", query="owls"))["items"] == []
            assert (await call(client, action="search", query="herons"))["items"]

    asyncio.run(scenario())
    fork = Store(tmp_path).history("ws-b")
    assert [r.parts[0]["text"] for r in fork.provider_view()] == ["about herons", "noted"]
    assert "owls" in json.dumps([r.to_dict() for r in Store(tmp_path).history("ws").rows()])
