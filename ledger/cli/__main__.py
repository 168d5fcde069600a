"""``python -m ledger.cli`` is ``tledger``."""

import sys

from ledger.cli import main

sys.exit(main())
