"""Ratios, goals, the results table and the optional plots of one run."""

from __future__ import annotations

import os
import platform
import subprocess
from typing import Any

from bench.measure import ratio
from bench.series import Config, Results

# ratio key -> (comparison, bound) from the benchmark issues (view, check and
# append over its system-call replica: issue 31's table).
GOALS: dict[str, tuple[str, float]] = {
    "append_p50_big_over_empty": ("<=", 1.3),
    "append_p50_over_rename_floor": ("<=", 1.5),
    "rewrite_baseline_over_ledger_200mib": (">=", 100),
    "view_big_over_view_empty": ("<=", 1.3),
    "view_over_read_decode_floor": ("<=", 1.8),
    "turn_big_over_turn_empty": ("<=", 1.3),
    "turn_many_segments_over_few": ("<=", 1.3),
    "search_over_scan_floor": ("<=", 1.5),
    "count_over_raw_tiktoken": ("<=", 1.15),
    "check_over_decode_floor": ("<=", 1.2),
    "rss_growth_mib_scan_big": ("<=", 64),
    "append_p50_over_syscall_replica": ("<=", 1.4),
}

RATIO_KEYS = (
    "append_p50_big_over_empty",
    "append_p50_over_rename_floor",
    "rewrite_baseline_over_ledger_200mib",
    "view_big_over_view_empty",
    "view_over_read_decode_floor",
    "view_over_read_decode_kept_floor",
    "turn_big_over_turn_empty",
    "turn_many_segments_over_few",
    "search_over_scan_floor",
    "search_over_raw_find",
    "count_over_raw_tiktoken",
    "check_over_decode_floor",
    "append_p50_over_sqlite_wal_full",
    "turn_sqlite_over_ledger_big",
    "rss_growth_mib_scan_big",
)


def _p50(res: Results, series: str, size: int, name: str) -> float | None:
    s = res.get(series, size, name)
    return s.p50 if s is not None else None


def _best(res: Results, series: str, size: int, name: str) -> float | None:
    """Best of the interleaved runs: for the long CPU-bound scans (search,
    check), of which a run takes only a few samples, and where load from other
    processes only ever adds time."""
    s = res.get(series, size, name)
    return s.best if s is not None else None


def compute_ratios(cfg: Config, res: Results) -> tuple[dict[str, Any], dict[str, str]]:
    """The ``ratios`` object and, for each null one, the reason."""
    big = max(cfg.sizes_mib)
    r: dict[str, Any] = {}
    why: dict[str, str] = {}

    def put(key: str, value: float | None, reason: str) -> None:
        r[key] = value
        if value is None:
            why[key] = reason

    p = _p50
    put("append_p50_big_over_empty",
        ratio(p(res, "append", big, "ledger"), p(res, "append", big, "ledger_empty")),
        "not measured")
    put("append_p50_over_rename_floor",
        ratio(p(res, "append", big, "ledger"), p(res, "append", big, "rename_floor")),
        "not measured")
    at = cfg.rewrite_max_mib if cfg.rewrite_max_mib in cfg.sizes_mib else None
    put("rewrite_baseline_over_ledger_200mib",
        ratio(p(res, "append", at, "rewrite"), p(res, "append", at, "ledger"), 1)
        if at is not None else None, f"no {cfg.rewrite_max_mib} MiB point in this mode")
    put("view_big_over_view_empty",
        ratio(p(res, "view", big, "ledger"), p(res, "view", big, "ledger_empty")),
        "not measured")
    put("view_over_read_decode_floor",
        ratio(p(res, "view", big, "ledger"), p(res, "view", big, "read_decode_floor")),
        "not measured")
    # Beside the issue's: the view over a floor that keeps its decoded rows
    # as the view must (measured after the series, apart from it).
    put("view_over_read_decode_kept_floor",
        ratio(p(res, "view_kept", big, "ledger"),
              p(res, "view_kept", big, "read_decode_kept_floor")),
        "not measured")
    put("turn_big_over_turn_empty",
        ratio(p(res, "turn", big, "ledger"), p(res, "turn", big, "ledger_empty")),
        "not measured")
    put("turn_many_segments_over_few",
        ratio(p(res, "segments", cfg.segments_mib, "many"),
              p(res, "segments", cfg.segments_mib, "few")), "not measured")
    no_tool = "ledger.transcript.retrieval not importable when the run started"
    b = _best
    put("search_over_scan_floor",
        ratio(b(res, "search", big, "ledger"), b(res, "search", big, "scan_floor")), no_tool)
    put("search_over_raw_find",
        ratio(b(res, "search", big, "ledger"), b(res, "search", big, "raw_find"), 1), no_tool)
    tb = res.extra.get("tokens_bench")
    put("count_over_raw_tiktoken",
        tb.get("count_over_raw_tiktoken") if tb else
        ratio(p(res, "count", 0, "ledger"), p(res, "count", 0, "tiktoken_raw")),
        "ledger.tokens.counting not importable when the run started")
    put("check_over_decode_floor",
        ratio(b(res, "check", big, "ledger"), b(res, "check", big, "decode_floor")),
        "recovery.check not importable when the run started")
    put("append_p50_over_sqlite_wal_full",
        ratio(p(res, "append", big, "ledger"), p(res, "append", big, "sqlite_wal_full")),
        "not measured")
    put("turn_sqlite_over_ledger_big",
        ratio(p(res, "turn", big, "sqlite_wal_full"), p(res, "turn", big, "ledger"), 1),
        "not measured")
    rss = res.extra.get("rss_scan")
    put("rss_growth_mib_scan_big", rss["growth_mib"] if rss else None, "not measured")
    # Beyond the list: how the append's cost splits between the
    # rename design's own system calls and the Python around them.
    put("syscall_replica_over_rename_floor",
        ratio(p(res, "append", big, "syscall_replica"), p(res, "append", big, "rename_floor")),
        "not measured")
    put("append_p50_over_syscall_replica",
        ratio(p(res, "append", big, "ledger"), p(res, "append", big, "syscall_replica")),
        "not measured")
    # Beyond the list: what a history grown by append alone would show.
    grown = max(cfg.grown_sizes_mib) if cfg.grown_sizes_mib else None
    if grown is not None:
        put("append_p50_grown_by_append_big_over_empty",
            ratio(p(res, "append_grown_by_append", grown, "ledger"),
                  p(res, "append_grown_by_append", grown, "ledger_empty")), "not measured")
        put("append_p50_grown_by_append_over_rename_floor",
            ratio(p(res, "append_grown_by_append", grown, "ledger"),
                  p(res, "append_grown_by_append", grown, "rename_floor")), "not measured")
    s = res.get("tool_call", big, "ledger")
    put("tool_call_p99_ms_big", round(s.p99 * 1e3, 3) if s is not None and s.p99 else None,
        "fewer than 100 calls or no retrieval tool")
    return r, why


def goal_status(ratios: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out = {}
    for key, (op, bound) in GOALS.items():
        v = ratios.get(key)
        met = None if v is None else (v <= bound if op == "<=" else v >= bound)
        out[key] = {"goal": f"{op} {bound:g}", "measured": v, "met": met}
    return out


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cores": os.cpu_count(),
    }
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as f:
            info["ram_gib"] = round(int(f.readline().split()[1]) / (1 << 20), 1)
    except OSError:
        pass
    return info


def filesystem_of(path: str) -> str | None:
    best: tuple[str, str | None] = ("", None)
    try:
        with open("/proc/mounts") as f:
            for line in f:
                dev, mnt, fstype, opts = line.split()[:4]
                if path.startswith(mnt) and len(mnt) >= len(best[0]):
                    best = (mnt, f"{fstype} on {dev} ({opts})")
    except OSError:
        return None
    return best[1]


def git_commit(repo: str) -> str | None:
    try:
        head = subprocess.run(["git", "-C", repo, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", repo, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")


# --- table ------------------------------------------------------------------------

SERIES_COLUMNS = {
    "append": ("ledger", "ledger_empty", "rename_floor", "syscall_replica", "sqlite_wal_full",
               "jsonl_append", "rewrite"),
    "append_grown_by_append": ("ledger", "ledger_empty", "rename_floor"),
    "view": ("ledger", "ledger_empty", "read_decode_floor"),
    "view_kept": ("ledger", "read_decode_kept_floor"),
    "turn": ("ledger", "ledger_empty", "sqlite_wal_full", "ledger_first_turn"),
    "search": ("ledger", "scan_floor", "raw_find"),
    "tool_call": ("ledger",),
    "check": ("ledger", "decode_floor"),
    "count": ("ledger", "tiktoken_raw"),
}


def _fmt(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        if v >= 100:
            return f"{v:,.0f}"
        if v >= 10:
            return f"{v:.1f}"
        return f"{v:.2f}" if v >= 1 else f"{v:.3f}"
    return str(v)


def markdown_table(doc: dict[str, Any]) -> str:
    lines = ["| ratio | goal | measured | met |", "|---|---|---|---|"]
    goals = doc["goals"]
    for key, value in doc["ratios"].items():
        g = goals.get(key)
        met = "—" if g is None or g["met"] is None else ("yes" if g["met"] else "**no**")
        lines.append(f"| `{key}` | {g['goal'] if g else ''} | {_fmt(value)} | {met} |")
    out = ["\n".join(lines)]
    for series, cols in SERIES_COLUMNS.items():
        recs = doc["series"].get(series)
        if not recs:
            continue
        present = [c for c in cols if any(c in r for r in recs)]
        head = ["history"] + [f"{c} p50 ms" for c in present]
        if series in ("append", "tool_call", "append_grown_by_append"):
            head += [f"{c} p99 ms" for c in present if c in ("ledger",)]
        rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in recs:
            size = "—" if series == "count" else f"{r['size_mib']} MiB"
            cells = [size] + [_fmt(r[c]["p50_ms"]) if c in r else "—" for c in present]
            if series in ("append", "tool_call", "append_grown_by_append"):
                cells += [_fmt(r["ledger"]["p99_ms"])]
            rows.append("| " + " | ".join(cells) + " |")
        out.append(f"**{series}**\n\n" + "\n".join(rows))
    tb = doc.get("tokens_bench")
    if tb:
        c, rb = tb.get("count", {}), tb.get("rebudget", {})
        out.append(
            "**count** (bench/tokens_bench.py, best of interleaved runs)\n\n"
            "| text | ledger ms | tiktoken ms | ratio (best) | ratio (median) | tokens equal | "
            "re-budget warm/cold |\n|---|---|---|---|---|---|---|\n"
            f"| {c.get('text_chars', 0):,} chars | {_fmt(_s_ms(c.get('ledger_s')))} | "
            f"{_fmt(_s_ms(c.get('tiktoken_s')))} | {_fmt(c.get('count_over_raw_tiktoken'))} | "
            f"{_fmt(c.get('median_ratio', c.get('wall_median_ratio')))} | {c.get('equal')} | "
            f"{_fmt(rb.get('warm_ms'))} / {_fmt(rb.get('cold_ms'))} ms |"
        )
        err = tb.get("request_count_error")
        if err and "body" in err:
            out.append(
                "**request count error** against the cookbook count of the exact Chat "
                f"Completions body ({err['windows']} windows of {err['window_rows']} rows)\n\n"
                "| counting | median | worst |\n|---|---|---|\n"
                f"| whole body, published rules | {err['body']['median']:+.2%} | "
                f"{err['body']['worst']:+.2%} |\n"
                f"| per-row adapter JSON (before) | {err['per_row_json']['median']:+.2%} | "
                f"{err['per_row_json']['worst']:+.2%} |"
            )
    return "\n\n".join(out) + "\n"


def _s_ms(v: float | None) -> float | None:
    return None if v is None else v * 1e3


def plots(doc: dict[str, Any], directory: str) -> list[str]:
    """PNG per series (p50 against history size); empty when matplotlib is
    not installed (``pip install -e '.[bench]'``)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    os.makedirs(directory, exist_ok=True)
    written = []
    for series, cols in SERIES_COLUMNS.items():
        recs = [r for r in doc["series"].get(series, []) if "size_mib" in r]
        if series == "count" or len(recs) < 2:
            continue
        fig, ax = plt.subplots(figsize=(6, 4))
        for c in cols:
            pts = [(max(r["size_mib"], 0.25), r[c]["p50_ms"]) for r in recs
                   if c in r and r[c]["p50_ms"]]
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", label=c)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("history before the operation (MiB; 0 plotted at 1/4)")
        ax.set_ylabel("p50 (ms)")
        ax.set_title(series)
        ax.legend()
        fig.tight_layout()
        path = os.path.join(directory, f"{series}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
