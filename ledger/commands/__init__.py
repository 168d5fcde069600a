"""CLI command groups. Each module exports ``register(subparsers)``.

A command's handler takes ``(args, ctx)`` and returns an exit code; it raises
``LedgerError`` for failures, which ``ledger.cli.main`` turns into exit 1.
"""
