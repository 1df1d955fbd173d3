"""OAuth client credentials that go only where the user sent them (used by :func:`specs.oauth_client_credentials`).

The SDK's client-credentials providers learn where to send the client's secret (or its signed JWT assertion) from
the MCP server itself: the protected-resource metadata names the authorization server, whose metadata names the
token endpoint. Without ``issuer=`` that makes the server the one who chooses: a hostile (or compromised) server
advertising ``https://attacker.example`` as its authorization server received ``Authorization: Basic
base64(client_id:client_secret)``. So when the user names no issuer, the token endpoint (for a first token and for a
refresh) must be on the MCP server's own origin (scheme, host and port); an authorization server elsewhere needs
``issuer=`` (then the SDK sends credentials only to metadata that names exactly that issuer).
"""

from __future__ import annotations

import functools
import warnings
from typing import Any
from urllib.parse import urlsplit

from mcp_gym.protocol import redact_url

__all__: list[str] = []  # internal to mcp_gym.client: used by specs.oauth_client_credentials only

_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin(url: str) -> tuple[str, str, int | None]:
    """``(scheme, host, port)`` of ``url``, the default port filled in, the host lower-cased."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port or _DEFAULT_PORTS.get(scheme)
    except ValueError:
        port = None
    return scheme, (parts.hostname or "").lower(), port


def check_token_url(server_url: str, token_url: str, client_id: str) -> str:
    """``token_url`` if it is on ``server_url``'s origin, else the SDK's ``OAuthFlowError`` in one line."""
    if origin(token_url) == origin(server_url):
        return token_url
    from mcp.client.auth import OAuthFlowError

    raise OAuthFlowError(f"refusing to send OAuth client {client_id!r}'s credentials to the token endpoint "
                         f"{redact_url(token_url)}, which the server at {redact_url(server_url)} names on another "
                         "origin: pass issuer= (your authorization server's issuer URL) to oauth_client_credentials to "
                         "allow that authorization server")


@functools.cache
def same_origin(base: type) -> type:
    """A subclass of the SDK provider ``base`` whose token requests (first and refresh) go only to the server's
    origin."""

    class SameOrigin(base):
        def _get_token_endpoint(self) -> str:
            client_id = self.context.client_info.client_id if self.context.client_info else ""
            return check_token_url(self.context.server_url, super()._get_token_endpoint(), client_id or "")

        async def _refresh_token(self) -> Any:
            request = await super()._refresh_token()
            client_id = self.context.client_info.client_id if self.context.client_info else ""
            check_token_url(self.context.server_url, str(request.url), client_id or "")
            return request

    SameOrigin.__name__ = SameOrigin.__qualname__ = base.__name__
    return SameOrigin


def client_credentials(url: str, client_id: str, client_secret: str | None, private_key: str | None,
                       signing_algorithm: str, issuer: str | None, scope: str | None, storage: Any) -> Any:
    """The SDK's provider for these credentials; without ``issuer``, one that refuses a token endpoint on another
    origin than ``url``'s."""
    from mcp.client.auth.extensions import client_credentials as cc
    from mcp.shared.exceptions import MCPDeprecationWarning

    secret_cls: type = cc.ClientCredentialsOAuthProvider
    jwt_cls: type = cc.PrivateKeyJWTOAuthProvider
    with warnings.catch_warnings():
        if issuer is None:  # the SDK warns that the server then chooses: here it cannot (the same-origin check)
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            secret_cls, jwt_cls = same_origin(secret_cls), same_origin(jwt_cls)
        if client_secret is not None:
            return secret_cls(url, storage, client_id, client_secret, scope=scope, issuer=issuer)
        signer = cc.SignedJWTParameters(issuer=client_id, subject=client_id, signing_key=private_key or "",
                                        signing_algorithm=signing_algorithm)
        return jwt_cls(url, storage, client_id, signer.create_assertion_provider(), scope=scope, issuer=issuer)
