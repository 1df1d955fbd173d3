"""The client under test for the official MCP conformance suite (npm ``@modelcontextprotocol/conformance``):
mcp-gym's :class:`~mcp_gym.env.MCPEnv` connects to the scenario's server, lists its tools and calls each of them.

The suite runs ``<command> <server-url>`` with the scenario's name in ``MCP_CONFORMANCE_SCENARIO`` and, for the auth
scenarios, its credentials in ``MCP_CONFORMANCE_CONTEXT`` (JSON)::

    conformance client --command "python scripts/conformance/client.py" --scenario tools_call

Elicitation requests are answered by :func:`~mcp_gym.client.elicitation.accept_defaults` (the env fills in the
schema's defaults, SEP-1034). Exits 0 when the server was reached and every call succeeded, 1 otherwise (with the
reason on stderr). ``tests/test_conformance.py`` runs the scenarios mcp-gym passes.
"""

from __future__ import annotations

import dataclasses
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
    """The spec for a scenario's server: plain Streamable HTTP; with the SDK's OAuth client-credentials provider
    (``client_secret_basic`` or ``private_key_jwt``) when the scenario hands out client credentials; with the SDK's
    authorization-code provider (:func:`authorization_code`) for the other auth scenarios."""
    if "client_id" in context and "private_key_pem" in context:
        auth = oauth_client_credentials(url, context["client_id"], private_key=context["private_key_pem"],
                                        signing_algorithm=context.get("signing_algorithm", "RS256"),
                                        issuer=suite_issuer(url))
        return Http(url, auth=auth)
    if "client_id" in context and "client_secret" in context:
        return Http(url, auth=oauth_client_credentials(url, context["client_id"], context["client_secret"],
                                                       issuer=suite_issuer(url)))
    if scenario.startswith("auth/"):
        return Http(url, auth=authorization_code(url))
    return Http(url)


def suite_issuer(url: str) -> str | None:
    """The authorization server the suite's server advertises (its protected-resource metadata, RFC 9728), as the
    ``issuer=`` of the client credentials the suite hands out. The suite runs its authorization server on another
    port, so another origin, where ``oauth_client_credentials`` sends credentials only to an issuer the caller
    names; this harness trusts the suite's server to name it (a real client is configured with its issuer)."""
    from urllib.parse import urlsplit
    from urllib.request import urlopen

    parts = urlsplit(url)
    base = f"{parts.scheme}://{parts.netloc}/.well-known/oauth-protected-resource"
    for where in (base + parts.path.rstrip("/"), base):
        try:
            with urlopen(where, timeout=10) as r:  # noqa: S310 - the suite's own server, http on 127.0.0.1
                servers = json.loads(r.read()).get("authorization_servers") or []
        except (OSError, ValueError):
            continue
        if servers:
            return str(servers[0])
    return None


def authorization_code(url: str) -> Any:
    """The SDK's authorization-code provider (``OAuthClientProvider``: discovery, dynamic client registration, PKCE,
    scope step-up, a URL client ID where the server takes one) as ``auth=``, with a headless "browser": it opens the
    authorization URL and reads the code from the redirect, as the suite's authorization server approves every request
    at once. A real deployment logs in once in a browser and keeps the tokens in a ``TokenStorage``."""
    from urllib.parse import parse_qs, urlsplit

    import httpx2
    from mcp.client.auth import OAuthClientProvider
    from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata

    from mcp_gym.client.specs import _MemoryTokens

    redirect_uri = "http://localhost:3000/callback"
    metadata_url = "https://conformance-test.local/client-metadata.json"  # the suite's client ID metadata document
    answers: list[AuthorizationCodeResult] = []

    async def open_browser(authorization_url: str) -> None:
        async with httpx2.AsyncClient(follow_redirects=False, timeout=10) as http:
            location = (await http.get(authorization_url)).headers["location"]
        query = {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}
        answers.append(AuthorizationCodeResult(code=query["code"], state=query.get("state"), iss=query.get("iss")))

    async def callback() -> AuthorizationCodeResult:
        return answers.pop()

    metadata = OAuthClientMetadata(client_name="mcp-gym conformance client", redirect_uris=[redirect_uri],
                                   grant_types=["authorization_code", "refresh_token"], response_types=["code"])
    return OAuthClientProvider(url, metadata, _MemoryTokens(), open_browser, callback, client_metadata_url=metadata_url)


def run(url: str, scenario: str, context: Mapping[str, Any]) -> list[str]:
    """Connect, list the tools, call each one; the problems met (empty when all went well)."""
    spec = dataclasses.replace(server_spec(url, scenario, context), connect_timeout=120)  # a hang guard (30 s passed
    # waiting for the handshake at load 20)
    env = MCPEnv({"server": spec}, [f"conformance scenario {scenario}"],
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
