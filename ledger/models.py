"""Old import path of :mod:`ledger.budget.models`
(the same module object, so patches and isinstance checks see one module)."""

import sys

from ledger.budget import models as _module

sys.modules[__name__] = _module
