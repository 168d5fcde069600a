"""Admission: middleware registrations and their snapshot: the public names of
:mod:`ledger.rollover.admission`, where the code and its documentation live."""

from ledger.rollover import admission as _admission
from ledger.rollover.admission import *  # noqa: F403

__all__: list[str] = []
__all__ += _admission.__all__
