"""Old import path of :mod:`ledger.interop.aio`
(the same module object, so patches and isinstance checks see one module)."""

import sys

from ledger.interop import aio as _module

sys.modules[__name__] = _module
