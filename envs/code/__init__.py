"""The Code env: its MCP server (``server.py``, running solutions in ``_sandbox.py``) and its tasks (``tasks.py``)."""
