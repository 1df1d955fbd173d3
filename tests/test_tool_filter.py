"""``include_tools`` / ``exclude_tools``: the tools the agent is shown, one setting for every face of the env.

Hidden tools are absent from the action space, the observations' tool list and the chat ``tools``; calling one is an
invalid action whose one-line error names the tool and the setting, and the server never sees the call; a tool a
server lists later (``tools/list_changed``) is filtered too. The setting travels through the ``connection=`` group,
``gymnasium.make``, pickling, Hydra env configs (``env.include_tools=[...]``), ``tasks generate`` (a hidden tool is
never proposed) and the recorded episodes ``export-sft`` turns into training examples (their ``tools`` column is what
the env shows). Real servers: the bundled Counter in process and the npm server-everything over stdio."""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path

import gymnasium as gym
import pytest
from conftest import npm_bin

from mcp_gym import Connection, InProcess, MCPEnv
from mcp_gym.chat import env_tools
from mcp_gym.cli import main
from mcp_gym.jobs.config import env_config, env_factory
from mcp_gym.servers.counter import make_server


def counter_env(**kw: object) -> MCPEnv:
    return MCPEnv({"counter": InProcess(make_server(diagnostics=True))}, ["Move the counter."], **kw)  # type: ignore[arg-type]


def shown(env: MCPEnv) -> set[str]:
    return {t["function"]["name"] for t in env_tools(env)}


def test_exclude_tools_hides_and_refuses_without_calling_the_server() -> None:
    env = counter_env(exclude_tools=["add", "echo"])
    try:
        obs, info = env.reset(seed=0)
        assert "add" not in env.action_space.tool_names and "echo" not in env.action_space.tool_names
        assert "get_count" in env.action_space.tool_names and "submit" in env.action_space.tool_names
        assert {"add", "echo"}.isdisjoint(info["tools"]) and "get_count" in info["tools"]
        assert {"add", "echo"}.isdisjoint(shown(env)) and {"get_count", "submit"} <= shown(env)
        assert {"add", "echo"}.isdisjoint(t["name"] for t in env.tool_catalogue())
        obs, reward, terminated, _, info = env.step({"tool": "add", "arguments": {"amount": 3}})
        err = info["error"]
        assert err["kind"] == "unknown_tool" and err["tool"] == "add" and not terminated
        assert "'add'" in err["message"] and "exclude_tools" in err["message"] and "\n" not in err["message"]
        assert "exclude_tools" in obs["result"]
        _, _, _, _, info = env.step({"tool": "get_count", "arguments": {}})
        assert info["structured_content"] == {"result": 0}  # the hidden add never reached the server
        _, _, _, _, info = env.step({"tool": "nope", "arguments": {}})
        assert "exclude_tools" not in info["error"]["message"]  # a tool no server lists is merely unknown
    finally:
        env.close()


def test_include_tools_follows_tools_list_changed() -> None:
    env = counter_env(connection=Connection(include_tools=["get_count", "unlock_bonus"]))
    try:
        env.reset(seed=0)
        assert env.action_space.tool_names == ["get_count", "unlock_bonus", "submit"]
        _, _, _, _, info = env.step({"tool": "unlock_bonus", "arguments": {}})
        assert info["error"] is None
        assert "bonus" not in env.action_space.tool_names and "bonus" not in shown(env)  # listed now, still hidden
        assert env.host.has_tool("counter", "bonus")
        _, reward, _, _, info = env.step({"tool": "bonus", "arguments": {}})
        assert reward != 0.5 and info["error"]["kind"] == "unknown_tool"
        assert "include_tools" in info["error"]["message"] and "'bonus'" in info["error"]["message"]
    finally:
        env.close()
    env = counter_env(exclude_tools=["bonus"])
    try:
        env.reset(seed=0)
        env.step({"tool": "unlock_bonus", "arguments": {}})
        assert "bonus" not in env.action_space.tool_names
        _, reward, _, _, info = env.step({"tool": "bonus", "arguments": {}})
        assert reward != 0.5 and "exclude_tools" in info["error"]["message"]
    finally:
        env.close()


def test_the_setting_travels_and_refuses_a_bare_string() -> None:
    group = Connection(include_tools=("get_count",), exclude_tools=("echo",))
    assert pickle.loads(pickle.dumps(group)) == group
    env = gym.make("mcp_gym/Counter-v0", connection=Connection(exclude_tools=["add"]))
    try:
        env.reset(seed=0)
        assert "add" not in env.unwrapped.action_space.tool_names
        assert "get_count" in env.unwrapped.action_space.tool_names
        again = gym.make(env.spec)  # the spec carries it (as vector workers rebuild an env)
        try:
            again.reset(seed=0)
            assert "add" not in again.unwrapped.action_space.tool_names
        finally:
            again.close()
    finally:
        env.close()
    with pytest.raises(TypeError, match="include_tools takes a list of tool names"):
        counter_env(include_tools="get_count")
    with pytest.raises(TypeError, match="twice"):
        counter_env(exclude_tools=["add"], connection=Connection(exclude_tools=["echo"]))


def test_hydra_env_config_reaches_the_env() -> None:
    server = f'+env.servers.counter="{sys.executable} -m mcp_gym.servers.counter --diagnostics"'
    cfg = env_config("custom", overrides=[server,
                                          "env.include_tools=[get_count,add]", "env.exclude_tools=[add]"])
    assert cfg["include_tools"] == ["get_count", "add"] and cfg["exclude_tools"] == ["add"]
    env = env_factory(cfg, [])()
    try:
        env.reset(seed=0)
        assert env.action_space.tool_names == ["get_count", "submit"]
    finally:
        env.close()


@pytest.mark.slow  # 18 s: the heavy lane (the filter's env, job and TRL tests stay in the fast lane)
@pytest.mark.thirdparty
@pytest.mark.timeout(600)
def test_generate_collect_and_export_show_only_the_included_tools(tmp_path: Path) -> None:
    """server-everything (npm, stdio) with include_tools=[get-sum, echo]: tasks generate proposes only those tools;
    validate, the oracle and export-sft run with the same setting, and the exported ``tools`` column is exactly what
    the env shows."""
    from mcp_gym import sft

    server = f'+env.servers.everything="{npm_bin("mcp-server-everything")} stdio"'
    include = "env.include_tools=[get-sum,echo]"
    gen = tmp_path / "gen"
    assert main(["tasks", "generate", "env=custom", server, include, f"out={gen}", "n=4", "seed=0",
                 "generator.walk_length=3", "generator.max_calls=2", "launcher.progress=false"]) == 0
    tasks = [json.loads(line) for line in (gen / "tasks.jsonl").read_text().splitlines()]
    assert len(tasks) == 4
    assert {c["tool"] for t in tasks for c in json.loads(t["solution"])} <= {"get-sum", "echo"}
    ledger = [json.loads(line) for line in (gen / "proposals.jsonl").read_text().splitlines()]
    assert {c["tool"] for r in ledger for c in r["solution"]} <= {"get-sum", "echo"}  # nothing else even proposed
    common = ["env=custom", server, include, f"env.tasks={gen / 'tasks.jsonl'}"]
    assert main(["tasks", "validate", *common, f"out={tmp_path / 'validate'}"]) == 0
    checks = json.loads((tmp_path / "validate" / "validation.json").read_text())
    assert [c["status"] for c in checks] == ["passed"] * 4
    assert main(["collect", *common, "split=null", "policy=oracle", f"out={tmp_path / 'oracle'}",
                 "launcher.progress=false"]) == 0
    ds = sft.export(tmp_path / "oracle", tmp_path / "data")
    assert len(ds) == 4
    for row in ds:
        assert sorted(t["function"]["name"] for t in row["tools"]) == ["echo", "get-sum", "submit"]
    # what the env shows: the same schemas, in the same order
    env = env_factory(env_config("custom", overrides=[server, include]), [])()
    try:
        env.reset(seed=0)
        assert [t["function"]["name"] for t in ds[0]["tools"]] == [t["function"]["name"] for t in env_tools(env)]
    finally:
        env.close()


@pytest.mark.thirdparty
def test_trl_rollouts_show_the_tools_eval_shows() -> None:
    """What a GRPO rollout shows the model (mcp_gym.trl's tool methods, named as TRL names them) is what eval and the
    SFT examples show: the env's own names (``get-sum``, not a Python identifier) and only the included tools."""
    pytest.importorskip("transformers")
    from mcp_gym.trl import environment_factory

    server = f'+env.servers.everything="{npm_bin("mcp-server-everything")} stdio"'
    make = env_factory(env_config("custom", overrides=[server, "env.include_tools=[get-sum,echo]"]), ["Add."])
    cls = environment_factory(make)
    env = make()
    try:
        env.reset(seed=0)
        assert [t["function"]["name"] for t in cls.openai_tools] == [t["function"]["name"] for t in env_tools(env)]
    finally:
        env.close()
    assert sorted(t["function"]["name"] for t in cls.openai_tools) == ["echo", "get-sum", "submit"]
    rollout = cls()
    try:
        rollout.reset()
        tools = {getattr(rollout, m).__name__: getattr(rollout, m) for m in ("get_sum", "echo", "submit")}
        assert "The sum of 2 and 3 is 5" in tools["get-sum"](a=2, b=3)  # TRL calls a tool by the name it showed
    finally:
        rollout._close()


def test_include_tools_naming_a_tool_no_server_lists_warns_once() -> None:
    with pytest.warns(UserWarning, match=r"include_tools names 'get-count', which no server lists") as seen:
        env = counter_env(include_tools=["get_count", "get-count"])  # the second: a typo of the first
        env.reset(seed=0)
    try:
        assert "(the agent is shown: get_count, submit)" in str(seen[-1].message)
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("error")
            env.reset(seed=1)  # said once
            env.step({"tool": "get_count", "arguments": {}})
    finally:
        env.close()
