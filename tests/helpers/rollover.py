"""Shared fakes for the rollover tests.

``FakeHistory`` implements the history protocol the rollover engine uses
(``window``, ``provider_view``, ``rollover``, ``append_many``) in memory, with
the real ``ledger.core.windows.provider_rows`` for the provider view, and with
fault injection around the append. ``Runtime`` bundles the explicit runtime
parts (builder, registry, memory, cleanup callbacks, tracker) and records
every call in one event log, so tests can assert order.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from ledger.admission import MiddlewareRegistry, Registration
from ledger.core.errors import CommitFailed, CommitUncertain, Conflict, WindowChanged
from ledger.core.windows import provider_rows
from ledger.policy import ToolPolicy, ToolRule
from ledger.rollover.engine import (
    BudgetConfig,
    MemoryContext,
    ProviderRequest,
    RequestParts,
    RolloverHooks,
    RolloverParts,
    assemble,
)
from tests.helpers import msg

CONFIG = BudgetConfig(
    context_limit=1000, warn_fraction=0.6, rollover_fraction=0.8, hard_ceiling=900
)
TOOLS: dict[str, dict[str, Any]] = {
    "session_history": {"name": "session_history", "description": "look back"},
    "bash": {"name": "bash", "description": "run"},
    "file_edit": {"name": "file_edit", "description": "edit"},
}
ALL = ToolPolicy([ToolRule.enable_matching(".*")])
NO_HISTORY = ToolPolicy([ToolRule.enable_matching(".*")], [ToolRule.disable("session_history")])


def text_tokens(text: str) -> int:
    """The test tokenizer: one token per code point."""
    return len(text)


def count(request: ProviderRequest) -> tuple[int, bool]:
    """Deterministic request counter: text code points + schema bytes + framing."""
    total = len(request.system) + len(request.memory)
    for schema in request.tools:
        total += len(msgspec.json.encode(schema))
    for message in request.messages:
        total += 2
        for part in message.get("parts", []):
            if part.get("type") in ("text", "reasoning"):
                total += len(part.get("text", ""))
            elif part.get("type") == "tool_call":
                total += len(msgspec.json.encode(part.get("input", {}))) + len(part["name"])
            elif part.get("type") == "tool_result":
                total += len(str(part.get("output", "")))
            elif part.get("type") == "media":
                total += 100
    return total, True


def tool_call(call_id: str, name: str = "bash") -> dict[str, Any]:
    return {
        "kind": "message",
        "role": "assistant",
        "parts": [{"type": "tool_call", "id": call_id, "name": name, "input": {}}],
    }


def tool_result(call_id: str, output: str = "ok") -> dict[str, Any]:
    return {
        "kind": "message",
        "role": "tool",
        "parts": [{"type": "tool_result", "id": call_id, "output": output, "error": False}],
    }


@dataclass
class Result:
    seqs: list[int]
    epoch: int
    window: int
    batch_id: str


class Crash(BaseException):
    """A simulated process death (not an Exception: nothing may swallow it)."""


class FakeHistory:
    """In-memory history with the store's row rules that matter here."""

    def __init__(self) -> None:
        self.stored: list[dict[str, Any]] = []
        self.next_seq = 1
        self.epoch = 1
        self.rollover_calls: list[dict[str, Any]] = []
        # fault injection: "fail" (CommitFailed, nothing written), "uncertain"
        # (written, then CommitUncertain), "crash" (written, then Crash),
        # "prefix1"/"prefix2" (only the first 1/2 rows reach disk, then Crash)
        self.fault: str | None = None
        self.on_append: Callable[[], None] | None = None
        self._batches = itertools.count(1)

    # --- read side
    @property
    def window(self) -> int:
        for row in reversed(self.stored):
            if row["kind"] == "reset":
                return int(row["seq"])
        return 0

    def window_rows(self) -> list[dict[str, Any]]:
        w = self.window
        return [r for r in self.stored if r["seq"] > w]

    def provider_view(self) -> list[dict[str, Any]]:
        return provider_rows([copy.deepcopy(r) for r in self.window_rows()])

    def rows(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(r) for r in self.stored]

    # --- write side
    def _write(self, rows: Sequence[Mapping[str, Any]], keep: int | None = None) -> Result:
        bid = f"b{next(self._batches)}"
        first = self.next_seq
        n = len(rows)
        out = []
        for i, row in enumerate(rows):
            stored = {
                "seq": first + i,
                "id": row.get("id", f"r{first + i}"),
                "kind": row.get("kind", "message"),
                "role": row["role"],
                "parts": copy.deepcopy(row.get("parts", [])),
                "partial": row.get("partial", False),
                "meta": copy.deepcopy(row.get("meta", {})),
                "ts": row.get("ts", 0),
                "batch": {"id": bid, "n": n, "i": i},
            }
            if "reset" in row:
                stored["reset"] = dict(row["reset"])
            for k, v in row.items():
                if k not in stored:
                    stored[k] = copy.deepcopy(v)
            out.append(stored)
        self.stored.extend(out[:keep] if keep is not None else out)
        self.next_seq = first + n
        return Result([r["seq"] for r in out], self.epoch, self.window, bid)

    def append_many(
        self,
        rows: Sequence[Mapping[str, Any]],
        batch_id: str | None = None,
        expect_next_seq: int | None = None,
        expect_window: int | None = None,
    ) -> Result:
        for row in rows:
            assert row.get("kind", "message") not in ("reset", "lead_in")
        if expect_window is not None and expect_window != self.window:
            raise WindowChanged(f"expected window {expect_window}, now {self.window}")
        return self._write(rows)

    def clear_soft(self) -> Result:
        return self._write(
            [{"kind": "reset", "role": "system", "parts": [], "reset": {"reason": "manual"}}]
        )

    def rollover(
        self,
        trigger_rows: Sequence[dict[str, Any]],
        lead_in: str | None = None,
        tool_available: bool = True,
        *,
        expect_window: int | None = None,
        expect_next_seq: int | None = None,
    ) -> Result:
        self.rollover_calls.append(
            {"rows": list(trigger_rows), "lead_in": lead_in, "expect_window": expect_window}
        )
        if self.on_append is not None:
            self.on_append()
        if expect_window is not None and expect_window != self.window:
            raise WindowChanged(f"expected window {expect_window}, now {self.window}")
        if expect_next_seq is not None and expect_next_seq != self.next_seq:
            raise Conflict(f"expected next seq {expect_next_seq}, now {self.next_seq}")
        if self.fault == "fail":
            raise CommitFailed("injected: rename failed", "b?")
        reset = {"kind": "reset", "role": "system", "parts": [], "reset": {"reason": "rollover"}}
        text = lead_in if lead_in is not None else "default lead-in"
        lead = {
            "kind": "lead_in",
            "role": "system",
            "parts": [{"type": "text", "text": text}],
            "meta": {"window": self.next_seq, "session_history": tool_available},
        }
        keep = {"prefix1": 1, "prefix2": 2}.get(self.fault or "")
        result = self._write([reset, lead, *trigger_rows], keep=keep)
        if keep is not None or self.fault == "crash":
            raise Crash(self.fault)
        if self.fault == "uncertain":
            raise CommitUncertain("injected: fsync after rename failed", result.batch_id)
        return result

    def boundaries(self) -> list[dict[str, Any]]:
        return [r for r in self.stored if r["kind"] == "reset"]


@dataclass
class Tracker:
    """A file tracker spy: baselines per path, an owner, and a read() trap."""

    owner: object = field(default_factory=object)
    baselines: dict[str, str] = field(default_factory=dict)
    log: list[tuple[str, str]] = field(default_factory=list)

    def baseline(self, path: str) -> str | None:
        self.log.append(("baseline", path))
        return self.baselines.get(path)

    def restore(self, path: str, baseline: str) -> None:
        self.log.append(("restore", path))
        self.baselines[path] = baseline

    def read(self, path: str) -> str:  # pragma: no cover - must never be called
        self.log.append(("read", path))
        raise AssertionError("snapshot content must not be reread")


class Runtime:
    """The explicit runtime parts, each recording into ``events``."""

    def __init__(
        self,
        *,
        policy: ToolPolicy = ALL,
        config: BudgetConfig = CONFIG,
        workspace: str = "ws",
        activated: Sequence[str] | None = None,
    ) -> None:
        self.events: list[str] = []
        self.workspace = workspace
        self.policy = policy
        self.precedence: str | None = None
        self.registry = MiddlewareRegistry(mount=self._mount)
        self.mounts = itertools.count(1)
        self.hook_calls = 0
        self.builds = 0
        self.loads = 0
        self.releases = 0
        self.cleared: list[str] = []
        self.fail_cleanup: str | None = None
        self.fail_post: str | None = None
        self.promoted: list[str] = []
        self.windows: list[int] = []
        self.sent: list[ProviderRequest] = []
        self.tracker = Tracker()
        self.registry.register(
            Registration.context_only("ctx", "notes-plugin", self._hook, order=1)
        )
        self.parts = RolloverParts(
            workspace=workspace,
            model="m1",
            system="BASE",
            tools=TOOLS,
            policy=lambda: self.policy,
            registry=self.registry,
            memory=self._memory,
            count=count,
            config=config,
            build=self._build,
            activated=activated,
            precedence=lambda: self.precedence,
        )

    def _mount(self, plugin: str) -> int:
        return next(self.mounts)

    def _hook(self, system: str, mount: Any) -> str:
        self.hook_calls += 1
        self.events.append("hook")
        return system + "+ctx"

    def _memory(self) -> MemoryContext:
        self.loads += 1
        self.events.append("memory")
        return MemoryContext(f"MEM{self.loads}", release=self._release)

    def _release(self) -> None:
        self.releases += 1
        self.events.append("release")

    def _build(self, parts: RequestParts) -> ProviderRequest:
        self.builds += 1
        self.events.append("build")
        return assemble(parts)

    def _cleanup(self, name: str) -> Callable[[], None]:
        def run() -> None:
            self.events.append(f"cleanup:{name}")
            if self.fail_cleanup == name:
                raise OSError(f"injected: {name} cleanup failed")
            self.cleared.append(name)

        return run

    def _post(self, name: str, fn: Callable[..., None]) -> Callable[..., None]:
        def run(*args: Any) -> None:
            self.events.append(name)
            if self.fail_post == name:
                raise RuntimeError(f"injected: {name} failed")
            fn(*args)

        return run

    def hooks(self, *, tracker: bool = False) -> RolloverHooks:
        return RolloverHooks(
            cleanup=[(n, self._cleanup(n)) for n in ("cache", "carryover", "sandbox")],
            promote_memory=self._post("promote", self.promoted.append),
            clear_branch_summaries=self._post("branch", lambda: None),
            notify_window=self._post("notify", self.windows.append),
            tracker=self.tracker if tracker else None,
        )

    def send(self, request: ProviderRequest) -> str:
        self.events.append("send")
        self.sent.append(request)
        return "response"


def seeded_history(n: int = 3, size: int = 200) -> FakeHistory:
    """A history with ``n`` user/assistant exchanges of ``size`` code points each."""
    h = FakeHistory()
    for i in range(n):
        h.append_many([msg(f"u{i}" + "x" * size, "user"), msg(f"a{i}" + "y" * size, "assistant")])
    return h
