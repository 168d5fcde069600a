"""Old import path of :mod:`ledger.budget.notes`
(the same module object, so patches and isinstance checks see one module)."""

import sys

from ledger.budget import notes as _module

sys.modules[__name__] = _module
