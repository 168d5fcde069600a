"""Tests of ledger.integrations: the agent-framework sessions, stores and the MCP server."""
