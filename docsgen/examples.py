"""The fenced Python blocks of the docs and the README, with their markers.

A block runs as it stands unless the HTML comment on the line before its
opening fence says otherwise (docs/how-to/run-the-tests.md, "Examples in the
docs"):

- ``<!-- example: requires EXTRA -->``: run only when the extra is installed;
- ``<!-- example: continue -->``: continues the page's previous block (both run
  as one program);
- ``<!-- example: skip REASON -->``: never run; REASON says why.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# What proves an extra installed (langgraph-checkpoint, which the test extra
# brings, also provides the `langgraph` namespace, without the graph).
EXTRA_PROBES = {
    "agents": "agents",
    "langchain": "langchain.agents",
    "langgraph": "langgraph.graph",
    "claude": "claude_agent_sdk",
    "mcp": "mcp",
    "postgres": "psycopg",
    "semantic": "wordllama",
}
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
MARKER = re.compile(r"<!-- example: (requires|continue|skip)(?: (.+?))? -->\s*\Z")


@dataclass(frozen=True)
class Block:
    page: str  # path relative to the repository root
    index: int  # 0-based among the page's Python blocks
    line: int  # 1-based line of the opening fence
    code: str  # the program to run (with the blocks it continues)
    requires: tuple[str, ...] = ()
    skip: str | None = None
    continued: bool = False  # a later block continues this one

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    def missing(self) -> str | None:
        """Why this block cannot run here, or None."""
        if self.skip:
            return self.skip
        for extra in self.requires:
            probe = EXTRA_PROBES.get(extra)
            if probe is None:
                raise ValueError(f"{self.id}: unknown extra {extra!r} in its marker")
            if importlib.util.find_spec(probe.split(".")[0]) is None or \
                    importlib.util.find_spec(probe) is None:
                return (f"the {extra} extra is not installed "
                        f"(pip install 'transcript-ledger[{extra}]')")
        return None


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def blocks_of(path: Path) -> list[Block]:
    text = path.read_text(encoding="utf-8")
    rel = path.relative_to(REPO).as_posix()
    found: list[Block] = []
    for i, m in enumerate(FENCE.finditer(text)):
        before = text[:m.start()]
        line = before.count("\n") + 1
        marker = MARKER.search(before.rstrip("\n").rsplit("\n", 1)[-1] + "\n") \
            if before.strip() else None
        kind, arg = (marker.group(1), (marker.group(2) or "").strip()) if marker else ("", "")
        code = m.group(1)
        requires: tuple[str, ...] = ()
        skip = None
        if kind == "requires":
            requires = tuple(arg.split())
            if not requires:
                raise ValueError(f"{rel}:{line}: 'requires' names no extra")
        elif kind == "skip":
            if not arg:
                raise ValueError(f"{rel}:{line}: 'skip' must give its reason")
            skip = arg
        elif kind == "continue":
            if not found:
                raise ValueError(f"{rel}:{line}: 'continue' with no block before it")
            prev = found[-1]
            found[-1] = Block(prev.page, prev.index, prev.line, prev.code, prev.requires,
                              prev.skip, continued=True)
            code = prev.code + "\n" + code
            requires, skip = prev.requires, prev.skip
        found.append(Block(rel, i, line, code, requires, skip))
    return found


def all_blocks() -> list[Block]:
    return [b for page in pages() for b in blocks_of(page)]
