"""The client under test for the official MCP conformance suite (npm ``@modelcontextprotocol/conformance``):
mcp-gym's :class:`~mcp_gym.env.MCPEnv` connects to the scenario's server, lists its tools and calls each of them.

The suite runs ``<command> <server-url>`` with the scenario's name in ``MCP_CONFORMANCE_SCENARIO`` and, for the auth
scenarios, its credentials in ``MCP_CONFORMANCE_CONTEXT`` (JSON)::

    conformance client --command "python scripts/conformance/client.py" --scenario tools_call

Elicitation requests are answered by :func:`~mcp_gym.client.elicitation.accept_defaults` (the env fills in the
schema's defaults, SEP-1034). Exits 0 when the server was reached and every call succeeded, 1 otherwise (with the
reason on stderr). ``tests/test_conformance.py`` runs the scenarios mcp-gym supports.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from mcp_gym import Http, MCPEnv
from mcp_gym.client.elicitation import accept_defaults
from mcp_gym.client.specs import oauth_client_credentials

ARGUMENTS: dict[str, dict[str, Any]] = {"add_numbers": {"a": 2, "b": 3}}
"""Arguments for the scenarios' tools that take any (the others are called with none)."""


def server_spec(url: str, scenario: str, context: Mapping[str, Any]) -> Http:
    """The spec for a scenario's server: plain Streamable HTTP, or with the SDK's OAuth client-credentials provider
    (``client_secret_basic`` or ``private_key_jwt``) when the scenario hands out client credentials."""
    if "client_id" in context and "private_key_pem" in context:
        auth = oauth_client_credentials(url, context["client_id"], private_key=context["private_key_pem"],
                                        signing_algorithm=context.get("signing_algorithm", "RS256"))
        return Http(url, auth=auth)
    if "client_id" in context and "client_secret" in context:
        return Http(url, auth=oauth_client_credentials(url, context["client_id"], context["client_secret"]))
    return Http(url)


def run(url: str, scenario: str, context: Mapping[str, Any]) -> list[str]:
    """Connect, list the tools, call each one; the problems met (empty when all went well)."""
    env = MCPEnv({"server": server_spec(url, scenario, context)}, [f"conformance scenario {scenario}"],
                 elicitation=accept_defaults, reset_mode="none", call_timeout=20, max_steps=50)
    problems: list[str] = []
    try:
        _, info = env.reset(seed=0)
        status = info["servers"]["server"]
        if status["status"] != "ready":
            return [f"server not ready: {status.get('error')}"]
        for tool in env.action_space.tool_names:
            if tool == "submit":
                continue
            obs, _, _, _, info = env.step({"tool": tool, "arguments": ARGUMENTS.get(tool, {})})
            print(f"{tool}: {obs['result'][:200]}", file=sys.stderr)
            if info.get("error"):
                problems.append(f"{tool}: {info['error'].get('message')}")
    finally:
        env.close()
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: ``client.py <server-url>`` (the suite appends the URL)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print("usage: client.py <server-url> (run by: conformance client --command ... --scenario ...)",
              file=sys.stderr)
        return 2
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    problems = run(args[-1], scenario, context)
    for p in problems:
        print(f"conformance client ({scenario or 'no scenario'}): {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
