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

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for type checkers, as if imported here (they load on first use)
    from ledger.tokens.counting import *  # noqa: F403


def __getattr__(name: str) -> object:
    """``counting``'s public names (and ``__all__``) load on first use, so that
    importing one part (``models``, ``encodings``) does not load the tokenizers
    and every provider adapter with them (the CLI's start, for one)."""
    counting = import_module("ledger.tokens.counting")  # not `from`: that asks this hook
    if name == "__all__":
        value: object = list(counting.__all__)
    elif name in counting.__all__:
        value = getattr(counting, name)
    else:
        raise AttributeError(f"module 'ledger.tokens' has no attribute {name!r}")
    globals()[name] = value  # the next lookup is a plain one
    return value
