"""Old import path of :mod:`ledger.transcript.retrieval`
(the same module object, so patches and isinstance checks see one module)."""

import sys

from ledger.transcript import retrieval as _module

sys.modules[__name__] = _module
