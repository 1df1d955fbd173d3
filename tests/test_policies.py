"""Policies and the async vector env: the openai policy against a local chat-completions server speaking the real
wire format, per-episode deadlines, sessions shared between concurrent episodes, the batched interface."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from _chat_server import serve_chat_completions

from mcp_gym.cli import main
from mcp_gym.client.runtime import default_runtime
from mcp_gym.envs import load_env_tasks, make_env
from mcp_gym.policies import Agent, OraclePolicy, Policy, RandomPolicy
from mcp_gym.recording import RecordTrajectories, load
from mcp_gym.vector import EpisodeResult, EpisodeSpec, VectorMCPEnv


# -- a scripted OpenAI-compatible server ------------------------------------------------------------------------------
def _plan(target: int) -> list[dict[str, Any]]:
    calls, left = [], target
    while left:
        step = max(-5, min(5, left))
        calls.append({"name": "add", "arguments": {"amount": step}})
        left -= step
    return [*calls, {"name": "submit", "arguments": {"answer": str(target)}}]


class ScriptedChat:
    """Solves Counter tasks over ``POST /v1/chat/completions``: first a reply with no tool call, then the solution's
    calls, alternating OpenAI ``tool_calls`` and Hermes ``<tool_call>`` text. Checks every request it gets."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.problems: list[str] = []

    def reply(self, body: dict[str, Any], auth: str | None) -> dict[str, Any]:
        self.requests.append(body)
        msgs = body["messages"]
        if auth != "Bearer sk-test":
            self.problems.append(f"authorization header {auth!r}")
        if {t["function"]["name"] for t in body["tools"]} != {"add", "get_count", "submit"}:
            self.problems.append(f"tools {body['tools']}")
        called = {c["id"] for m in msgs if m["role"] == "assistant" for c in m.get("tool_calls") or ()}
        answered = [m["tool_call_id"] for m in msgs if m["role"] == "tool"]
        if not set(answered) <= called or len(set(answered)) != len(answered):
            self.problems.append(f"tool messages {answered} do not answer the calls {called}")
        if msgs[-1]["role"] == "assistant":
            self.problems.append("the conversation ends with an assistant turn")
        target = int(re.search(r"reach exactly (-?\d+)", msgs[1]["content"]).group(1))
        turn = sum(m["role"] == "assistant" for m in msgs)
        if turn == 0:
            message = {"role": "assistant", "content": "Let me think about the counter first."}
        else:
            call = _plan(target)[len(answered)]
            if turn % 2:
                message = {"role": "assistant", "content": None, "tool_calls": [
                    {"id": f"call_{turn}", "type": "function",
                     "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])}}]}
            else:
                message = {"role": "assistant", "content": f"<tool_call>\n{json.dumps(call)}\n</tool_call>"}
        return {"id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": 0,
                "model": body["model"], "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


@contextmanager
def serve_chat(delay: float = 0.0) -> Iterator[tuple[str, ScriptedChat]]:
    """``(base_url, script)`` of a scripted chat-completions server on 127.0.0.1, answering after ``delay`` s."""
    script = ScriptedChat()
    with serve_chat_completions(lambda body, headers: script.reply(body, headers.get("Authorization")),
                                delay=delay) as url:
        yield url, script


@pytest.fixture
def chat_server() -> Iterator[tuple[str, ScriptedChat]]:
    with serve_chat() as served:
        yield served


def test_openai_policy_eval(chat_server: tuple[str, ScriptedChat], tmp_path: Path) -> None:
    url, script = chat_server
    out = tmp_path / "eval"
    code = main(["eval", "env=counter", "env.transport=inprocess", "policy=openai", f"policy.base_url={url}",
                 "policy.model=scripted", "policy.api_key=sk-test", "samples=2", "episodes=6", f"out={out}",
                 "launcher.num_envs=3", "launcher.progress=false", "plots=false"])
    assert code == 0
    assert script.problems == []
    summary = json.loads((out / "report" / "results.json").read_text())["summary"]
    assert summary["episodes"] == 6 and summary["success_rate"] == 1.0
    assert summary["parse_error_rate"] > 0  # every episode starts with a reply without a tool call
    rec = load(out)
    assert set(rec.episodes["policy"]) == {"openai:scripted"}
    for ep in rec.episodes:
        steps = rec.episode_steps(ep["episode_id"])
        assert steps[0]["parse_status"] == "no_tool_call" and steps[0]["is_error"]
        assert steps[0]["raw_text"] == "Let me think about the counter first."
        assert all(s["parse_status"] == "ok" for s in steps[1:])
        assert any("<tool_call>" in s["raw_text"] for s in steps[1:]) or len(steps) == 2
        assert steps[-1]["terminated"]  # the counter reached its target
    assert all(r["seed"] is not None and r["model"] == "scripted" for r in script.requests)


# -- the vector env ---------------------------------------------------------------------------------------------------
class _StuckAgent(Agent):
    async def act(self, obs: Any, info: Any) -> dict[str, Any]:
        await anyio.sleep(3600)
        raise AssertionError("unreachable")


class StuckOnFirstTask(Policy):
    """The oracle, except that it hangs in the episodes of one task."""

    name = "stuck"

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id

    def agent(self, env: Any, obs: Any, info: Any, seed: int) -> Agent:
        if env.task.id == self.task_id:
            return _StuckAgent()
        return OraclePolicy().agent(env, obs, info, seed)


def _run(vec_fn: Any, policy: Policy, specs: list[EpisodeSpec], timeout: float | None = None) -> list[EpisodeResult]:
    results: list[EpisodeResult] = []

    async def go() -> None:
        async with vec_fn() as vec:
            await vec.run(policy, specs, on_result=results.append, episode_timeout=timeout)

    default_runtime().call(go)
    return results


def _specs(n: int) -> list[EpisodeSpec]:
    tasks = load_env_tasks("Counter", "train")
    return [EpisodeSpec(f"{t.id}#0", t.id, i) for i, t in enumerate(tasks[:n])]


@pytest.mark.slow  # the heavy lane: the fast lane stays under 5 min
def test_a_stuck_episode_is_truncated_without_stalling_the_others(tmp_path: Path) -> None:
    specs = _specs(6)
    stuck = specs[0].task_id
    results = _run(lambda: VectorMCPEnv(lambda i: RecordTrajectories(make_env("Counter"), tmp_path), 2),
                   StuckOnFirstTask(stuck), specs, timeout=10.0)  # every other episode must end within it
    by_task = {r.task_id: r for r in results}
    assert len(results) == 6
    assert by_task[stuck].termination == "deadline" and by_task[stuck].success is False
    assert all(r.success and r.termination == "done" for r in results if r.task_id != stuck)
    episodes = load(tmp_path).episodes
    assert sorted(episodes["episode_key"]) == sorted(s.key for s in specs)
    assert {e["termination"] for e in episodes if e["task_id"] == stuck} == {"deadline"}


def test_episodes_share_one_stdio_server(tmp_path: Path) -> None:
    """Four concurrent envs on one server process: each episode sees its own counter."""
    results = _run(lambda: VectorMCPEnv(lambda i: RecordTrajectories(make_env("Counter", "stdio"), tmp_path), 4,
                                        share_servers=1), OraclePolicy(), _specs(12))
    assert len(results) == 12 and all(r.success for r in results)
    rec = load(tmp_path)
    servers = {json.loads(s)["testing"]["target"] for s in rec.episodes["servers"]}
    assert len(servers) == 1 and "mcp_gym.servers.counter" in servers.pop()
    for step in rec.steps:
        if step["tool"] == "add":
            count = json.loads(step["structured_content"])["count"]
            assert json.loads(step["resources"])["counter://state"].startswith(f"count={count} ")


def test_batched_interface() -> None:
    async def go() -> None:
        async with VectorMCPEnv(lambda i: make_env("Counter"), 3) as vec:
            obs, infos = await vec.areset(seed=0)
            assert len(obs["task"]) == 3 and len(set(infos["episode_id"])) == 3
            actions = [{"tool": "add", "arguments": {"amount": 1}, "raw_text": "add 1", "parse_status": "ok"}] * 3
            obs, rewards, terminated, truncated, infos = await vec.astep(actions)
            assert list(infos["error"]) == [None] * 3
            assert all(r["counter://state"].startswith("count=1 ") for r in obs["resources"])

    default_runtime().call(go)


def test_random_policy_is_seeded_per_episode() -> None:
    env = make_env("Counter")
    obs, info = env.reset(seed=0)

    async def actions(seed: int) -> list[dict[str, Any]]:
        agent = RandomPolicy().agent(env, obs, info, seed)
        return [await agent.act(obs, info) for _ in range(5)]

    assert anyio.run(actions, 7) == anyio.run(actions, 7) != anyio.run(actions, 8)
    env.close()
