"""Agent frameworks plug the ledger in (each an optional extra).

- :mod:`ledger.integrations.openai_agents`: ``LedgerSession``, the OpenAI Agents
  SDK's ``Session`` (extra ``agents``);
- :mod:`ledger.integrations.langchain`: ``LedgerChatMessageHistory``, a
  LangChain ``BaseChatMessageHistory`` (extra ``langchain``);
- :mod:`ledger.integrations.langgraph`: ``LedgerSaver``, a LangGraph
  checkpointer (extra ``langgraph``);
- :mod:`ledger.integrations.claude`: ``LedgerSessionStore``, the Claude Agent
  SDK's ``SessionStore`` (extra ``claude``);
- :mod:`ledger.integrations.mcp_server`: ``session_history`` served over MCP
  (extra ``mcp``; ``tledger mcp``).

Each module imports its framework when it is imported itself; a missing
framework raises :class:`MissingExtra` naming the extra to install. Importing
this package imports no framework.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Protocol, TypeVar

from ledger.core.errors import LedgerError, WorkspaceNotFound
from ledger.core.rows import Row
from ledger.transcript.store import Store

if TYPE_CHECKING:
    from ledger.transcript.history import History

__all__ = ["MissingExtra", "Projection", "caught_up", "open_store", "require"]


class MissingExtra(LedgerError, ImportError):
    """An integration's framework is not installed."""


def require(module: str, extra: str) -> ModuleType:
    """Import ``module`` or raise :class:`MissingExtra` naming ``extra``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtra(
            f"{module} is not installed; install it with: "
            f"pip install 'transcript-ledger[{extra}]'"
        ) from exc


def open_store(store: Store | None, root: str | os.PathLike[str] | None) -> Store:
    """The store an integration writes to: ``store``, else one at ``root``,
    else at ``$TLEDGER_ROOT``, else ``./.tledger`` (as the CLI picks it)."""
    if store is not None:
        if root is not None:
            raise LedgerError("give store= or root=, not both")
        return store
    if root is None:
        root = os.environ.get("TLEDGER_ROOT") or os.path.join(".", ".tledger")
    return Store(root)


class Projection(Protocol):
    """What an integration keeps of a workspace's rows: for which ``epoch``,
    and up to (before) which ``next_seq``."""

    epoch: int
    next_seq: int


P = TypeVar("P", bound=Projection)


def caught_up(
    history: History, kept: P | None, new: Callable[[int], P], fold: Callable[[P, Row], None]
) -> P | None:
    """``kept`` brought up to date with ``history``: the rows appended since
    folded in, or every row into ``new(epoch)`` when there is none yet, the
    epoch changed (a rewrite) or the history is behind it. None when the
    workspace was never written or was deleted."""
    snap = history.snapshot()
    if kept is None or kept.epoch != snap.epoch or kept.next_seq > snap.next_seq:
        kept, after = new(snap.epoch), None
    elif kept.next_seq == snap.next_seq:
        return kept
    else:
        after = kept.next_seq - 1
    try:
        for row in history.rows(after_seq=after):
            fold(kept, row)
    except WorkspaceNotFound:  # never written, or deleted since
        return None
    kept.next_seq = max(kept.next_seq, snap.next_seq)
    return kept
