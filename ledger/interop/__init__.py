"""Around the store: asyncio wrappers, the demo, and the transcript display."""
