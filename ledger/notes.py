"""The rollover notes file (``workspace/context-notes.md``): the public names of
:mod:`ledger.rollover.notes`, where the code and its documentation live."""

from ledger.rollover import notes as _notes
from ledger.rollover.notes import *  # noqa: F403

__all__: list[str] = []
__all__ += _notes.__all__
