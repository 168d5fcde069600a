"""Retrieval cursors (issue 3): authenticated, bound to one query, one
workspace, one history state and one process (DESIGN.md 8).

- a mutated or forged cursor never verifies: ``invalid_cursor`` (or
  ``stale_cursor`` when the mutation names another key id, which is what a
  cursor of another process looks like);
- a cursor of another process is ``stale_cursor``;
- a pending receipt or an untracked edit expires cursors; a new query
  works at once.

Binding to one query and workspace, malformed and forged payloads, expiry by
a rewrite or a floor, and the 4 KiB bound hold on every engine: the contract
(tests/contract/cursors.py).
"""

from __future__ import annotations

import base64
import json
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger import CursorExpired, Store
from ledger.core import cursors as cur
from ledger.core.format import files as ffmt
from ledger.core.format import rows as fmt
from ledger.storage.files.receipt import read_receipt, write_receipt
from tests.helpers import PYTHON, msg, subprocess_env

B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def call(tool: Any, args: dict[str, Any]) -> dict[str, Any]:
    out = tool.call(args)
    assert len(out.encode("utf-8")) <= 16 * 1024
    return json.loads(out)


def code(res: dict[str, Any]) -> str:
    if "error" in res:
        assert set(res) == {"error"} and set(res["error"]) == {"code", "message"}
        return res["error"]["code"]
    return ""


def unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


@pytest.fixture(scope="module")
def paged(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, Any], str]:
    """A history with enough rows that a search has a second page."""
    root = tmp_path_factory.mktemp("cursors")
    store = Store(root, durability="off", segment_bytes=512)
    h = store.history("ws")
    h.append_many([msg(f"tok {i}") for i in range(30)])
    h.rollover([msg("tok after rollover")])
    tool = h.session_history()
    args = {"action": "search", "query": "tok", "limit": 3}
    res = call(tool, args)
    assert res["cursor"]
    return tool, args, res["cursor"]


def _kid_of(token: str) -> str | None:
    """The key id a token's payload names, when it decodes at all."""
    head = token.partition(".")[0]
    try:
        return str(msgspec.json.decode(unb64(head))[1])
    except Exception:
        return None


# --- mutations and forgeries ----------------------------------------------------


mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10_000), st.sampled_from(B64 + ".=+/*! ")),
    st.tuples(st.just("delete"), st.integers(0, 10_000), st.just("")),
    st.tuples(st.just("insert"), st.integers(0, 10_000), st.sampled_from(B64 + ".=+/*! ")),
    st.tuples(st.just("truncate"), st.integers(0, 10_000), st.just("")),
)


def mutate(token: str, m: tuple[str, int, str]) -> str:
    how, at, ch = m
    if not token:
        return ch
    at %= len(token)
    if how == "flip":
        return token[:at] + ch + token[at + 1 :]
    if how == "delete":
        return token[:at] + token[at + 1 :]
    if how == "insert":
        return token[:at] + ch + token[at:]
    return token[:at]


@given(st.lists(mutation, min_size=1, max_size=3))
def test_mutated_cursor_never_verifies(
    paged: tuple[Any, dict[str, Any], str], muts: list[tuple[str, int, str]]
) -> None:
    tool, args, token = paged
    bad = token
    for m in muts:
        bad = mutate(bad, m)
    if bad == token:
        return
    res = call(tool, {**args, "cursor": bad})
    got = code(res)
    assert got in ("invalid_cursor", "stale_cursor"), (bad, res)
    if got == "stale_cursor":
        # Only a payload naming another key id may read as another process's.
        assert _kid_of(bad) not in (None, cur.KEY_ID), (bad, res)


@pytest.mark.parametrize(
    "how",
    ["mac-unused-bits", "payload-junk-char", "padding", "std-alphabet", "whitespace"],
)
def test_non_canonical_spellings_of_a_cursor_do_not_verify(
    paged: tuple[Any, dict[str, Any], str], how: str
) -> None:
    """A token is one exact string: the same bytes spelled differently (the
    unused low bits of the last base64 character, characters a lenient
    decoder drops, padding, the standard alphabet) are other tokens, and
    must not verify."""
    tool, args, token = paged
    head, _, tail = token.partition(".")
    if how == "mac-unused-bits":
        # 32 MAC bytes = 43 characters: the last one carries 2 unused bits.
        last = B64.index(tail[-1])
        bad = f"{head}.{tail[:-1]}{B64[last ^ 1]}"
        assert unb64(bad.partition(".")[2]) == unb64(tail)
    elif how == "payload-junk-char":
        bad = f"{head[:10]}*{head[10:]}.{tail}"
    elif how == "padding":
        bad = f"{head}.{tail}="
    elif how == "std-alphabet":
        # A cursor holding a character the two alphabets spell apart (a random
        # MAC almost always has one; other limits give other cursors).
        for lim in range(1, 26):
            args = {"action": "search", "query": "tok", "limit": lim}
            token = call(tool, args)["cursor"]
            if "-" in token or "_" in token:
                break
        bad = token.replace("-", "+").replace("_", "/")
    else:
        bad = f" {token}"
    assert bad != token
    assert code(call(tool, {**args, "cursor": bad})) == "invalid_cursor"


FIELDS = ("workspace", "action", "args", "binding", "floor", "high", "end", "pos", "window")


@given(field=st.sampled_from(FIELDS), n=st.integers(1, 1000))
def test_payload_with_a_changed_field_fails_the_mac(
    paged: tuple[Any, dict[str, Any], str], field: str, n: int
) -> None:
    tool, args, token = paged
    head, _, tail = token.partition(".")
    data = msgspec.json.decode(unb64(head), type=cur.CursorData)
    value = getattr(data, field)
    if isinstance(value, str):
        new: Any = value + "x" * (n % 5 + 1)
    elif isinstance(value, int):
        new = value + n
    else:
        new = cur.Position(value.part, value.offset + n, value.skip, value.char)
    forged = msgspec.structs.replace(data, **{field: new})
    bad = f"{b64(msgspec.json.encode(forged))}.{tail}"
    assert code(call(tool, {**args, "cursor": bad})) == "invalid_cursor"


# --- bound to one query, workspace, process ---------------------------------------


def test_cursor_of_another_process_is_stale(tmp_path: Path) -> None:
    store = Store(tmp_path, durability="off", segment_bytes=512)
    h = store.history("ws")
    h.append_many([msg(f"tok {i}") for i in range(30)])
    script = textwrap.dedent(
        f"""
        import json
        from ledger import Store
        tool = Store({str(tmp_path)!r}).history("ws").session_history()
        res = json.loads(tool.call({{"action": "search", "query": "tok", "limit": 2}}))
        again = json.loads(tool.call({{"action": "search", "query": "tok", "limit": 2,
                                       "cursor": res["cursor"]}}))
        print(json.dumps({{"cursor": res["cursor"], "own": [i["seq"] for i in again["items"]]}}))
        """
    )
    out = subprocess.run(
        [PYTHON, "-c", script], env=subprocess_env(), capture_output=True, text=True, timeout=60,
        check=True,
    )
    child = json.loads(out.stdout)
    assert child["own"] == [3, 4]  # valid in the process that issued it
    tool = h.session_history()
    args = {"action": "search", "query": "tok", "limit": 2, "cursor": child["cursor"]}
    assert code(call(tool, args)) == "stale_cursor"
    with pytest.raises(CursorExpired):
        tool.search("tok", cursor=child["cursor"], limit=2)
    # A new query works.
    assert [i["seq"] for i in call(tool, {"action": "search", "query": "tok"})["items"]] == list(
        range(1, 11)
    )


# --- bound to one history state ----------------------------------------------------


def test_killed_writer_pending_receipt_expires_cursors(tmp_path: Path) -> None:
    """A writer SIGKILLed between its pending and stable receipt leaves the
    pending receipt behind (simulated by writing it): open cursors are
    refused, a new query works (and pages, bound to the stamps), and the next
    writer re-baselines with a new epoch."""
    store = Store(tmp_path, durability="off", segment_bytes=512)
    h = store.history("ws")
    h.append_many([msg(f"tok {i}") for i in range(30)])
    tool = h.session_history()
    args = {"action": "search", "query": "tok", "limit": 4}
    held = call(tool, args)["cursor"]
    assert held
    receipt = read_receipt(h.engine.path)
    assert receipt is not None and receipt.stable
    old_epoch = receipt.epoch
    write_receipt(h.engine.path, msgspec.structs.replace(receipt, state=ffmt.PENDING))

    assert code(call(tool, {**args, "cursor": held})) == "stale_cursor"
    fresh = call(tool, args)
    assert [i["seq"] for i in fresh["items"]] == [1, 2, 3, 4]
    nxt = call(tool, {**args, "cursor": fresh["cursor"]})
    assert code(nxt) == "" and [i["seq"] for i in nxt["items"]] == [5, 6, 7, 8]

    r = h.append(msg("tok next writer"))
    assert r.epoch != old_epoch
    new = read_receipt(h.engine.path)
    assert new is not None and new.stable and new.epoch == r.epoch
    # The stamps-bound cursor died with the re-baseline; a new query works.
    assert code(call(tool, {**args, "cursor": nxt["cursor"]})) == "stale_cursor"
    assert code(call(tool, args)) == ""


def test_untracked_edit_expires_cursors(tmp_path: Path) -> None:
    """Bytes appended to a segment behind the store's back (a readable row,
    no reset) change the stamps: open cursors are stale, a new query works."""
    from ledger.storage.files import segments as segs

    store = Store(tmp_path, durability="off", segment_bytes=1 << 20)
    h = store.history("ws")
    h.append_many([msg(f"tok {i}") for i in range(30)])
    tool = h.session_history()
    args = {"action": "search", "query": "tok", "limit": 4}
    held = call(tool, args)["cursor"]
    body = (b'{"seq":31,"id":"r_u","kind":"message","role":"user","parts":[{"type":"text",'
            b'"text":"tok untracked"}],"partial":false,"meta":{},"ts":1,'
            b'"batch":{"id":"b_u","n":1,"i":0}}')
    with open(segs.segment_path(h.engine.path, 1), "ab") as f:
        f.write(fmt.frame(body))
    assert code(call(tool, {**args, "cursor": held})) == "stale_cursor"
    fresh = call(tool, {**args, "limit": 25})
    got = [i["seq"] for i in fresh["items"]]
    got += [i["seq"] for i in call(tool, {**args, "limit": 25, "cursor": fresh["cursor"]})["items"]]
    assert got == list(range(1, 32))


# --- the wire form holds across releases --------------------------------------------

# The payloads of first-page cursors as the code before Position's first field
# was renamed (``segment`` -> ``part``) issued them, taken from its output for
# the history ``_wire_history`` writes; ``{kid}`` (the process) and ``{epoch}``
# (the store) differ per run. A Position is a JSON array, so names never reach it.
OLD_PAYLOADS = [
    ("memory", {"action": "search", "query": "tok", "limit": 3},
     '[1,"{kid}","ws","search","fa041473c82ddeb48548d181bd150eb3","m{epoch}","none",13,'
     '[14,0,false,0,-1,null],[3,291,false,0,-1,null],0,null]', [4, 5, 6]),
    ("memory", {"action": "list", "window": 0, "limit": 4},
     '[1,"{kid}","ws","list","f9902e023c37428567346f19fb1944b1","m{epoch}","none",13,'
     '[14,0,false,0,-1,null],[4,291,false,0,-1,null],0,null]', [5, 6, 7, 8]),
    ("memory", {"action": "read", "seq": 13, "limit": 1000},
     '[1,"{kid}","ws","read","0bc379e5fb2a8d4a05f8aa3e9894f090","m{epoch}","none",13,'
     '[14,0,false,0,-1,null],[13,0,false,1000,-1,null],0,null]', [13]),
    ("files", {"action": "search", "query": "tok", "limit": 3},
     '[1,"{kid}","ws","search","fa041473c82ddeb48548d181bd150eb3","e{epoch}.0","none",13,'
     '[2,3250,false,0,-1,null],[1,873,false,0,-1,null],0,null]', [4, 5, 6]),
    ("files", {"action": "list", "window": 0, "limit": 4},
     '[1,"{kid}","ws","list","f9902e023c37428567346f19fb1944b1","e{epoch}.0","none",13,'
     '[2,3250,false,0,-1,null],[1,1164,false,0,-1,null],0,null]', [5, 6, 7, 8]),
    ("files", {"action": "read", "seq": 13, "limit": 1000},
     '[1,"{kid}","ws","read","0bc379e5fb2a8d4a05f8aa3e9894f090","e{epoch}.0","none",13,'
     '[2,3250,false,0,-1,null],[2,0,false,1000,-1,null],0,null]', [13]),
]


def _wire_history(engine: str, tmp_path: Path) -> Any:
    store = (Store("memory://") if engine == "memory"
             else Store(tmp_path, durability="off", segment_bytes=512))
    h = store.history("ws")
    h.append_many([msg(f"tok {i} " + "x" * 40) for i in range(12)])
    h.append(msg("long " + "y" * 3000))
    return h


@pytest.mark.parametrize("engine,args,old,seqs", OLD_PAYLOADS)
def test_cursor_of_the_old_wire_form_decodes_and_pages_on(
    tmp_path: Path, engine: str, args: dict[str, Any], old: str, seqs: list[int]
) -> None:
    h = _wire_history(engine, tmp_path)
    tool = h.session_history()
    payload = old.replace("{kid}", cur.KEY_ID).replace("{epoch}", str(h.snapshot().epoch))
    data = msgspec.json.decode(payload.encode(), type=cur.CursorData)
    assert data.pos.part == json.loads(payload)[9][0]
    token = cur.issue(data)
    assert unb64(token.partition(".")[0]) == payload.encode()  # encoded back byte for byte
    first = call(tool, args)
    assert first["cursor"] == token  # the first page still issues exactly that cursor
    res = call(tool, {**args, "cursor": token})
    assert [i["seq"] for i in res["items"]] == seqs
    assert res["cursor"] is not None
    following = call(tool, {**args, "cursor": res["cursor"]})
    assert "error" not in following and following["items"]
