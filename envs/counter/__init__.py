"""The Counter env: its task set and verifier (``tasks.py``); its MCP server is :mod:`mcp_gym.servers.counter` (also
the test suite's server: diagnostics, sampling, elicitation)."""
