"""Writer processes for the crash and concurrency tests (run as a script).

Modes:

``zygote``
    Imports the store once, then serves JSON requests on stdin, one a line:
    ``{"spawn": {...}}`` forks a writer child and answers with its pid;
    ``{"wait": pid}`` reaps that child and answers with its wait status. The
    child appends 3-row batches forever and records each acknowledged batch
    as ``<batch id> <seq> <seq> <seq>`` in its ack file (one ``os.write`` of a
    whole line to an ``O_APPEND`` file, so a SIGKILL cannot tear it and the
    page cache keeps it). Forking from a warm process keeps the spawn cost of
    each of the hundreds of killed writers near a millisecond.
``spawn ROOT WS DURABILITY SEGMENT_BYTES ACK SEED``
    The same writer loop in a freshly started interpreter.
``threads ROOT WS THREADS BATCHES GO_FILE SEED``
    Prints ``ready``, waits for GO_FILE, then THREADS threads append BATCHES
    batches of 1-4 rows each; prints one ack line per batch, exit 0 (1 with a
    traceback on any error).
``resilient ROOT WS ACK SEED N``
    Appends N 3-row batches; a batch that fails with CommitFailed, a
    CommitUncertain or Unavailable (a server restarting; opening the store
    too) is retried with the same batch id until it commits; acks like ``spawn``. Exit 0 when done.
``roam ROOT PREFIX NWS ACK SEED N GO_FILE STOP_FILE``
    Prints ``ready``, waits for GO_FILE, then appends batches of 1-4 rows,
    each to one of the workspaces PREFIX-0 .. PREFIX-(NWS-1) at random, until
    N batches are acknowledged (N = 0: no limit) or STOP_FILE exists. Batch
    ids are ``<workspace>:<seed>-<k>``; a batch that fails with CommitFailed,
    CommitUncertain or Unavailable is retried with its batch id until it
    commits; acks like ``spawn``. At the end ``ACK.stats`` holds the count of
    each failure seen, as JSON. Exit 0 when done.
``append1 ROOT WS``
    One tracked append of one row; prints ``{"seqs":..., "epoch":..., "window":...}``.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
import traceback
from typing import Any

from ledger.transcript.store import Store

_WORDS = ["alpha", "beta", "ünïcode", "\u2028", "emoji \U0001f600", "quote \"", "tab\t", "x" * 40]


def _row(rnd: random.Random, tag: str) -> dict[str, Any]:
    text = tag + " " + " ".join(rnd.choice(_WORDS) for _ in range(rnd.randrange(0, 12)))
    return {"kind": "message", "role": rnd.choice(["user", "assistant"]),
            "parts": [{"type": "text", "text": text}]}


def writer_loop(root: str, ws: str, durability: str, segment_bytes: int, ack: str,
                seed: int) -> None:
    """Append 3-row batches forever (a rollover now and then, also 3 rows)."""
    rnd = random.Random(seed)
    h = Store(root, durability=durability, segment_bytes=segment_bytes).history(ws)
    fd = os.open(ack, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    k = 0
    while True:
        k += 1
        bid = f"s{seed}-{k}"
        if rnd.random() < 0.1:
            r = h.rollover([_row(rnd, bid)], batch_id=bid)
        else:
            r = h.append_many([_row(rnd, bid) for _ in range(3)], batch_id=bid)
        os.write(fd, (bid + " " + " ".join(map(str, r.seqs)) + "\n").encode())


def zygote() -> int:
    try:  # warm: a forked writer for a postgresql:// root connects at once
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError:
        pass
    for line in sys.stdin:
        req = json.loads(line)
        if "spawn" in req:
            a = req["spawn"]
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    writer_loop(a["root"], a["ws"], a["durability"], a["segment_bytes"],
                                a["ack"], a["seed"])
                except BaseException:
                    traceback.print_exc()
                    code = 3
                os._exit(code)
            print(pid, flush=True)
        elif "wait" in req:
            _, status = os.waitpid(req["wait"], 0)
            print(status, flush=True)
    return 0


def threads(root: str, ws: str, nthreads: int, nbatches: int, go: str, seed: int) -> int:
    store = Store(root, durability="off", segment_bytes=2048, lock_timeout=60)
    shared = store.history(ws)
    acks: list[str] = []
    errors: list[str] = []
    guard = threading.Lock()

    def work(t: int) -> None:
        rnd = random.Random(seed * 100 + t)
        # Half the threads share one History object, half have their own Store.
        h = shared if t % 2 == 0 else Store(root, durability="off", segment_bytes=2048,
                                            lock_timeout=60).history(ws)
        try:
            for k in range(nbatches):
                bid = f"p{seed}-t{t}-{k}"
                n = rnd.randrange(1, 5)
                r = h.append_many([_row(rnd, bid) for _ in range(n)], batch_id=bid)
                with guard:
                    acks.append(bid + " " + " ".join(map(str, r.seqs)))
        except BaseException:
            with guard:
                errors.append(traceback.format_exc())

    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.001)
    pool = [threading.Thread(target=work, args=(t,)) for t in range(nthreads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    for a in acks:
        print(a)
    if errors:
        sys.stderr.write("\n".join(errors))
        return 1
    return 0


def resilient(root: str, ws: str, ack: str, seed: int, n: int) -> int:
    from ledger.core.errors import CommitFailed, CommitUncertain, Unavailable

    rnd = random.Random(seed)
    fd = os.open(ack, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    h = None  # opened in the loop: a server restarting may refuse the first connection
    deadline = time.monotonic() + 120
    for k in range(n):
        bid = f"r{seed}-{k}"
        rows = [_row(rnd, bid) for _ in range(3)]
        while True:
            try:
                if h is None:
                    h = Store(root, durability="full", lock_timeout=60).history(ws)
                r = h.append_many(rows, batch_id=bid)
                break
            except (CommitFailed, CommitUncertain, Unavailable):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        os.write(fd, (bid + " " + " ".join(map(str, r.seqs)) + "\n").encode())
    return 0


def roam(root: str, prefix: str, nws: int, ack: str, seed: int, n: int, go: str,
         stop: str) -> int:
    from ledger.core.errors import CommitFailed, CommitUncertain, Unavailable

    rnd = random.Random(seed)
    store = Store(root, durability="full", lock_timeout=60)
    fd = os.open(ack, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    seen = {"CommitFailed": 0, "CommitUncertain": 0, "Unavailable": 0}
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.001)
    k = 0
    while (n == 0 or k < n) and not os.path.exists(stop):
        k += 1
        ws = f"{prefix}-{rnd.randrange(nws)}"
        bid = f"{ws}:{seed}-{k}"
        rows = [_row(rnd, bid) for _ in range(rnd.randrange(1, 5))]
        h = store.history(ws)
        deadline = time.monotonic() + 120
        while True:
            try:
                r = h.append_many(rows, batch_id=bid)
                break
            except (CommitFailed, CommitUncertain, Unavailable) as exc:
                seen[type(exc).__name__] += 1
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        os.write(fd, (bid + " " + " ".join(map(str, r.seqs)) + "\n").encode())
    with open(ack + ".stats", "w") as f:
        json.dump(seen, f)
    return 0


def main(argv: list[str]) -> int:
    mode = argv[0]
    if mode == "zygote":
        return zygote()
    if mode == "spawn":
        root, ws, durability, seg, ack, seed = argv[1:]
        writer_loop(root, ws, durability, int(seg), ack, int(seed))
        return 0
    if mode == "threads":
        root, ws, n, b, go, seed = argv[1:]
        return threads(root, ws, int(n), int(b), go, int(seed))
    if mode == "resilient":
        root, ws, ack, seed, n = argv[1:]
        return resilient(root, ws, ack, int(seed), int(n))
    if mode == "roam":
        root, prefix, nws, ack, seed, n, go, stop = argv[1:]
        return roam(root, prefix, int(nws), ack, int(seed), int(n), go, stop)
    if mode == "append1":
        root, ws = argv[1:]
        r = Store(root, durability="off").history(ws).append(
            {"kind": "message", "role": "user", "parts": [{"type": "text", "text": "other"}]}
        )
        print(json.dumps({"seqs": r.seqs, "epoch": r.epoch, "window": r.window}))
        return 0
    raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
