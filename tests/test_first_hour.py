"""A new user's first hour (issue 14): servers that fail or hang at start are loud, ids resolve, the CLI explains its
keys, and plotting jobs keep stdout clean."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import npm_bin

from mcp_gym import MCPEnv, ServerUnavailableWarning, Stdio
from mcp_gym.chat import ChatView
from mcp_gym.client.specs import InProcess
from mcp_gym.servers.counter import server as counter_server

ROOT = Path(__file__).resolve().parents[1]
TASKS = [{"id": "t1", "prompt": "Create hello.txt containing hi"}]
MUTE = ["-c", "import sys; sys.stdin.read()"]
"""A server that starts and never answers the handshake; it leaves when its stdin closes, so stopping it takes no stop
grace (a server that ignores the end of its stdin is stopped 2 s later by SIGTERM: test_env's hung server)."""


# -- a server that fails at start is reported loudly ------------------------------------------------------------------
@pytest.mark.thirdparty
def test_filesystem_server_on_a_missing_folder_is_reported_in_warning_info_and_first_observation(
        tmp_path: Path) -> None:
    missing = tmp_path / "workspace"  # never created: the real npm server refuses to start
    fs = Stdio(npm_bin("mcp-server-filesystem"), [str(missing)], connect_timeout=60)
    env = MCPEnv({"fs": fs, "counter": InProcess(counter_server)}, TASKS)
    try:
        with pytest.warns(ServerUnavailableWarning, match=r"server 'fs' is unavailable .*Cannot access directory"):
            obs, info = env.reset(seed=0)
        assert info["servers"]["fs"]["status"] == "failed"
        assert "Cannot access directory" in info["servers"]["fs"]["error"]
        assert [(e["kind"], e["server"]) for e in info["reset_errors"]] == [("server_dead", "fs")]
        assert info["error"] == info["reset_errors"][0]
        assert obs["result"].startswith("Error: server 'fs' is unavailable (failed: ")
        assert "its tools are not offered" in obs["result"]
        assert info["servers"]["counter"]["status"] == "ready"  # the other server goes on
        assert "counter__add" in env.action_space.tool_names
        # a chat agent sees the reason in its first user turn
        user = ChatView(obs["task"], obs["resources"], notice=obs["result"]).messages[1]["content"]
        assert user.startswith(TASKS[0]["prompt"]) and "server 'fs' is unavailable" in user
        # the folder appears: the next reset restarts the server and the notice is gone
        missing.mkdir()
        obs, info = env.reset(seed=1)
        assert info["servers"]["fs"]["status"] == "ready" and info["reset_errors"] == []
        assert obs["result"] == ""
        assert "fs__write_file" in env.action_space.tool_names
    finally:
        env.close()


def test_a_stdio_command_that_exits_is_reported_with_its_stderr() -> None:
    gone = Stdio(sys.executable, ["-c", "import sys; sys.exit('no such database: prod.db')"])
    env = MCPEnv({"db": gone}, TASKS)
    try:
        with pytest.warns(ServerUnavailableWarning, match="server 'db'.*no such database: prod.db"):
            obs, info = env.reset(seed=0)
        assert "no such database: prod.db" in obs["result"]
        assert info["reset_errors"][0]["server"] == "db"
        assert env.action_space.tool_names == ["submit"]
    finally:
        env.close()


# -- a server that never answers is announced, and not retried at once ------------------------------------------------
def test_a_server_that_never_answers_is_announced_and_not_retried_by_the_first_reset(
        client_log: list[logging.LogRecord]) -> None:
    mute = Stdio(sys.executable, MUTE, connect_timeout=0.5)  # never answers: any timeout expires
    env = MCPEnv({"mute": mute}, TASKS)
    try:
        waits = [r.getMessage() for r in client_log if "waiting for server" in r.getMessage()]
        assert waits == [f"mcp-gym: waiting for server 'mute' ({mute.describe()}) to answer the MCP handshake "
                         "(up to connect_timeout=0.5 s)"]
        with pytest.warns(ServerUnavailableWarning, match="could not connect within 0.5 s"):
            obs, info = env.reset(seed=0)
        messages = [r.getMessage() for r in client_log]
        assert sum("waiting for server 'mute'" in m for m in messages) == 1  # the first reset did not retry
        assert not any("restarting server" in m for m in messages)
        assert info["servers"]["mute"]["status"] == "failed"
        with pytest.warns(ServerUnavailableWarning):
            env.reset(seed=1)  # a later reset retries, and says so
        messages = [r.getMessage() for r in client_log]
        assert "mcp-gym: restarting server 'mute' (failed: could not connect within 0.5 s)" in messages
        assert sum("waiting for server 'mute'" in m for m in messages) == 2
    finally:
        env.close()


@pytest.mark.slow  # 4.5-10 s: the heavy lane, which CI still runs (the fast lane stays under 5 min)
def test_the_waiting_line_reaches_stderr_without_logging_configured(tmp_path: Path) -> None:
    script = (
        "import sys, warnings\n"
        "from mcp_gym import MCPEnv, Stdio\n"
        "env = MCPEnv({'mute': Stdio(sys.executable, ['-c', 'import sys; sys.stdin.read()'], connect_timeout=0.5)},\n"
        "             [{'id': 't', 'prompt': 'p'}])\n"
        "env.close()\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "mcp-gym: waiting for server 'mute'" in done.stderr
    assert done.stdout == ""


# -- gym.make ids -----------------------------------------------------------------------------------------------------
@pytest.mark.slow  # the heavy lane: the README's test command took 5m36s quiet in CI (1311 tests)
def test_gym_make_with_the_module_prefix_needs_no_import(tmp_path: Path) -> None:
    script = (
        "import gymnasium as gym\n"
        "try:\n"
        "    gym.make('mcp_gym/SQL-v0')\n"
        "except gym.error.Error as e:\n"
        "    print('bare id without import:', type(e).__name__)\n"
        "env = gym.make('mcp_gym:mcp_gym/SQL-v0')\n"
        "print('tools:', sorted(env.unwrapped.action_space.tool_names))\n"
        "env.close()\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": ""})
    assert done.returncode == 0, done.stderr
    assert "bare id without import: NamespaceNotFound" in done.stdout
    assert "tools: ['describe_table', 'list_tables', 'query', 'submit']" in done.stdout


# -- mcp-gym <job> --help ---------------------------------------------------------------------------------------------
def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mcp_gym.cli", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd)


def _leaves(cfg: object, prefix: str = "") -> set[str]:
    from omegaconf import DictConfig

    assert isinstance(cfg, DictConfig)
    out: set[str] = set()
    for key in cfg:
        node = cfg._get_node(key)
        if isinstance(node, DictConfig) and len(node) > 0:
            out |= _leaves(node, f"{prefix}{key}.")
        else:
            out.add(f"{prefix}{key}")
    return out


def _help_rows(page: str) -> dict[str, str]:
    """key -> description of a help page's rows ("  key=default   description", continued on deeper lines)."""
    rows: dict[str, str] = {}
    last = None
    for line in page.splitlines():
        m = re.match(r"^  (\+?[\w.]+)(?:=\S+)?(?: {2,}(\S.*))?$", line)
        if m:
            last = m[1].lstrip("+")
            rows[last] = m[2] or ""
        elif last and line.startswith("    "):
            rows[last] = f"{rows[last]} {line.strip()}".strip()
        else:
            last = None
    return rows


@pytest.mark.parametrize(("args", "job"), [
    (["collect"], "collect"),
    (["eval", "policy=openai", "env=custom"], "eval"),
    (["export-sft"], "export_sft"),
])
def test_job_help_explains_every_key_of_the_composed_config(args: list[str], job: str) -> None:
    from hydra import compose, initialize_config_module

    done = _cli(*args, "--help")
    assert done.returncode == 0, done.stderr
    page = done.stdout
    assert page.startswith(f"usage: mcp-gym {args[0]} ")
    assert "Powered by Hydra" not in page and "== Config ==" not in page  # not Hydra's dump
    assert all(len(line) <= 120 for line in page.splitlines())
    shown = _help_rows(page)
    with initialize_config_module("mcp_gym.conf", version_base="1.3"):
        cfg = compose("config", overrides=[f"job={job}", *args[1:]])
    wanted = {k for k in _leaves(cfg) if k not in ("command", "hydra") and not k.endswith(".kind")}
    if job == "export_sft":  # it reads recorded runs: no env, policy, recorder or launcher
        wanted = {k for k in wanted if k.split(".")[0] not in ("env", "policy", "recorder", "launcher")}
    missing = wanted - set(shown)
    assert not missing, f"keys without help: {sorted(missing)}"
    undocumented = [k for k in wanted if not shown[k]]
    assert not undocumented, f"keys without a description: {undocumented}"


def test_job_help_follows_the_chosen_options_and_every_conf_key_has_a_description() -> None:
    from mcp_gym.conf.help import read_conf

    page = _cli("eval", "policy=openai", "--help").stdout
    assert "policy=openai: Any OpenAI-compatible" in page
    assert "policy.base_url=${oc.env:OPENAI_BASE_URL,https://api.openai.com/v1}" in page
    assert "+policy.system_prompt" in page
    assert "\npolicy=random:" not in page and "random (Random tool calls" in page  # listed as another option
    conf = ROOT / "conf"
    for path in sorted(conf.glob("*/*.yaml")):
        rel = path.relative_to(conf).as_posix()
        parsed = read_conf(rel)
        assert parsed.doc, f"{rel}: no description comment at the top"
        assert all(k.doc for k in parsed.keys if k.path not in ("kind", "command")), rel


def test_a_key_comment_continued_on_the_next_line_stays_with_its_key() -> None:
    """A key's comment may go on below it, at the same column (conf/generator/explore.yaml's ``seed``): the help
    gives the whole comment to that key; it gave the second line to the next key (``walk_length``: "calls per walk
    with one `seed` and different generator.seed propose ...")."""
    from mcp_gym.conf.help import read_conf

    docs = {k.path: k.doc for k in read_conf("generator/explore.yaml").keys}
    assert docs["walk_length"] == "calls per walk"
    assert docs["seed"].startswith("the walks' seed") and docs["seed"].endswith("propose different tasks that "
                                                                                "split alike")


# -- matplotlib's notes stay off stdout -------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_plotting_eval_keeps_matplotlib_notes_off_stdout(tmp_path: Path) -> None:
    # an unusable MPLCONFIGDIR makes matplotlib log (WARNING) that it made a temporary cache and rebuilds the font
    # cache there: Hydra's job logging printed such lines on stdout, between the job's own output
    env = {**os.environ, "MPLCONFIGDIR": "/dev/null/mpl"}
    done = subprocess.run([sys.executable, "-m", "mcp_gym.cli", "eval", "env=counter", "policy=oracle", "samples=1",
                           "launcher.progress=false", f"out={tmp_path / 'run'}"], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "run" / "report" / "success_by_task.png").exists()  # it did plot
    assert "success rate" in done.stdout
    assert "matplotlib" not in done.stdout.lower(), done.stdout


@pytest.mark.slow
def test_sessions_of_one_slow_server_starting_together_are_announced_once(
        client_log: list[logging.LogRecord]) -> None:
    import anyio

    from mcp_gym.client.connection import ServerConnection

    mute = Stdio(sys.executable, MUTE, connect_timeout=1.5)
    conns = [ServerConnection("mute", mute) for _ in range(3)]

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            async with anyio.create_task_group() as starting:
                for c in conns:
                    starting.start_soon(c.start, tg)
            for c in conns:
                await c.close()

    anyio.run(main)
    assert [c.status for c in conns] == ["failed"] * 3
    assert sum("waiting for server 'mute'" in r.getMessage() for r in client_log) == 1
