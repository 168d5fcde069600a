"""Old import path of :mod:`ledger.core.cursors`
(the same module object, so patches and isinstance checks see one module)."""

import sys

from ledger.core import cursors as _module

sys.modules[__name__] = _module
