"""The vocabulary every layer shares: errors, the bytes of a row and of the
file format, canonical rows, window boundaries and cursors. Pure: no I/O."""
