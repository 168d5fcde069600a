"""``tledger demo``: the embedded default, end to end, in a few seconds.

It creates a store, appends a small conversation, starts a second writer
process appending 3-row batches, SIGKILLs it mid-stream, reopens the history
and checks that what survived is a gap-free prefix of whole batches holding
every acknowledged one; then it clears, rolls over, shows the provider view
and runs a ``session_history`` search that cannot see past the privacy floor.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, TextIO

from ledger.core.errors import LedgerError
from ledger.core.redact import redact
from ledger.transcript.store import Store

KILL_AFTER_ACKS = 25  # acknowledged batches before the demo's SIGKILL


def _text(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "text": text}]}


def writer_main(root: str, workspace: str) -> None:
    """Append 3-row batches forever, printing each acknowledged batch."""
    h = Store(root, durability="off").history(workspace)
    n = 0
    while True:
        n += 1
        rows = [
            _text("user", f"step {n}: run the tests"),
            {"role": "assistant", "parts": [
                {"type": "tool_call", "id": f"call-{n}", "name": "pytest", "input": {"k": n}}
            ]},
            {"role": "tool", "parts": [{"type": "tool_result", "id": f"call-{n}", "output": "ok"}]},
        ]
        r = h.append_many(rows)
        sys.stdout.write(json.dumps(r.seqs) + "\n")
        sys.stdout.flush()


def run_demo(directory: str | None, out: TextIO) -> int:
    root = directory or tempfile.mkdtemp(prefix="tledger-demo-")
    say = out.write
    store = Store(root)
    h = store.history("demo")
    if h.exists():
        raise LedgerError(
            f"{redact(root)} already holds a workspace 'demo'; run the demo on a new root "
            "(tledger --root NEW_DIR demo) or delete it (tledger delete demo)"
        )
    say(f"store root: {redact(root)}\n\n")

    r = h.append_many([
        _text("user", "My API key is sk-PRIVATE. Please debug the parser."),
        _text("assistant", "I will look at the parser."),
    ])
    say(f"1. appended a batch: seqs {r.seqs}, epoch {r.epoch}, window {r.window}\n")
    cleared = h.clear_soft()
    say(f"2. /clear --soft: manual reset at seq {cleared.seqs[0]} -- the privacy floor\n")
    h.append_many([
        _text("user", "Let's work on the tokenizer instead; the flaky test is test_bpe."),
        _text("assistant", "The flaky test test_bpe fails on a NUL byte."),
    ])

    say("3. starting a second writer process appending 3-row batches ...\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", __spec__.name if __spec__ else __name__, "--writer", root, "demo"],
        stdout=subprocess.PIPE,
        text=True,
    )
    # Kill it mid-stream: once it has acknowledged some batches (however slow
    # this machine starts a Python process), it is busy writing the next one.
    assert proc.stdout is not None
    acked: list[list[int]] = []
    deadline = time.monotonic() + 30
    while len(acked) < KILL_AFTER_ACKS and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break  # the writer died on its own; its output says why
        acked.append(json.loads(line))
    os.kill(proc.pid, signal.SIGKILL)
    acked_out, _ = proc.communicate()
    acked += [json.loads(line) for line in acked_out.splitlines() if line.strip()]
    say(f"   SIGKILLed it after {len(acked)} acknowledged batches\n")

    seqs: list[int] = []
    batches: dict[str, list[int]] = {}
    for row in h.rows():
        d = row.to_dict()
        seqs.append(d["seq"])
        batches.setdefault(d["batch"]["id"], []).append(d["batch"]["i"])
    whole = all(sorted(v) == list(range(len(v))) for v in batches.values())
    gap_free = seqs == list(range(1, len(seqs) + 1))
    present = set(seqs)
    all_acked = all(s in present for batch in acked for s in batch)
    say(
        f"4. reopened: {len(seqs)} rows in {len(batches)} batches; whole batches: {whole}; "
        f"gap-free: {gap_free}; every acknowledged batch present: {all_acked}\n"
    )
    r = h.append(_text("user", "Still there after the crash?"))
    say(f"   the next append works: seq {r.seqs[0]}, epoch {r.epoch}\n")

    r = h.rollover([_text("user", "Token budget reached -- continue with the tokenizer.")])
    say(f"5. automatic rollover: one batch {r.seqs}, new window {r.window}\n")
    view = h.provider_view()
    say("6. the provider view (what the model sees now):\n")
    for row in view:
        d = row.to_dict()
        text = " ".join(p.get("text", "") for p in d["parts"] if p.get("type") == "text")
        say(f"   [{d['seq']}] {d['kind']}/{d['role']}: {text[:100]}\n")

    tool = h.session_history()
    found = json.loads(tool.call({"action": "search", "query": "test_bpe"}))
    hidden = json.loads(tool.call({"action": "search", "query": "sk-PRIVATE"}))
    windows: list[dict[str, Any]] = []
    page = json.loads(tool.call({"action": "list"}))
    while True:  # each page examines at most 500 rows; follow the cursor
        windows.extend(page["items"])
        if page["cursor"] is None:
            break
        page = json.loads(tool.call({"action": "list", "cursor": page["cursor"]}))
    say("7. session_history:\n")
    say(f"   list -> {[(w['window'], w['reason'], w['rows']) for w in windows]}\n")
    say(f"   search 'test_bpe' -> seqs {[i['seq'] for i in found['items']]}\n")
    say(f"   search 'sk-PRIVATE' (before the floor) -> {len(hidden['items'])} results\n")
    ok = (bool(acked) and whole and gap_free and all_acked and not hidden["items"]
          and bool(found["items"]))
    say(f"\n{'OK' if ok else 'FAILED'}: try `tledger --root {redact(root)} rows demo`\n")
    return 0 if ok else 1


if __name__ == "__main__":  # pragma: no cover - the demo's writer process
    if len(sys.argv) == 4 and sys.argv[1] == "--writer":
        writer_main(sys.argv[2], sys.argv[3])
