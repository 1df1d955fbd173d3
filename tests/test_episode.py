"""The episode's home (``mcp_gym.episode``): every key of ``step``'s info is a documented :class:`StepInfo` field, and
the per-episode state other modules use is public on :class:`~mcp_gym.env.MCPEnv`."""

from __future__ import annotations

import re

import anyio

from mcp_gym import InProcess, MCPEnv
from mcp_gym.envs import load_env_tasks
from mcp_gym.envs.counter.server import make_server
from mcp_gym.envs.counter.tasks import verify
from mcp_gym.episode import StepInfo

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
