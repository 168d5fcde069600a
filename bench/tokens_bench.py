"""Token accounting benchmarks: ``run(quick) -> dict`` of measured numbers.

Three measurements, each a side-by-side comparison in one run:

``count_over_raw_tiktoken``
    ``TokenCounter("gpt-4o").text(text)`` over ``len(enc.encode_ordinary(text))``
    on the corpus text (real transcripts when present): best thread-CPU time of
    interleaved runs (best and median wall-clock ratios are reported too).
    Target: <= 1.15. The two counts must be equal.
``rebudget``
    Counting a 500-row active window with an empty row cache (cold), then the
    same window plus one appended row with the cache warm. Target: warm <= 5% of
    cold.
``pathological``
    1, 2, 4 and 6 MB strings without whitespace: one letter repeated (a single
    pre-tokenizer piece, force-cut), base64 (short pieces, exact) and random
    non-space unicode. Seconds per size and seconds per MB; linear time shows as
    a flat seconds-per-MB column. Raw tiktoken is timed beside the one-letter
    run at 1 and 2 MB, where it is already superlinear.

``request_count_error``
    The guards' count of a request (``check_request("gpt-4o", ...)``: a system
    prompt, the rows, ``bash`` and ``session_history``) against the reference
    count of the exact Chat Completions body (OpenAI's cookbook rules with the
    real tiktoken encoding, ``tests/helpers/cookbook.py``), over consecutive
    40-row windows of the corpus: median and worst relative error, for the
    body counting the guards use and for the per-row adapter-JSON estimate
    they used before (issue 29). Windows holding media are counted apart (the
    reference leaves media out; the count adds its allowance).

Run alone: ``python -m bench.tokens_bench [--quick]`` prints the JSON.
"""

from __future__ import annotations

import base64
import gc
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from ledger.tokens.counting import RowTokenCache, TokenCounter
from ledger.tokens.encodings import get_encoding

MB = 1_000_000


def _time(fn: Callable[[], Any], clock: Callable[[], float] = time.perf_counter) -> float:
    t0 = clock()
    fn()
    return clock() - t0


def _interleaved(
    contenders: dict[str, Callable[[], Any]], runs: int
) -> dict[str, tuple[list[float], list[float]]]:
    """Wall and thread-CPU seconds of each contender, rounds in rotating order."""
    times: dict[str, tuple[list[float], list[float]]] = {n: ([], []) for n in contenders}
    names = list(contenders)
    gc.collect()
    for r in range(runs):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            w0, c0 = time.perf_counter(), time.thread_time()
            contenders[name]()
            times[name][0].append(time.perf_counter() - w0)
            times[name][1].append(time.thread_time() - c0)
    return times


def _corpus() -> tuple[str, list[dict[str, Any]], str]:
    from bench.corpus import load_corpus

    corpus = load_corpus()
    return corpus.text, corpus.window_rows(501, seed=5), corpus.source


def _all_rows() -> list[dict[str, Any]]:
    from bench.corpus import load_corpus

    return load_corpus().rows


def count_ratio(text: str, runs: int) -> dict[str, Any]:
    counter = TokenCounter("gpt-4o", cache=None)
    enc = get_encoding(counter.spec.encoding)
    ours = counter.text(text)
    raw = len(enc.encode_ordinary(text))
    times = _interleaved(
        {"ledger": lambda: counter.text(text), "tiktoken": lambda: enc.encode_ordinary(text)},
        runs,
    )
    # Best of interleaved runs (as timeit advises): load from other processes
    # only ever adds time, and it would not hit both sides equally. tiktoken
    # encodes in the calling thread, so thread CPU time measures the same work
    # with even less noise; it is the headline number.
    (ours_wall, ours_cpu), (raw_wall, raw_cpu) = times["ledger"], times["tiktoken"]
    ledger_s = min(ours_wall)
    raw_s = min(raw_wall)
    return {
        "text_chars": len(text),
        "tokens_ledger": ours.tokens,
        "tokens_tiktoken": raw,
        "equal": ours.tokens == raw,
        "exact": ours.exact,
        "ledger_s": round(ledger_s, 5),
        "tiktoken_s": round(raw_s, 5),
        "count_over_raw_tiktoken": round(min(ours_cpu) / min(raw_cpu), 3),
        "wall_min_ratio": round(ledger_s / raw_s, 3),
        "wall_median_ratio": round(statistics.median(ours_wall) / statistics.median(raw_wall), 3),
    }


def rebudget(rows: list[dict[str, Any]], runs: int) -> dict[str, Any]:
    window, new_row = rows[:500], rows[500]
    colds: list[float] = []
    warms: list[float] = []
    tokens = 0
    grown = [*window, new_row]
    for _ in range(runs):
        counter = TokenCounter("gpt-4o", cache=RowTokenCache())
        # Functions, not lambdas binding by defaults (python/mypy#15459).
        def count_window(c: TokenCounter = counter) -> Any:
            return c.rows(window)

        def count_grown(c: TokenCounter = counter) -> Any:
            return c.rows(grown)

        colds.append(_time(count_window))
        warms.append(_time(count_grown))
        tokens = counter.rows(grown).tokens
    cold = min(colds)
    warm = min(warms)
    return {
        "rows": len(window),
        "tokens": tokens,
        "cold_ms": round(cold * 1000, 3),
        "warm_ms": round(warm * 1000, 3),
        "warm_over_cold": round(warm / cold, 4),
    }


def _pathological(kind: str, size: int, rnd: random.Random) -> str:
    if kind == "one-letter":
        return "a" * size
    if kind == "base64":
        return base64.b64encode(rnd.randbytes(size * 3 // 4))[:size].decode()
    # random non-space code points: Latin, CJK, emoji, marks
    ranges = [(0x21, 0x7E), (0xA1, 0x2FF), (0x300, 0x36F), (0x4E00, 0x9FFF), (0x1F300, 0x1F64F)]
    text = "".join(chr(rnd.randint(*rnd.choice(ranges))) for _ in range(size // 2))
    return text.encode("utf-8")[:size].decode("utf-8", "ignore")


def pathological(sizes_mb: tuple[int, ...], runs: int, raw_up_to_mb: int) -> dict[str, Any]:
    counter = TokenCounter("gpt-4o", cache=None)
    enc = get_encoding(counter.spec.encoding)
    rnd = random.Random(11)
    out: dict[str, Any] = {}
    for kind in ("one-letter", "base64", "unicode"):
        rows = []
        for mb in sizes_mb:
            text = _pathological(kind, mb * MB, rnd)
            counted = counter.text(text)
            def count(t: str = text) -> Any:  # not a lambda: python/mypy#15459
                return counter.text(t)

            def encode(t: str = text) -> Any:
                return enc.encode_ordinary(t)

            seconds = min(_time(count) for _ in range(runs))
            row: dict[str, Any] = {
                "mb": mb,
                "seconds": round(seconds, 3),
                "s_per_mb": round(seconds / mb, 3),
                "tokens": counted.tokens,
                "exact": counted.exact,
            }
            if kind == "one-letter" and mb <= raw_up_to_mb:
                row["tiktoken_raw_seconds"] = round(_time(encode), 3)
            rows.append(row)
        first, last = rows[0], rows[-1]
        out[kind] = {
            "sizes": rows,
            # 1.0 is perfectly linear; 6.0 would be quadratic from 1 to 6 MB
            "slope_ratio": round(last["s_per_mb"] / max(first["s_per_mb"], 1e-9), 2),
        }
    return out


def request_count_error(rows: list[dict[str, Any]], window: int = 40) -> dict[str, Any]:
    from ledger.adapters import to_request
    from ledger.rollover.guards import check_request
    from ledger.rollover.request import tool_schema
    from ledger.tokens.shapes import AdapterShape
    from ledger.transcript.retrieval.args import DESCRIPTION, PARAMETERS
    from tests.helpers.cookbook import chat_body_tokens

    system = "You are a coding agent."
    tools = [tool_schema("bash", "Run a shell command and return its output.",
                         {"type": "object", "properties": {"cmd": {
                             "type": "string", "description": "the command line"}}}),
             tool_schema("session_history", DESCRIPTION, PARAMETERS)]
    chat_tools = [{"type": "function", "function": t} for t in tools]
    head = [{"role": "system", "parts": [{"type": "text", "text": system}]}]
    errors: dict[str, list[float]] = {"body": [], "per_row_json": []}
    media = exact = 0
    for start in range(0, len(rows) - window + 1, window):
        chunk = [{k: v for k, v in r.items() if k != "meta"} for r in rows[start:start + window]]
        reference = chat_body_tokens(to_request("openai-chat", [*head, *chunk],
                                                tools=chat_tools))
        body = check_request("gpt-4o", rows=chunk, system=system, tools=tools,
                             context_limit=10**9, cache=None)
        if any(p.get("type") == "media" for r in chunk for p in r.get("parts", ())):
            media += 1
            continue
        old = check_request("gpt-4o", rows=chunk, system=system, tools=tools,
                            context_limit=10**9, cache=None,
                            shape=AdapterShape("openai-chat"))
        exact += body.exact
        errors["body"].append(body.tokens / reference - 1)
        errors["per_row_json"].append(old.tokens / reference - 1)
    out: dict[str, Any] = {"windows": len(errors["body"]), "window_rows": window,
                           "exact_windows": exact, "media_windows_left_out": media}
    for name, found in errors.items():
        if found:
            worst = max(found, key=abs)
            out[name] = {"median": round(statistics.median(found), 4), "worst": round(worst, 4)}
    return out


def run(quick: bool = False) -> dict[str, Any]:
    """Every token benchmark; ``quick`` takes fewer samples (same sizes)."""
    text, rows, source = _corpus()
    counted = count_ratio(text, runs=9 if quick else 25)
    return {
        "source": source,
        "count_over_raw_tiktoken": counted["count_over_raw_tiktoken"],
        "count": counted,
        "rebudget": rebudget(rows, runs=3 if quick else 9),
        "request_count_error": request_count_error(_all_rows()),
        "pathological": pathological(
            (1, 2, 4, 6), runs=1 if quick else 3, raw_up_to_mb=0 if quick else 2
        ),
    }


if __name__ == "__main__":  # pragma: no cover
    json.dump(run("--quick" in sys.argv), sys.stdout, indent=2)
    sys.stdout.write("\n")
