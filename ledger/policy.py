"""The tool-access policy of a rollover: the public names of
:mod:`ledger.rollover.policy`, where the code and its documentation live."""

from ledger.rollover import policy as _policy
from ledger.rollover.policy import *  # noqa: F403

__all__: list[str] = []
__all__ += _policy.__all__
