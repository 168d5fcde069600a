"""Old import path of :mod:`ledger.storage.files.rewrite`
(the same module object, so patches and isinstance checks see one module)."""

import sys

from ledger.storage.files import rewrite as _module

sys.modules[__name__] = _module
