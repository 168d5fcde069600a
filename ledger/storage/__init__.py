"""Storage engines: the engine interface (``ledger.storage.engine``), the
registry that picks one by the root's form (``ledger.storage.registry``) and
the engines: ``ledger.storage.files`` (the embedded default),
``ledger.storage.postgres`` and ``ledger.storage.memory`` (the in-memory
reference engine)."""
