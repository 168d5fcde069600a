"""Old import path of :mod:`ledger.budget.policy`
(the same module object, so patches and isinstance checks see one module)."""

import sys

from ledger.budget import policy as _module

sys.modules[__name__] = _module
