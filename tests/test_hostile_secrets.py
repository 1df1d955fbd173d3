"""Secrets a job is given never land in its run directory (round 9). A run directory is handed over (``mcp-gym view``,
``export-sft``, a bucket), and its files are readable by every local user under the usual umask.

Before, a key typed on the command line (``policy.api_key=sk-...``, a URL with a token in it) was written as typed,
three times, into the files Hydra writes before the job starts: ``.hydra/config.yaml``, ``.hydra/overrides.yaml``
and ``.hydra/hydra.yaml`` (its overrides, and their ``override_dirname``). The manifest and the viewer's page masked
it; these files did not. Now the job rewrites them with the same masking as soon as Hydra has written them
(``mcp_gym.jobs._hydra_files``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mcp_gym.cli import main

sys.path.insert(0, str(Path(__file__).parent))
from _chat_server import chat_completion, serve_chat_completions  # noqa: E402

KEY = "sk-h9-do-not-write-me"
URL_TOKEN = "urltoken-h9"


def test_a_key_given_on_the_command_line_is_written_nowhere_in_the_run(tmp_path: Path) -> None:
    seen: list[str | None] = []

    def reply(body: dict[str, Any], headers: Any) -> dict[str, Any]:
        seen.append(headers.get("Authorization"))
        call = {"id": "c1", "type": "function", "function": {"name": "submit", "arguments": '{"answer": "0"}'}}
        return chat_completion(body, {"role": "assistant", "content": "", "tool_calls": [call]})

    out = tmp_path / "run"
    with serve_chat_completions(reply) as base:
        url = base.replace("http://", f"http://user:{URL_TOKEN}@")
        code = main(["eval", "env=counter", "env.transport=inprocess", "policy=openai", f"policy.base_url='{url}'",
                     "policy.model=scripted", f"policy.api_key={KEY}", "env.max_tasks=1", "samples=1",
                     "launcher.progress=false", "plots=false", f"out={out}"])
    assert code == 0 and seen  # the endpoint was used (httpx sends the URL's user info as its Authorization)
    assert main(["view", str(out)]) == 0
    leaked = [p for p in out.rglob("*") if p.is_file() and (KEY.encode() in (b := p.read_bytes())
                                                             or URL_TOKEN.encode() in b)]
    assert leaked == []
    hydra = out / ".hydra"
    assert "api_key: <redacted>" in (hydra / "config.yaml").read_text()
    assert "max_tokens: 1024" in (hydra / "config.yaml").read_text()  # a count of tokens is no secret
    assert "- policy.api_key=<redacted>" in (hydra / "overrides.yaml").read_text()
    assert "policy.api_key=<redacted>," in (hydra / "hydra.yaml").read_text()  # override_dirname


def test_an_interpolation_is_kept_it_names_the_secret_s_source() -> None:
    from mcp_gym.jobs._hydra_files import redact_config

    cfg = {"policy": {"api_key": "${oc.env:OPENAI_API_KEY,null}", "max_new_tokens": 8},
           "servers": {"gh": {"env": {"GITHUB_TOKEN": "ghp_x"},
                              "headers": {"X-Api-Key": "k", "Authorization": "Bearer ${oc.env:GH_TOKEN}",
                                          "X-Other": "sk-1${oc.env:B}", "X-Two": "Bearer sk-1 ${oc.env:B}"}}},
           "overrides": ["+env.servers.gh.headers.Authorization=Bearer a,b", "samples=2"]}
    assert redact_config(cfg) == {
        "policy": {"api_key": "${oc.env:OPENAI_API_KEY,null}", "max_new_tokens": 8},
        "servers": {"gh": {"env": {"GITHUB_TOKEN": "<redacted>"},
                           "headers": {"X-Api-Key": "<redacted>", "Authorization": "Bearer ${oc.env:GH_TOKEN}",
                                       "X-Other": "<redacted>", "X-Two": "<redacted>"}}},
        "overrides": ["+env.servers.gh.headers.Authorization=<redacted>", "samples=2"]}


def test_an_unreachable_endpoint_s_token_is_not_printed(tmp_path: Path, capfd: Any) -> None:
    """The error of an episode whose endpoint cannot be reached named the URL as given (a CI log is often public):
    now its user info and query values are masked, in the log line and the job's last line."""
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://user:{URL_TOKEN}@127.0.0.1:{port}/v1?key={URL_TOKEN}"
    code = main(["eval", "env=counter", "env.transport=inprocess", "policy=openai", f"policy.base_url='{url}'",
                 "policy.retries=0", "env.max_tasks=1", "samples=1", "launcher.progress=false", "plots=false",
                 f"out={tmp_path / 'run'}"])
    out, err = capfd.readouterr()
    assert code != 0 and "could not reach the chat-completions endpoint http://<redacted>@127.0.0.1" in err
    assert URL_TOKEN not in out + err
