"""Old import path of :mod:`ledger.interop.demo`
(the same module object, so patches and isinstance checks see one module)."""

import sys

from ledger.interop import demo as _module

sys.modules[__name__] = _module
