"""The file engine: segments committed by rename, the receipt, stamps, the
INDEX projection, merges, the bulk loader, marked rewrites and retention."""
