"""The Notes env: its task set and verifier (``tasks.py``); its MCP server is :mod:`mcp_gym.servers.notes`."""
