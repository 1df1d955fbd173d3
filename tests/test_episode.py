"""The episode's home (``mcp_gym.episode``): every key of ``step``'s info is a documented :class:`StepInfo` field, and
the per-episode state other modules use is public on :class:`~mcp_gym.env.MCPEnv`."""

from __future__ import annotations

import re
from pathlib import Path

import anyio
import gymnasium as gym
import pytest

from mcp_gym import InProcess, MCPEnv
from mcp_gym.envs import load_env_tasks
from mcp_gym.envs.counter.tasks import verify
from mcp_gym.episode import StepInfo
from mcp_gym.servers.counter import make_server

TASKS = load_env_tasks("Counter")[:2]


def counter_env() -> MCPEnv:
    return MCPEnv({"counter": InProcess(make_server(diagnostics=True))}, TASKS, verifier=verify, call_timeout=5.0,
                  observe_resources=["counter://state"])


def test_every_step_info_key_is_a_step_info_field() -> None:
    env = counter_env()
    try:
        env.reset(seed=0, options={"task_id": TASKS[0].id})
        infos = [env.step({"tool": "nope", "arguments": {}}), env.step({"tool": "unlock_bonus", "arguments": {}})]
        infos += [env.step(call) for call in TASKS[0].solution]
        infos.append(env.step({"tool": "add", "arguments": {"amount": 1}}))  # past the end: episode_over
        env.reset(seed=1, options={"task_id": TASKS[1].id})
        infos.append(env.step({"tool": "submit", "arguments": {"answer": "7"}}))
    finally:
        env.close()
    keys = set().union(*(info for *_, info in infos))
    assert {"final_answer", "servers", "summary", "success", "termination"} <= keys  # the run reached them all
    assert keys <= set(StepInfo.__annotations__), keys - set(StepInfo.__annotations__)


def test_step_documents_every_step_info_field() -> None:
    doc = MCPEnv.step.__doc__ or ""
    named = set(re.findall(r"``(\w+)``", doc))
    assert set(StepInfo.__annotations__) <= named, set(StepInfo.__annotations__) - named


def test_the_episode_state_is_public() -> None:
    env = counter_env()
    try:
        assert dict(env.server_templates) == {"counter": env.host.connections["counter"].spec}
        assert env.workspace_servers == frozenset()  # no {workspace} in the command line
        obs, _ = env.reset(seed=0, options={"task_id": TASKS[0].id})
        assert env.transcript == [] and not env.done
        assert env.observed.texts == obs["resources"] and list(env.observed.uris) == ["counter://state"]
        env.step({"tool": "add", "arguments": {"amount": 2}})
        assert [t["tool"] for t in env.transcript] == ["add"] and env.transcript[0]["arguments"] == {"amount": 2}
        state = env.runtime.call(env.state_snapshot)
        assert state["count"] == 2  # the one server with mcp_gym_state: its snapshot
        env.reset(seed=1, options={"task_id": TASKS[1].id})
        assert env.transcript == []  # a fresh transcript per episode
    finally:
        env.close()


def test_aconnect_is_public_and_idempotent() -> None:
    async def main() -> list[str]:
        env = counter_env()  # made on a loop: connects lazily
        try:
            await env.aconnect()
            await env.aconnect()
            return list(env.action_space.tool_names)
        finally:
            await env.aclose()

    assert "add" in anyio.run(main)


# -- the Episode: made by each reset, owning the episode's state -------------------------------------------------------
def test_each_reset_makes_a_new_episode_and_an_old_one_cannot_reach_it() -> None:
    env = counter_env()
    try:
        assert env.episode is None and env.task is None and env.steps == 0 and env.transcript == []
        env.reset(seed=0, options={"task_id": TASKS[0].id})
        first = env.episode
        assert first is not None and first.id == env.episode_id and first.task.id == TASKS[0].id
        env.step({"tool": "add", "arguments": {"amount": 1}})
        env.budget.turn_hint = "reply-1"  # a hint for a step that never came
        env.reset(seed=1, options={"task_id": TASKS[1].id})
        assert env.episode is not first and env.episode_id != first.id
        first.end()  # e.g. a grader still holding the old episode
        first.record_call("add", {"amount": 1}, "late")
        assert not env.done and env.transcript == [] and env.steps == 0 and env.budget.turn_hint is None
        assert first.steps == 1 and [t["result"] for t in first.transcript][-1] == "late"  # the old one keeps its own
    finally:
        env.close()


def test_the_episode_state_on_the_env_is_read_only() -> None:
    env = counter_env()
    try:
        env.reset(seed=0, options={"task_id": TASKS[0].id})
        with pytest.raises(AttributeError, match=r"env\.episode\.done"):
            env.done = True  # type: ignore[misc]  # the point: graders used to write it
        assert not env.done
        env.episode.end()  # type: ignore[union-attr]  # the interface graders use
        assert env.done
    finally:
        env.close()


def test_a_failed_reset_leaves_no_episode_to_step(tmp_path: Path) -> None:
    """A reset that raises (here: a task with a fixture but no {workspace} server) leaves neither the new episode half
    set up nor the old one running: the next step asks for a reset instead of calling a tool."""
    bad = {"id": "bad", "prompt": "p", "fixture": str(tmp_path)}
    env = MCPEnv({"counter": InProcess(make_server())}, [*TASKS, bad], call_timeout=5.0)
    try:
        env.reset(seed=0, options={"task_id": TASKS[0].id})
        env.step({"tool": "add", "arguments": {"amount": 1}})
        with pytest.raises(ValueError, match="has a fixture but no server command line names"):
            env.reset(seed=1, options={"task_id": "bad"})
        with pytest.raises(gym.error.ResetNeeded):
            env.step({"tool": "add", "arguments": {"amount": 1}})
        env.reset(seed=2, options={"task_id": TASKS[0].id})  # and the env still works
        *_, info = env.step({"tool": "add", "arguments": {"amount": 1}})
        assert info["error"] is None and info["step"] == 1
    finally:
        env.close()
