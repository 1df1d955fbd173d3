"""The Maze env: its MCP server (``server.py``) and its layouts, dynamics, tasks and verifier (``tasks.py``)."""
