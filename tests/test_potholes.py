"""First-hour potholes of issue 14: ``mcp-gym inspect`` on partial and replay servers, CLI user errors,
``sample()`` on a real third-party server, loading a run with ``datasets``, eval plot labels."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from mcp_gym import InProcess, MCPEnv
from mcp_gym.cassette import cassette_path
from mcp_gym.cli import HIDDEN_NOTE, main
from mcp_gym.envs import load_env_tasks
from mcp_gym.envs.counter.server import make_server

BAD_SERVER = str(Path(__file__).parent / "servers" / "bad_server.py")


def test_inspect_server_refusing_resource_templates(capsys: pytest.CaptureFixture[str]) -> None:
    """A server that declares resources but answers resources/templates/list with "method not found"."""
    target = f"{sys.executable} {BAD_SERVER} --resources"
    assert main(["inspect", target, "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert [t["name"] for t in listing["tools"]] == ["echo"]
    assert [r["uri"] for r in listing["resources"]] == ["bad://one"]
    assert listing["resource_templates"] == [] and "resource_templates" in listing["unavailable"]
    assert main(["inspect", target]) == 0
    shown = capsys.readouterr()
    assert "bad://one" in shown.out and "resource templates: not listed by the server" in shown.out
    assert "Traceback" not in shown.out + shown.err


def test_inspect_replay_marks_hidden_tools(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A recorded cassette inspects like its server; the hidden episode-control tools are marked."""
    monkeypatch.setenv("COLUMNS", "400")  # rich's table width: no wrapping inside the asserted cells
    env = MCPEnv(InProcess(make_server(), record=tmp_path), tasks=load_env_tasks("counter")[:1])
    env.reset(seed=0)
    env.close()
    cassette = cassette_path(tmp_path, "server")
    if not cassette.exists():
        cassette = next(tmp_path.glob("*.jsonl"))
    assert main(["inspect", str(cassette)]) == 0
    shown = capsys.readouterr()
    assert "Traceback" not in shown.out + shown.err
    assert "add" in shown.out
    assert f"mcp_gym_reset {HIDDEN_NOTE}" in shown.out and f"mcp_gym_state {HIDDEN_NOTE}" in shown.out
    assert f"get_count {HIDDEN_NOTE}" not in shown.out
    assert main(["inspect", str(cassette), "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    hidden = {t["name"] for t in listing["tools"] if t.get("hidden")}
    assert hidden == {"mcp_gym_reset", "mcp_gym_state"}
    assert {"add", "get_count"} <= {t["name"] for t in listing["tools"]}
