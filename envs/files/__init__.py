"""The Files env: its MCP server (``server.py``) and its task set and verifier (``tasks.py``)."""
