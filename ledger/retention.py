"""Old import path of :mod:`ledger.storage.files.retention`
(the same module object, so patches and isinstance checks see one module)."""

import sys

from ledger.storage.files import retention as _module

sys.modules[__name__] = _module
