"""Hosted servers: Streamable HTTP and HTTP+SSE with credentials (static headers, any ``httpx2.Auth``), against a real
``MCPServer`` behind a bearer-token check on 127.0.0.1 (tests/servers/hosted.py), and secrets kept out of what is
saved (cassettes, run manifests, Parquet steps, Hydra's copies)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from conftest import start_server, stop_process

from mcp_gym import MCPEnv
from mcp_gym.cli import main
from mcp_gym.client.specs import REDACTED, Http, Sse, Stdio, normalise_servers, oauth_client_credentials, parse_server
from mcp_gym.recording import load

pytestmark = pytest.mark.xdist_group("hosted_servers")  # one worker: `http_url`, `sse_url`: hosted servers made once

TOKEN = "s3cret-token-Xy7"
SERVER = Path(__file__).parent / "servers" / "hosted.py"


def _serve(transport: str, log: Path, *extra: str) -> Iterator[str]:
    proc, port = start_server([sys.executable, str(SERVER), "--port", "0", "--transport", transport,
                               "--token", TOKEN, "--log", str(log), *extra])
    try:
        yield f"http://127.0.0.1:{port}/{'mcp' if transport == 'http' else 'sse'}"
    finally:
        stop_process(proc)


@pytest.fixture(scope="module")
def http_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from _serve("http", tmp_path_factory.mktemp("http") / "requests.log")


@pytest.fixture(scope="module")
def sse_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from _serve("sse", tmp_path_factory.mktemp("sse") / "requests.log")


class BearerAuth(httpx2.Auth):
    """An auth flow of the user's own: adds the bearer token to every request."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.calls = 0

    def auth_flow(self, request: httpx2.Request) -> Iterator[httpx2.Request]:
        self.calls += 1
        request.headers["Authorization"] = f"Bearer {self.token}"
        yield request


def _add(env: MCPEnv, alias: str = "api") -> str:
    env.reset(seed=0)
    obs, _, _, _, info = env.step({"tool": f"{alias}.add" if len(env.host.connections) > 1 else "add",
                                   "arguments": {"a": 2, "b": 3}})
    assert info.get("error") is None, info["error"]
    return obs["result"] if isinstance(obs, dict) else str(obs)


def test_http_without_token_fails_naming_server_and_401(http_url: str) -> None:
    env = MCPEnv({"api": Http(http_url, connect_timeout=20)})
    try:
        _, info = env.reset(seed=0)
        s = info["servers"]["api"]
        assert s["status"] == "failed"
        assert "server 'api'" in s["error"] and "401 Unauthorized" in s["error"] and http_url in s["error"]
    finally:
        env.close()


def test_sse_without_token_fails_naming_server_and_401(sse_url: str) -> None:
    env = MCPEnv({"legacy": Sse(sse_url, connect_timeout=20)})
    try:
        _, info = env.reset(seed=0)
        s = info["servers"]["legacy"]
        assert s["status"] == "failed" and "server 'legacy'" in s["error"] and "401" in s["error"]
    finally:
        env.close()


@pytest.mark.parametrize("how", ["headers", "auth"])
def test_http_with_credentials_tools_work(http_url: str, how: str) -> None:
    auth = BearerAuth(TOKEN)
    spec = Http(http_url, headers={"Authorization": f"Bearer {TOKEN}"}) if how == "headers" else Http(http_url,
                                                                                                      auth=auth)
    env = MCPEnv({"api": spec})
    try:
        assert "5" in _add(env)
        assert env.host.connections["api"].info()["status"] == "ready"
        if how == "auth":
            assert auth.calls > 0  # the requests went through the auth flow
    finally:
        env.close()


@pytest.mark.parametrize("how", ["headers", "auth"])
def test_sse_with_credentials_tools_work(sse_url: str, how: str) -> None:
    spec = Sse(sse_url, headers={"Authorization": f"Bearer {TOKEN}"}) if how == "headers" else Sse(
        sse_url, auth=BearerAuth(TOKEN))
    env = MCPEnv({"api": spec})
    try:
        assert "5" in _add(env)
        assert env.host.connections["api"].info()["transport"] == "sse"
    finally:
        env.close()


def test_secrets_are_masked_in_specs() -> None:
    spec = Http("https://user:pw-SECRET@example.com/mcp", headers={"Authorization": f"Bearer {TOKEN}"},
                auth=BearerAuth(TOKEN))
    for shown in (repr(spec), spec.describe(), str(spec.redacted())):
        assert TOKEN not in shown and "pw-SECRET" not in shown
    assert spec.redacted()["headers"] == {"Authorization": REDACTED}
    assert spec.redacted()["auth"] == "BearerAuth"
    with pytest.raises(TypeError, match="httpx2.Auth"):
        Http("http://x/mcp", auth=object())
    with pytest.raises(ValueError, match="header 'X' must be a string"):
        Http("http://x/mcp", headers={"X": 1})  # type: ignore[dict-item]


def test_server_strings_and_config_entries() -> None:
    assert isinstance(parse_server("http://h/mcp"), Http)
    sse = parse_server("sse+https://h/sse", headers={"A": "b"})
    assert isinstance(sse, Sse) and sse.url == "https://h/sse" and sse.headers == {"A": "b"}
    assert isinstance(parse_server("python -m x"), Stdio)
    with pytest.raises(ValueError, match="headers are for"):
        parse_server("python -m x", headers={"A": "b"})
    specs = normalise_servers({"a": {"url": "sse+http://h/sse", "headers": {"Authorization": "Bearer x"},
                                     "connect_timeout": 5},
                               "b": {"command": "python", "args": ["-m", "x"]}, "c": {"command": "python -m y"}})
    assert isinstance(specs["a"], Sse) and specs["a"].headers == {"Authorization": "Bearer x"}
    assert specs["a"].connect_timeout == 5
    assert isinstance(specs["b"], Stdio) and specs["b"].args == ("-m", "x") and specs["c"].args == ("-m", "y")
    with pytest.raises(ValueError, match="server 'd': a mapping needs 'url'"):
        normalise_servers({"d": {"headers": {}}})


@pytest.mark.parametrize("secret, works", [("cl-secret-Q9", True), ("wrong", False)])
def test_oauth_client_credentials(tmp_path: Path, secret: str, works: bool) -> None:
    """The SDK's client-credentials provider discovers the authorization server from the 401, gets a token with the
    client's secret and sends it; a wrong secret leaves the server failed with the 401 named."""
    from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider

    log = tmp_path / "requests.log"
    serving = _serve("http", log, "--client", "gym-client:cl-secret-Q9")
    url = next(serving)
    try:
        issuer = None if works else url.removesuffix("/mcp")  # without issuer=: the server's own origin only
        auth = oauth_client_credentials(url, "gym-client", secret, issuer=issuer)
        assert isinstance(auth, ClientCredentialsOAuthProvider)
        spec = Http(url, auth=auth, record=tmp_path / "cassettes", connect_timeout=20)
        assert secret not in repr(spec)
        env = MCPEnv({"api": spec})
        try:
            if works:
                assert "5" in _add(env)
                assert "POST /token" in log.read_text() and f"POST /mcp Bearer {TOKEN}" in log.read_text()
            else:
                s = env.reset(seed=0)[1]["servers"]["api"]
                assert s["status"] == "failed" and "server 'api'" in s["error"] and "401" in s["error"], s
        finally:
            env.close()
    finally:
        serving.close()
    assert not [p for p in (tmp_path / "cassettes").rglob("*") if p.is_file() and TOKEN.encode() in p.read_bytes()]


@pytest.fixture
def attacker_as() -> Iterator[tuple[str, list[str]]]:
    """An authorization server on another origin (127.0.0.1, another port) that records the credentials it gets."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def _json(self, body: dict[str, object]) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            base = f"http://127.0.0.1:{self.server.server_address[1]}"
            self._json({"issuer": base, "token_endpoint": base + "/token", "authorization_endpoint": base + "/a",
                        "response_types_supported": ["code"], "grant_types_supported": ["client_credentials"],
                        "token_endpoint_auth_methods_supported": ["client_secret_basic"]})

        def do_POST(self) -> None:  # noqa: N802
            seen.append(self.headers.get("Authorization", "") + " " + self.rfile.read(
                int(self.headers.get("Content-Length") or 0)).decode())
            self._json({"access_token": "stolen", "token_type": "Bearer", "expires_in": 3600})

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("lead", ["--auth-server", pytest.param("--token-endpoint", marks=pytest.mark.slow)])
def test_oauth_credentials_go_only_to_the_server_s_origin(tmp_path: Path, attacker_as: tuple[str, list[str]],
                                                          lead: str) -> None:
    """Without ``issuer=``, the SDK sent the client secret wherever the server's metadata led: a server naming an
    authorization server (or a token endpoint) on another origin received ``Authorization: Basic
    base64(id:secret)`` there. Now the token endpoint must be on the server's origin unless ``issuer=`` names
    another; the server is failed with one line saying so."""
    import base64

    attacker, seen = attacker_as
    target = attacker if lead == "--auth-server" else attacker + "/token"
    serving = _serve("http", tmp_path / "requests.log", "--client", "gym-client:cl-secret-Q9", lead, target)
    url = next(serving)
    try:
        env = MCPEnv({"api": Http(url, auth=oauth_client_credentials(url, "gym-client", "cl-secret-Q9"),
                                  connect_timeout=20)})
        try:
            s = env.reset(seed=0)[1]["servers"]["api"]
        finally:
            env.close()
    finally:
        serving.close()
    assert not seen, seen
    assert s["status"] == "failed", s
    assert "refusing to send OAuth client 'gym-client''s credentials to the token endpoint" in s["error"], s
    assert f"{attacker}/token" in s["error"] and "pass issuer=" in s["error"]
    assert "cl-secret-Q9" not in s["error"] and base64.b64encode(b"gym-client:cl-secret-Q9").decode() not in s["error"]


@pytest.mark.slow  # the fast lane's test_oauth_client_credentials passes issuer= on the server's origin
def test_oauth_credentials_reach_another_origin_the_user_names(tmp_path: Path,
                                                               attacker_as: tuple[str, list[str]]) -> None:
    """``issuer=`` is the user's word: the authorization server it names gets the credentials, wherever it is."""
    other, seen = attacker_as
    serving = _serve("http", tmp_path / "requests.log", "--client", "gym-client:cl-secret-Q9", "--auth-server", other)
    url = next(serving)
    try:
        env = MCPEnv({"api": Http(url, auth=oauth_client_credentials(url, "gym-client", "cl-secret-Q9", issuer=other),
                                  connect_timeout=20)})
        try:
            env.reset(seed=0)
        finally:
            env.close()
    finally:
        serving.close()
    assert seen and seen[0].startswith("Basic "), seen


def test_cassette_does_not_contain_the_token(http_url: str, tmp_path: Path) -> None:
    env = MCPEnv({"api": Http(http_url, headers={"Authorization": f"Bearer {TOKEN}"}, record=tmp_path / "cassettes")})
    try:
        _add(env)
    finally:
        env.close()
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert "add" in (tmp_path / "cassettes" / "api.jsonl").read_text()  # the exchange was recorded...
    assert not [p for p in files if TOKEN.encode() in p.read_bytes()]  # ...without the token


def test_collect_job_with_env_token_keeps_it_out_of_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A custom env's header from ``${oc.env:...}`` reaches the server; the run directory never holds it."""
    log = tmp_path / "requests.log"
    serving = _serve("http", log)
    http_url = next(serving)
    try:
        _collect(http_url, log, tmp_path / "run", monkeypatch)
    finally:
        serving.close()


def _collect(http_url: str, log: Path, out: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_GYM_TEST_TOKEN", TOKEN)
    assert main(["collect", "env=custom", f"+env.servers.api.url={http_url}",
                 '+env.servers.api.headers.Authorization="Bearer ${oc.env:MCP_GYM_TEST_TOKEN}"',
                 "policy=random", "episodes=2", "env.max_steps=2", "launcher.progress=false", f"out={out}"]) == 0
    files = [p for p in out.rglob("*") if p.is_file()]
    assert any(p.suffix == ".parquet" for p in files) and any(p.name == "manifest.json" for p in files)
    assert not [p for p in files if TOKEN.encode() in p.read_bytes()]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["metadata"]["env"]["servers"]["api"]["headers"] == {"Authorization": REDACTED}
    assert "${oc.env:MCP_GYM_TEST_TOKEN}" in (out / ".hydra" / "config.yaml").read_text()  # unresolved copy
    assert f"POST /mcp Bearer {TOKEN}" in log.read_text()  # ...while the server did get the token from the env
    assert len(load(out).episodes) == 2


def test_inspect_cli_header_and_sse_strings(http_url: str, sse_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", http_url, "--timeout", "20"]) == 1
    err = capsys.readouterr().err
    assert "401 Unauthorized" in err and TOKEN not in err
    assert main(["inspect", http_url, "--header", f"Authorization: Bearer {TOKEN}", "--json"]) == 0
    out = capsys.readouterr().out
    assert '"add"' in out and TOKEN not in out
    assert main(["inspect", "sse+" + sse_url, "--header", f"Authorization: Bearer {TOKEN}", "--json"]) == 0
    out = capsys.readouterr().out
    assert '"transport": "sse"' in out and '"add"' in out
    assert main(["inspect", http_url, "--header", TOKEN]) == 1
    err = capsys.readouterr().err
    assert "--header needs 'Name: value'" in err and TOKEN not in err


def test_copies_share_the_auth_flow() -> None:
    import copy

    spec = Http("http://h/mcp", auth=BearerAuth(TOKEN))
    assert copy.deepcopy({"api": spec})["api"].auth is spec.auth


def _answering(status: int, headers: dict[str, str], seen: list[str]) -> Any:
    """A threading HTTP server on 127.0.0.1 answering every request with ``status`` and ``headers`` (an empty body),
    noting each request's method and credentials in ``seen``."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Answer(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen.append(f"{self.command} {self.headers.get('X-Api-Key')} {self.headers.get('Authorization')}")
            self.send_response(status)
            for k, v in {**headers, "Content-Length": "0"}.items():
                self.send_header(k, v)
            self.end_headers()

        do_GET = do_POST = do_DELETE = _answer  # noqa: N815 - http.server's names

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_a_redirect_to_another_origin_carries_no_header() -> None:
    """A hosted server answering ``307`` with another origin's ``Location``: httpx strips ``Authorization`` on such a
    redirect but not a custom header (``X-Api-Key``); mcp-gym follows no redirect of an MCP request, so neither
    reaches the other origin. (Held in round 6; kept as a guard.)"""
    seen: list[str] = []
    elsewhere = _answering(404, {}, seen)
    server = _answering(307, {"Location": f"http://127.0.0.1:{elsewhere.server_address[1]}/mcp"}, [])
    try:
        env = MCPEnv({"api": Http(f"http://127.0.0.1:{server.server_address[1]}/mcp", connect_timeout=10,
                                  headers={"X-Api-Key": TOKEN, "Authorization": f"Bearer {TOKEN}"})})
        try:
            assert env.reset(seed=0)[1]["servers"]["api"]["status"] == "failed"
        finally:
            env.close()
    finally:
        for s in (server, elsewhere):
            s.shutdown()
            s.server_close()
    assert not seen, seen
