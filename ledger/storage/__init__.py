"""Storage engines: the engine interface (``ledger.storage.engine``) and its
implementations (``ledger.storage.files``, the embedded default)."""
