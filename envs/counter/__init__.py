"""The Counter env: its MCP server (``server.py``, also the test suite's server: diagnostics, sampling, elicitation)
and its task set and verifier (``tasks.py``)."""
