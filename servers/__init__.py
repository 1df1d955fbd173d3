"""The bundled MCP servers (``servers/`` in the repository, the package ``mcp_gym.servers``): one module per server,
each runnable on its own over stdio or Streamable HTTP::

    python -m mcp_gym.servers.notes                        # stdio
    python -m mcp_gym.servers.notes --transport http --port 8000
    mcp-gym serve notes --transport http --port 8000

The envs that run them (tasks, verifiers) are in ``mcp_gym.envs`` (``envs/``).
"""
