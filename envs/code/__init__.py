"""The Code env: its tasks (``tasks.py``); its MCP server is :mod:`mcp_gym.servers.code` (running solutions in
:mod:`mcp_gym.servers._sandbox`)."""
