"""The rollover engine and the runtime object an agent loop drives.

- ``engine``: the pure policy engine plus the one rollover transaction (its
  public names are this package's: ``from ledger.rollover import step``);
  ``decide`` (send, warn, roll over or reject), ``prepare`` (the candidate
  request) and ``rules`` (thresholds, errors, the lead-in) are its parts;
- ``conversation``: :class:`~ledger.rollover.conversation.Conversation`, the
  runtime object (``request``: what it returns);
- ``guards``: the hard guards (a request, a fresh window, a tool output);
- the engine's pure parts one floor down, each public at its own path:
  ``ledger.policy`` (tool access), ``ledger.admission`` (middleware
  registrations) and ``ledger.notes`` (the rollover notes file).

Token counts come from ``ledger.tokens``, one floor down.
"""

from ledger.rollover import engine as _engine
from ledger.rollover.engine import *  # noqa: F403

__all__: list[str] = []
__all__ += _engine.__all__
