"""MCPEnv's settings in groups (``limits=Limits(...)``, ``scoring=Scoring(...)``, ``connection=Connection(...)``): the
same env as the keyword form, a setting given twice refused, and the groups travel through ``gymnasium.make``, an
env's ``spec`` and a vector env's worker processes."""

from __future__ import annotations

import math
import pickle
import subprocess
import sys
from typing import Any

import gymnasium as gym
import pytest

import mcp_gym
from mcp_gym import Connection, InProcess, Limits, MCPEnv, Scoring, Stdio
from mcp_gym.envs.counter.tasks import verify
from mcp_gym.servers.counter import make_server

GET = {"tool": "get_count", "arguments": {}}
BAD = {"tool": "add", "arguments": {"amount": 99}}  # refused before any call: add takes -5..5


def _counter(**kw: Any) -> MCPEnv:
    return MCPEnv({"counter": InProcess(make_server())}, ["Move the counter to 3."], **kw)


def _play(env: MCPEnv, actions: list[dict[str, Any]]) -> list[tuple[float, bool, bool, str | None, Any]]:
    env.reset(seed=0)
    out = []
    for action in actions:
        _, reward, terminated, truncated, info = env.step(action)
        out.append((float(reward), terminated, truncated, info.get("termination"), (info["error"] or {}).get("kind")))
    return out


@pytest.mark.parametrize(("grouped", "keywords"), [
    ({"limits": Limits(max_steps=3)}, {"max_steps": 3}),
    ({"limits": Limits(max_tool_calls=2)}, {"max_tool_calls": 2}),
    ({"scoring": Scoring(error_penalty=0.25)}, {"error_penalty": 0.25}),
    ({"limits": Limits(max_steps=2), "scoring": Scoring(error_penalty=0.5)}, {"max_steps": 2, "error_penalty": 0.5}),
])
def test_the_grouped_form_and_the_keywords_make_the_same_env(grouped: dict[str, Any], keywords: dict[str, Any]) -> None:
    actions = [GET, BAD, GET, GET]
    new, old, default = _counter(**grouped), _counter(**keywords), _counter()
    try:
        played = _play(new, actions)
        assert played == _play(old, actions)
        assert played != _play(default, actions)  # the setting changed what the episode does
    finally:
        for env in (new, old, default):
            env.close()


def test_max_steps_in_limits_truncates_at_that_step() -> None:
    env = _counter(limits=Limits(max_steps=2))
    try:
        assert [(t, end) for _, _, t, end, _ in _play(env, [GET, GET])] == [(False, None), (True, "max_steps")]
        assert env.max_steps == 2 and env.call_timeout == 30.0  # an unset field keeps its default
    finally:
        env.close()


def test_connection_and_scoring_groups_reach_the_env() -> None:
    env = _counter(connection=Connection(prefix_tools=True, reset_mode="none"),
                   scoring=Scoring(verifier=verify, success_threshold=0.5), limits=Limits(call_timeout=math.inf))
    try:
        env.reset(seed=0)
        assert "counter__add" in env.action_space.tool_names
        assert (env.reset_mode, env.verifier, env.success_threshold, env.call_timeout) == ("none", verify, 0.5, None)
    finally:
        env.close()


def test_a_setting_given_both_ways_is_one_line_naming_it() -> None:
    with pytest.raises(TypeError) as caught:
        _counter(limits=Limits(max_steps=5), max_steps=5)
    message = str(caught.value)
    assert "\n" not in message and "max_steps" in message and "limits=" in message, message
    with pytest.raises(TypeError, match="error_penalty"):
        _counter(scoring={"error_penalty": 1.0}, error_penalty=0.5)  # a mapping (a config) works as the group
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_step'"):
        _counter(max_step=5)
    with pytest.raises(TypeError, match=r"limits= takes an mcp_gym\.Limits"):
        _counter(limits=5)


def test_gym_make_keeps_a_bundled_envs_own_defaults_under_a_group() -> None:
    maze = gym.make("mcp_gym/Maze-v0", limits=Limits(call_timeout=5.0))
    counter = gym.make("mcp_gym/Counter-v0", limits=Limits(max_steps=3), scoring=Scoring(success_threshold=0.5))
    try:
        assert (maze.unwrapped.max_steps, maze.unwrapped.call_timeout) == (60, 5.0)  # Maze's MAX_STEPS kept
        assert counter.unwrapped.verifier is verify  # the env's own verifier, threshold from the group
        assert (counter.unwrapped.max_steps, counter.unwrapped.success_threshold) == (3, 0.5)
        with pytest.raises(TypeError, match="max_steps"):
            gym.make("mcp_gym/Counter-v0", limits=Limits(max_steps=3), max_steps=4)
    finally:
        maze.close()
        counter.close()


def test_the_spec_rebuilds_the_same_env_and_pickles() -> None:
    spec = Stdio.python_module("mcp_gym.servers.counter")
    env = MCPEnv({"counter": spec}, ["t"], limits=Limits(max_steps=2), scoring=Scoring(error_penalty=0.5))
    try:
        assert env.spec is not None and env.spec.kwargs["limits"] == Limits(max_steps=2)
        copy = pickle.loads(pickle.dumps(env.spec))
        rebuilt = gym.make(copy).unwrapped
        try:
            assert (rebuilt.max_steps, rebuilt.error_penalty) == (2, 0.5)
            assert _play(rebuilt, [BAD, GET]) == _play(env, [BAD, GET])
        finally:
            rebuilt.close()
    finally:
        env.close()
    old = MCPEnv({"counter": InProcess(make_server())}, ["t"], max_steps=2)  # the keyword form is recorded as given
    try:
        assert old.spec is not None and old.spec.kwargs["max_steps"] == 2
    finally:
        old.close()


@pytest.mark.slow  # the heavy lane: the fast lane stays under 5 min
def test_groups_reach_the_worker_processes_of_a_vector_env() -> None:
    """``gym.make_vec(..., vectorization_mode="async")`` with spawned workers pickles the kwargs: the limit holds in
    each worker."""
    code = """if True:
        import gymnasium as gym, mcp_gym
        from mcp_gym import Limits
        vec = gym.make_vec("mcp_gym/Counter-v0", num_envs=2, vectorization_mode="async", limits=Limits(max_steps=2),
                           vector_kwargs={"shared_memory": False, "context": "spawn"})
        vec.reset(seed=0)
        get = [{"tool": "get_count", "arguments": {}}] * 2
        print([vec.step(get)[3].tolist() for _ in range(2)])
        vec.close()
    """
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[[False, False], [True, True]]"
    assert mcp_gym.Limits is Limits


def test_a_trainer_faces_env_kwargs_take_a_group_as_a_mapping() -> None:
    """A trainer's YAML config gives the faces plain mappings: ``env_kwargs: {limits: {max_steps: 2}}``."""
    from mcp_gym.textenv import resolve_env_factory

    env = resolve_env_factory("Counter", {"limits": {"max_steps": 2}, "scoring": {"error_penalty": 0.5}})()
    try:
        assert (env.max_steps, env.error_penalty, env.verifier) == (2, 0.5, verify)
        assert [(r, t) for r, _, t, _, _ in _play(env, [BAD, GET])] == [(-0.5, False), (0.0, True)]
    finally:
        env.close()


def test_a_clash_of_prefixed_names_says_which_server_to_rename() -> None:
    """Server 'a' with tool 'b__c' and server 'a__b' with tool 'c' are both 'a__b__c' although names are prefixed:
    the second is skipped, and the reason names the tool and the alias to change (it advised prefix_tools=True, which
    was already on)."""
    from mcp.server.mcpserver import MCPServer

    one, two = MCPServer("one"), MCPServer("two")
    one.tool(name="b__c")(lambda: "from one")
    two.tool(name="c")(lambda: "from two")
    env = MCPEnv({"a": InProcess(one), "a__b": InProcess(two)}, ["t"])
    try:
        _, info = env.reset(seed=0)
        assert env.action_space.tool_names == ["a__b__c", "submit"]
        [skipped] = info["servers"]["a__b"]["skipped_tools"]
        assert skipped["name"] == "c" and "prefix_tools" not in skipped["reason"], skipped
        assert "server 'a'" in skipped["reason"] and "'b__c'" in skipped["reason"], skipped
        assert "rename server 'a__b'" in skipped["reason"], skipped
    finally:
        env.close()
