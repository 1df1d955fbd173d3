"""The Maze env: its layouts, dynamics, tasks and verifier (``tasks.py``); its MCP server is
:mod:`mcp_gym.servers.maze`."""
