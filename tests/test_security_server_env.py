"""What a third-party stdio server learns of the caller's environment (docs/security.md, *What runs, and with what
environment*): a job's servers get the MCP SDK's minimal inherited environment plus what the config (and a
task) gives, none of the caller's secrets; ``mcp-gym inspect CMD`` gives the command line the user typed the whole
environment, as documented. A real stdio server records the names it was started with."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from mcp_gym.cli import main

DUMP_SERVER = '''
import json, os, sys
from mcp.server.mcpserver import MCPServer

with open(sys.argv[1], "a", encoding="utf-8") as f:
    f.write(json.dumps(sorted(os.environ)) + "\\n")
server = MCPServer("dump")

@server.tool()
def ping() -> str:
    """Answer pong."""
    return "pong"

server.run()
'''
SECRETS = {"OPENAI_API_KEY": "sk-caller", "AWS_SECRET_ACCESS_KEY": "aws-caller", "HF_TOKEN": "hf_caller",
           "ANTHROPIC_API_KEY": "sk-ant-caller", "GITHUB_TOKEN": "ghp_caller"}
SDK_MINIMAL = {"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"}
PYTHON_SETS = {"LC_CTYPE"}  # Python's own locale coercion in the child, not the caller's


@pytest.fixture
def dump(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    for key, value in SECRETS.items():
        monkeypatch.setenv(key, value)
    script = tmp_path / "dump_server.py"
    script.write_text(DUMP_SERVER)
    return script, tmp_path / "names.jsonl"


def test_a_job_s_servers_get_none_of_the_caller_s_secrets(tmp_path: Path, dump: tuple[Path, Path]) -> None:
    script, names = dump
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "t1", "prompt": "Ping.", "answer": "pong",
                                 "solution": [{"tool": "ping", "arguments": {}}]}) + "\n")
    server = (f"+env.servers.d={{command:{json.dumps(sys.executable)},args:[{json.dumps(str(script))},"
              f"{json.dumps(str(names))}],env:{{SERVER_SETTING:x}}}}")
    code = main(["eval", "env=custom", server, f"env.tasks={tasks}", "policy=oracle", "samples=1",
                 f"out={tmp_path / 'out'}", "launcher.progress=false", "plots=false"])
    assert code == 0
    seen = [set(json.loads(line)) for line in names.read_text().splitlines()]
    assert seen and all(s <= SDK_MINIMAL | PYTHON_SETS | {"SERVER_SETTING"} for s in seen), seen
    assert all("SERVER_SETTING" in s for s in seen)  # what the config gives arrives


def test_inspect_gives_the_command_line_you_type_your_whole_environment(dump: tuple[Path, Path]) -> None:
    """Documented, so npx servers find their configuration: inspect only servers you would run yourself."""
    script, names = dump
    assert main(["inspect", f"{sys.executable} {script} {names}", "--json"]) == 0
    seen = set(json.loads(names.read_text().splitlines()[0]))
    assert set(SECRETS) <= seen
