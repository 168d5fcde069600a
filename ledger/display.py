"""Old import path of :mod:`ledger.interop.display`
(the same module object, so patches and isinstance checks see one module)."""

import sys

from ledger.interop import display as _module

sys.modules[__name__] = _module
