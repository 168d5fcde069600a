"""The test suite: folders mirror the package ledger/; shared helpers are in tests/helpers/."""
