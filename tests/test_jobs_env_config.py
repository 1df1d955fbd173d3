"""From an env config to an env, the one way the jobs take (``mcp_gym.jobs.env_config``, ``server_specs``,
``env_factory``): a bundled env's config, and a custom benchmark's config file whose server works in ``{workspace}``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from mcp_gym import Stdio
from mcp_gym.jobs import env_config, env_factory, server_specs
from mcp_gym.jobs.config import needs_own_sessions
from mcp_gym.jobs.schema import ConfigError

FS_SERVER = ROOT / "tests" / "servers" / "fs_server.py"  # a filesystem server serving the folder it is given


def test_a_bundled_envs_config_gives_its_server_and_a_working_env() -> None:
    env_cfg = env_config("counter", overrides=["env.connect_timeout=120"])
    specs = server_specs(env_cfg)
    assert list(specs) == ["testing"] and isinstance(specs["testing"], Stdio)  # conf/env/counter.yaml: stdio
    assert list(specs["testing"].args) == ["-m", "mcp_gym.servers.counter"]
    assert specs["testing"].connect_timeout == 120
    env = env_factory(env_cfg)()
    try:
        assert env.max_steps == 10 and env.server_templates == specs  # max_steps: null is the env's own
        env.reset(seed=0, options={"task_id": "counter-0000"})
        for call in env.task.solution:
            _, _, terminated, _, info = env.step(call)
            if terminated:
                break
        assert info["success"] is True
    finally:
        env.close()


def _benchmark(folder: Path) -> Path:
    """A custom benchmark as a config file ``<folder>/env/fsbench.yaml``: a server started per episode in its
    ``{workspace}`` (the task's fixture copied in), graded on the files it leaves."""
    (folder / "initial").mkdir(parents=True)
    (folder / "initial" / "in.txt").write_text("hello", encoding="utf-8")
    task = {"id": "copy", "prompt": "Copy in.txt to out.txt in {workspace}.", "fixture": "initial",
            "grader": {"kind": "files", "expect": {"out.txt": "hello"}},
            "solution": [{"tool": "read_file", "arguments": {"path": "{workspace}/in.txt"}},
                         {"tool": "write_file", "arguments": {"path": "{workspace}/out.txt", "content": "hello"}}]}
    (folder / "tasks.jsonl").write_text(json.dumps(task) + "\n", encoding="utf-8")
    (folder / "env").mkdir()
    (folder / "env" / "fsbench.yaml").write_text(
        "defaults:\n  - custom\n  - _self_\nname: fsbench\n"
        f"servers:\n  fs: {sys.executable} {FS_SERVER} {{workspace}}\n"
        f"tasks: {folder / 'tasks.jsonl'}\nmax_steps: 5\n", encoding="utf-8")
    return folder


def test_a_custom_benchmark_config_file_gives_specs_that_make_a_working_env(tmp_path: Path) -> None:
    env_cfg = env_config("fsbench", config_dir=_benchmark(tmp_path / "bench"))
    specs = server_specs(env_cfg)
    assert specs == {"fs": Stdio(sys.executable, [str(FS_SERVER), "{workspace}"], connect_timeout=30.0)}
    assert needs_own_sessions(env_cfg, [])  # the {workspace} server: a session per episode
    env = env_factory(env_cfg)()
    try:
        assert (env.max_steps, env.env_id, env.workspace_servers) == (5, "mcp_gym/fsbench", frozenset({"fs"}))
        env.reset(seed=0, options={"task_id": "copy"})
        assert env.workspace is not None and (env.workspace / "in.txt").read_text() == "hello"
        for call in env.task.solution:
            env.step(call)
        *_, info = env.step({"tool": "submit", "arguments": {"answer": "done"}})
        assert info["success"] is True and (env.workspace / "out.txt").read_text() == "hello"
    finally:
        env.close()


def test_the_commands_overrides_compose_as_on_the_command_line(tmp_path: Path) -> None:
    server = f'+env.servers.fs="{sys.executable} {FS_SERVER} {{workspace}}"'
    env_cfg = env_config("custom", overrides=[server, "env.max_steps=3", "env.connect_timeout=60"])
    assert list(server_specs(env_cfg)["fs"].args) == [str(FS_SERVER), "{workspace}"]
    assert server_specs(env_cfg)["fs"].connect_timeout == 60.0 and env_cfg["max_steps"] == 3
    with pytest.raises(ConfigError, match="max_stepz"):
        env_config("custom", overrides=["+env.max_stepz=3"])
    with pytest.raises(ValueError, match="server 'x'"):
        server_specs({"servers": {"x": {"headers": {"a": "b"}}}})  # neither url nor command


def test_env_config_works_inside_a_hydra_app_and_leaves_its_state() -> None:
    """A trainer's entry point is often a Hydra app (verl's is): composing the env there neither fails nor ends the
    app's own Hydra."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    with initialize_config_module("mcp_gym.conf", version_base="1.3"):
        outer = GlobalHydra.instance().hydra
        assert env_config("counter")["name"] == "Counter"
        assert GlobalHydra.instance().hydra is outer
        assert compose("config", overrides=["env=sql"]).env.name == "SQL"  # the app's Hydra still composes
    assert not GlobalHydra.instance().is_initialized()
