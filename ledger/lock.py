"""Old import path of :mod:`ledger.storage.files.lock`
(the same module object, so patches and isinstance checks see one module)."""

import sys

from ledger.storage.files import lock as _module

sys.modules[__name__] = _module
