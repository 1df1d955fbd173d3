"""Every bundled env end to end through ``mcp_gym.make_env`` / ``gymnasium.make`` (in-process servers, real MCP).

For each of Counter, Notes, Files, SQL, Code and Maze: the reference solution of EVERY task succeeds, a seeded random
policy (``env.action_space.sample()``) scores far below it, Gymnasium's ``check_env`` passes, and the task set exports
to JSONL that ``datasets`` loads (both splits, unique ids, deterministic generation). Plus: the Code env ignores
``run_tests``' per-step reward (``STEP_REWARDS = False``), so it cannot be farmed.

Run with ``-s`` to see the measured numbers (reference/random success and returns per env).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import mcp_gym
from mcp_gym.envs import BUNDLED_ENVS, PenaltyOnlyReward, env_module, export_tasks, load_env_tasks
from mcp_gym.rewards import ConventionReward
from mcp_gym.tasks import Task

ENV_NAMES = list(BUNDLED_ENVS)
RANDOM_EPISODES = 20
RANDOM_SEED = 0


# Code's env (every task's tests run in bubblewrap) is the long one: the heavy lane runs it here, the fast lane through
# tests/test_server_code.py (its reference solutions and sandbox) and the Code rows of the parametrized tests below.
@pytest.fixture(scope="module",
                params=[pytest.param(n, marks=pytest.mark.slow) if n == "Code" else n for n in ENV_NAMES])
def bundled(request: pytest.FixtureRequest) -> Iterator[tuple[str, Any]]:
    """(name, env) for each bundled env, one in-process env per name shared by the tests of this module."""
    env = mcp_gym.make_env(request.param)
    yield request.param, env
    env.close()


def run_solution(env: Any, task: Task) -> tuple[dict[str, Any], float, int]:
    """Step the task's reference solution; stop early when a step ends the episode (e.g. the server's ``done``).

    Returns the last info, the total reward and the number of steps taken."""
    env.reset(options={"task_id": task.id})
    total, info, n = 0.0, {}, 0
    for n, call in enumerate(task.solution, 1):
        _, reward, terminated, truncated, info = env.step(call)
        total += float(reward)
        assert info["error"] is None, f"{task.id} step {n} {call['tool']}: {info['error']}"
        if terminated or truncated:
            assert not truncated, f"{task.id}: truncated ({info['termination']}) after {n} steps"
            break
    return info, total, n


def test_every_reference_solution_succeeds(bundled: tuple[str, Any]) -> None:
    name, env = bundled
    start = time.perf_counter()
    returns, early = [], 0
    for task in env.tasks:
        info, total, n = run_solution(env, task)
        assert info.get("success") is True, f"{name} {task.id}: {info.get('termination')} {info.get('error')}"
        assert info["summary"]["return"] == pytest.approx(total) and info["summary"]["length"] == n
        if n < len(task.solution):  # ended by the server's done before the submit step
            assert info["termination"] == "done"
            early += 1
        else:
            assert task.solution[-1]["tool"] == "submit" and info["termination"] == "submit"
        returns.append(total)
    mean = sum(returns) / len(returns)
    print(f"\n[reference] {name}: {len(returns)}/{len(env.tasks)} tasks succeeded, mean return {mean:.3f} "
          f"(min {min(returns):.3f}), {early} ended by done before submit, {time.perf_counter() - start:.1f} s")
    assert len(returns) == len(env.tasks) >= 100
    assert min(returns) > 0.5  # a solved task is worth about 1 (minus small step costs)


def test_random_policy_scores_far_below_reference(bundled: tuple[str, Any]) -> None:
    name, env = bundled
    env.action_space.seed(RANDOM_SEED)
    successes, returns, lengths = 0, [], []
    for ep in range(RANDOM_EPISODES):
        env.reset(seed=RANDOM_SEED + ep)
        total, done, info = 0.0, False, {}
        while not done:
            _, reward, terminated, truncated, info = env.step(env.action_space.sample())
            total += float(reward)
            done = terminated or truncated
        successes += info.get("success") is True
        returns.append(total)
        lengths.append(info["summary"]["length"])
    rate, mean = successes / RANDOM_EPISODES, sum(returns) / RANDOM_EPISODES
    print(f"\n[random] {name}: success {rate:.2f}, mean return {mean:.3f}, mean length "
          f"{sum(lengths) / len(lengths):.1f} over {RANDOM_EPISODES} episodes (reference: success 1.00)")
    assert rate < 0.2
    assert mean < 0.3  # the reference solutions earn > 0.5 on every task


@pytest.mark.parametrize("name", ENV_NAMES)
def test_gym_make_and_check_env(name: str) -> None:
    env = gym.make(f"mcp_gym/{name}-v0")
    try:
        assert env.spec is not None and env.spec.nondeterministic
        check_env(env.unwrapped, skip_render_check=True)
        obs, info = env.reset(seed=0)
        assert env.observation_space.contains(obs) and "submit" in env.action_space.tool_names
        obs, _, _, _, info = env.step(env.action_space.sample())  # through gym.make's wrappers
        assert env.observation_space.contains(obs) and "error" in info and "tools_changed" in info
    finally:
        env.close()
    test_env = gym.make(f"mcp_gym/{name}-v0", split="test")
    try:
        assert test_env.unwrapped.tasks and {t.split for t in test_env.unwrapped.tasks} == {"test"}
    finally:
        test_env.close()


@pytest.mark.parametrize("name", ENV_NAMES)
def test_task_set_loads_with_datasets(name: str, tmp_path: Path) -> None:
    import datasets

    datasets.disable_progress_bars()
    tasks = load_env_tasks(name)
    path = export_tasks(name, tmp_path)
    ds = datasets.load_dataset("json", data_files=str(path), split="train", cache_dir=str(tmp_path / "cache"))
    assert ds.num_rows == len(tasks) >= 100
    assert set(ds["split"]) == {"train", "test"}
    assert len(set(ds["id"])) == ds.num_rows
    assert [Task.from_record(r) for r in ds] == tasks  # nothing lost on the way through Arrow
    n_test = sum(t.split == "test" for t in tasks)
    assert 0 < n_test < len(tasks) - n_test
    mod = env_module(name)
    again = mod.generate_tasks(0)
    assert [t.to_record() for t in again] == [t.to_record() for t in tasks]  # deterministic generation
    assert all(mod.task_by_id(t.id) == t for t in tasks[:10])
    assert all(t.solution and t.prompt for t in tasks)


# -- Code: run_tests' per-step reward cannot be farmed --------------------------------------------------------------

def _write(task: Task, content: str) -> dict[str, Any]:
    return {"tool": "write_file", "arguments": {"path": task.data["file"], "content": content}}


@pytest.mark.bwrap
def test_code_env_ignores_run_tests_step_rewards() -> None:
    env = gym.make("mcp_gym/Code-v0")
    try:
        assert isinstance(env.unwrapped.reward_fn, PenaltyOnlyReward)
        task = env.unwrapped.tasks[0]
        assert task.data["entry"] == "sum_above"
        wrong = f"def {task.data['entry']}(xs):\n    return 0\n"  # passes only the tests whose answer is 0
        expected_score = sum(t["expected"] == 0 for t in task.data["tests"]) / len(task.data["tests"])
        assert 0 < expected_score < 1
        for code, score in ((task.data["reference"], 1.0), (wrong, expected_score)):
            env.reset(seed=0, options={"task_id": task.id})
            _, reward, *_ = env.step(_write(task, code))
            rewards = [reward]
            for _ in range(5):
                _, reward, terminated, _, info = env.step({"tool": "run_tests", "arguments": {}})
                assert not terminated and info["structured_content"]["reward"] == pytest.approx(score)
                rewards.append(reward)
            assert rewards == [0.0] * 6
            _, reward, terminated, _, info = env.step({"tool": "submit", "arguments": {"answer": "done"}})
            assert terminated and reward == pytest.approx(score) == info["verifier_reward"]
            assert info["summary"]["return"] == pytest.approx(score)
            assert info["success"] is (score == 1.0)
    finally:
        env.close()
    # failed calls still cost error_penalty; an explicit reward_fn= overrides the module's STEP_REWARDS
    penalised = mcp_gym.make_env("Code", error_penalty=0.1)
    farmed = mcp_gym.make_env("Code", reward_fn=ConventionReward())
    try:
        penalised.reset(options={"task_id": task.id})
        _, reward, *_ = penalised.step({"tool": "no_such_tool", "arguments": {}})
        assert reward == pytest.approx(-0.1)
        farmed.reset(options={"task_id": task.id})
        farmed.step(_write(task, task.data["reference"]))
        _, reward, *_ = farmed.step({"tool": "run_tests", "arguments": {}})
        assert reward == pytest.approx(1.0)
    finally:
        penalised.close()
        farmed.close()
