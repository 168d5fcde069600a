"""Token accounting and the rollover engine: offline encodings, exact counts,
model limits, budget verdicts and hard guards (``guards``), the access policy,
admission, the rollover decision and its transaction, rollover notes.

``ledger.budget`` was one module before this package; its public names are
re-exported here so that ``from ledger.budget import ...`` keeps working.
"""

from ledger.budget.guards import *  # noqa: F403
from ledger.budget.guards import __all__ as _guards_all

__all__ = list(_guards_all)
