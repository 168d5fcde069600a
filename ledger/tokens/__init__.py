"""Token accounting, offline and with each model's own tokenizer.

- ``counting``: text and row counts, the token counter of a model (its public
  names are this package's: ``from ledger.tokens import TokenCounter``);
- ``encodings``: the BPE files, verified and cached, never downloaded;
- ``models``: the model registry (limits, families, encodings);
- ``units`` (framing constants, counts), ``costs`` (JSON values and media),
  ``rows`` (the per-row accountant and cache) and ``shapes`` (rows as each
  provider API receives them): the parts ``counting`` puts together.

Budget verdicts and the rollover built on these counts are ``ledger.rollover``.
"""

from ledger.tokens import counting as _counting
from ledger.tokens.counting import *  # noqa: F403

__all__: list[str] = []
__all__ += _counting.__all__
