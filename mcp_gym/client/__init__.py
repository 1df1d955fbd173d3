"""The MCP client layer: how mcp-gym reaches servers, below the env.

- :mod:`~mcp_gym.client.specs` — server specs (:class:`~mcp_gym.client.specs.Stdio`, ``Http``, ``InProcess``) and
  their parsers (``parse_server``, ``normalise_servers``);
- :mod:`~mcp_gym.client.connection` — one long-lived session per server (``ServerConnection``) and the ``Tap``
  interface through which a recorder above (the cassette) sees its traffic;
- :mod:`~mcp_gym.client.host` — several connections behind one tool catalogue (``MCPHost``);
- :mod:`~mcp_gym.client.runtime` — the event loop that owns the sessions (``Runtime``).

It imports only :mod:`mcp_gym.protocol` from the package.
"""
