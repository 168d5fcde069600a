"""``python -m ledger`` is ``tledger``."""

import sys

from ledger.cli import main

sys.exit(main())
