"""Secrets in server URLs stay secret (issue 26, item 4): a token in the query string (``?api_key=...``) or the user
info (``https://TOKEN@host``) never reaches a run directory (episodes, steps, manifest, results, the viewer page), a
cassette, or an observation sent to the model. A real Counter server over Streamable HTTP on 127.0.0.1, real jobs."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import start_http_server, stop_process

from mcp_gym import MCPEnv
from mcp_gym.cli import main
from mcp_gym.client.specs import Http, parse_server, redact_text, redact_url
from mcp_gym.protocol import ToolCallError
from mcp_gym.recording import load

pytestmark = pytest.mark.xdist_group("url_secrets")  # one worker: `counter_url`: an HTTP server made once

QUERY_SECRET = "qSeCrEt-41f7"
USER_SECRET = "uSeCrEt-9b2c"
SECRETS = (QUERY_SECRET, USER_SECRET, base64.b64encode(f"{USER_SECRET}:".encode()).decode())


@pytest.fixture(scope="module")
def counter_url() -> Iterator[str]:
    """The bundled Counter (no diagnostic tools: the random policy must not stop it) over Streamable HTTP."""
    proc, url = start_http_server("mcp_gym.servers.counter")
    try:
        yield url
    finally:
        stop_process(proc)


def _with_secrets(url: str, path: str = "/mcp") -> str:
    return url.replace("http://", f"http://{USER_SECRET}@").replace("/mcp", path) + f"?api_key={QUERY_SECRET}&v=2"


def _leaks(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


def test_redact_url_masks_user_info_query_and_fragment() -> None:
    assert redact_url(f"https://{USER_SECRET}@host:8443/mcp?api_key={QUERY_SECRET}&flag#t={QUERY_SECRET}") == \
        "https://<redacted>@host:8443/mcp?api_key=<redacted>&<redacted>#t=<redacted>"
    assert redact_url("https://user:pw@host/mcp") == "https://<redacted>@host/mcp"
    assert redact_url("http://127.0.0.1:8000/mcp") == "http://127.0.0.1:8000/mcp"  # nothing secret: unchanged
    assert redact_url(redact_url(_with_secrets("http://h/mcp"))) == redact_url(_with_secrets("http://h/mcp"))
    assert redact_url("http://[::1") == "<redacted>"  # unparsable: nothing of it shown
    text = f"GET '{_with_secrets('http://h:1/mcp')}' failed; see https://docs.example.com/x."
    assert _leaks(redact_text(text)) == [] and "https://docs.example.com/x." in redact_text(text)
    spec = parse_server(_with_secrets("http://h:1/mcp"))
    assert isinstance(spec, Http) and _leaks(repr(spec) + spec.describe() + json.dumps(spec.redacted())) == []
    stdio = parse_server(f"mcp-remote {_with_secrets('http://h/mcp')}")
    assert _leaks(stdio.describe() + repr(stdio)) == [] and "mcp-remote http://<redacted>@h/mcp" in stdio.describe()
    assert _leaks(ToolCallError("tool_error", text).message) == []  # every error text of a step, to the agent too


def test_a_job_never_writes_a_url_secret(counter_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The URLs come from ``${oc.env:...}``; the run directory, its viewer page and the cassette never hold them."""
    monkeypatch.setenv("MCP_GYM_TEST_URL", _with_secrets(counter_url))
    monkeypatch.setenv("JUDGE_BASE_URL", _with_secrets("http://judge.example/mcp"))  # the judge's endpoint: recorded
    cassettes = tmp_path / "cassettes"
    for command, extra in (("collect", ["episodes=2"]), ("eval", ["samples=1", "plots=false"])):
        out = tmp_path / command
        assert main([command, "env=custom", "+env.servers.c.url=${oc.env:MCP_GYM_TEST_URL}",
                     f"+env.servers.c.record={cassettes}", "policy=random", "env.max_steps=3",
                     "launcher.progress=false", f"out={out}", *extra]) == 0
        assert main(["view", str(out)]) == 0
        run = load(out)
        servers = run.episodes[0]["servers"]
        servers = servers if isinstance(servers, str) else json.dumps(servers, default=str)
        assert "api_key=<redacted>" in servers and "ready" in servers  # the server was reached, and is named
        files = [p for p in (*out.rglob("*"), *cassettes.rglob("*")) if p.is_file()]
        assert {"manifest.json", "report.html"} <= {p.name for p in files}
        assert command == "collect" or (out / "report" / "results.json").is_file()
        for p in files:
            data = p.read_bytes().decode("utf-8", "replace")
            if p.suffix == ".parquet":
                data = json.dumps(pq.read_table(p).to_pylist(), default=str)
            assert _leaks(data) == [], f"{p.relative_to(tmp_path)} holds {_leaks(data)}"
    assert (cassettes / "c.jsonl").stat().st_size > 0  # the exchange was recorded...
    manifest = json.loads((tmp_path / "eval" / "manifest.json").read_text())
    assert manifest["metadata"]["env"]["servers"]["c"]["url"].endswith("/mcp?api_key=<redacted>&v=<redacted>")


def test_a_failing_servers_secret_url_is_not_sent_to_the_agent(counter_url: str) -> None:
    """A server that refuses (HTTP 404 at its URL): the first observation says so without the URL's secrets."""
    env = MCPEnv({"bad": _with_secrets(counter_url, "/nope"), "c": counter_url})
    try:
        with pytest.warns(Warning, match="unavailable"):
            obs, info = env.reset(seed=0)
        assert "server 'bad' is unavailable" in obs["result"] and "404" in obs["result"]
        assert "api_key=<redacted>" in obs["result"]  # still recognisable
        assert _leaks(json.dumps(obs)) == [] and _leaks(json.dumps(info, default=str)) == []
        obs, _, _, _, info = env.step({"tool": "bad__anything", "arguments": {}})
        assert _leaks(json.dumps(obs)) == [] and _leaks(json.dumps(info, default=str)) == []
    finally:
        env.close()


def test_inspect_and_diff_tools_do_not_print_a_url_secret(counter_url: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    secret_url = _with_secrets(counter_url)
    assert main(["inspect", secret_url, "--json"]) == 0
    assert main(["inspect", secret_url]) == 0
    assert main(["diff-tools", secret_url, counter_url, "--json"]) == 0
    shown = capsys.readouterr()
    assert '"add"' in shown.out and "api_key=<redacted>" in shown.out  # the server was reached, and named
    assert _leaks(shown.out + shown.err) == []


def test_http_client_logs_at_info_never_show_a_url_secret(counter_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 36: httpx2 logs each request's URL at INFO (``HTTP Request: POST http://user@host/mcp?api_key=...``);
    the client layer's filter (the same redact_text) masks user info and query values in every HTTP logger."""
    import logging

    import httpx2

    from mcp_gym.protocol import HTTP_LOGGERS

    with caplog.at_level(logging.INFO):
        for name in HTTP_LOGGERS:
            logging.getLogger(name).setLevel(logging.INFO)
        env = MCPEnv({"c": Http(_with_secrets(counter_url))}, ["Move the counter."], call_timeout=30.0)
        try:
            env.reset(seed=0)
            _, _, _, _, info = env.step({"tool": "add", "arguments": {"amount": 1}})
            assert info["error"] is None, info["error"]
        finally:
            env.close()
        with httpx2.Client() as client:  # any httpx2 client of the process, e.g. a policy's
            client.get(_with_secrets(counter_url, "/health"))
    requests = [r.getMessage() for r in caplog.records if r.name == "httpx2"]
    assert requests and all("<redacted>@" in m and "api_key=<redacted>" in m for m in requests), requests
    assert _leaks(caplog.text) == [] and _leaks("\n".join(r.getMessage() for r in caplog.records)) == []
