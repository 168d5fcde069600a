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
from types import ModuleType

from ledger.core.errors import LedgerError
from ledger.transcript.store import Store

__all__ = ["MissingExtra", "open_store", "require"]


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
