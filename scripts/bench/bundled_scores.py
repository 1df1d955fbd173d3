"""Reference vs random scores of every bundled env, as the README's markdown table.

For each env (in-process server, real MCP): the reference solution of every task (or ``--max-tasks`` of them), and two
seeded random policies over ``--episodes`` episodes: ``env.action_space.sample()`` (uniform over the tools, ``submit``
included, so episodes often end early) and a stronger "tools-only" random policy that never submits before the last
step (random tool calls until ``MAX_STEPS - 1``, then ``submit`` with an empty answer).

    python scripts/bench/bundled_scores.py                  # all envs, 20 random episodes per policy
    python scripts/bench/bundled_scores.py --envs Maze Code --episodes 50
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

import mcp_gym
from mcp_gym.envs import BUNDLED_ENVS, env_module

REWARDS: dict[str, str] = {
    "Counter": "-0.01 per `add`, +1 and `done` at the target",
    "Notes": "verifier at `submit`, 0..1 (partial credit for store/tag tasks)",
    "Files": "verifier at `submit`, 0..1 (partial credit for organise tasks)",
    "SQL": "verifier at `submit`: exact answer, 0/1",
    "Code": "verifier at `submit`: passed/total of the last `run_tests` on unchanged code (step rewards off)",
    "Maze": "-0.01 per move, +1 and `done` at the goal",
    "Lookup": "verifier at `submit`: the asked account's code, 0/1",
}
"""How each env rewards (written by hand from the env modules)."""


def run_reference(env: Any, max_tasks: int | None) -> tuple[float, float, set[str]]:
    """Success rate and mean return of the reference solutions; also the tool names seen along the way."""
    tasks = env.tasks if max_tasks is None else env.tasks[:: max(1, len(env.tasks) // max_tasks)][:max_tasks]
    wins, total, seen = 0, 0.0, set()
    for task in tasks:
        env.reset(options={"task_id": task.id})
        seen.update(env.action_space.tool_names)
        info: dict[str, Any] = {}
        for call in task.solution:
            _, reward, terminated, truncated, info = env.step(call)
            seen.update(env.action_space.tool_names)
            total += float(reward)
            if terminated or truncated:
                break
        wins += info.get("success") is True
    return wins / len(tasks), total / len(tasks), seen


def run_random(env: Any, episodes: int, seed: int, tools_only: bool) -> tuple[float, float]:
    """Success rate and mean return of a seeded random policy (``tools_only``: no ``submit`` before the last step)."""
    env.action_space.seed(seed)
    wins, total = 0, 0.0
    for ep in range(episodes):
        env.reset(seed=seed + ep)
        done, info = False, {}
        while not done:
            if not tools_only:
                action = env.action_space.sample()
            elif env.steps >= env.max_steps - 1:
                action = {"tool": "submit", "arguments": {"answer": ""}}
            else:
                action = env.action_space.sample(mask=[n for n in env.action_space.tool_names if n != "submit"])
            _, reward, terminated, truncated, info = env.step(action)
            total += float(reward)
            done = terminated or truncated
        wins += info.get("success") is True
    return wins / episodes, total / episodes


def measure(name: str, episodes: int, seed: int, max_tasks: int | None) -> dict[str, Any]:
    """All numbers of one env."""
    start = time.perf_counter()
    env = mcp_gym.make_env(name)
    try:
        ref_success, ref_return, tools = run_reference(env, max_tasks)
        rnd_success, rnd_return = run_random(env, episodes, seed, tools_only=False)
        tools_success, tools_return = run_random(env, episodes, seed, tools_only=True)
    finally:
        env.close()
    mod = env_module(name)
    tasks = mod.generate_tasks(0)
    order = [t for t in env.action_space.tool_names if t in tools] + sorted(tools - set(env.action_space.tool_names))
    return {
        "env": name,
        "tools": [t for t in order if t != "submit"] + ["submit"],
        "observation": ", ".join(f"`{u}`" for u in mod.OBSERVE_RESOURCES) or "result text only",
        "reward": REWARDS.get(name, ""),
        "train": sum(t.split == "train" for t in tasks),
        "test": sum(t.split == "test" for t in tasks),
        "max_steps": mod.MAX_STEPS,
        "reference_success": ref_success,
        "reference_return": ref_return,
        "random_success": rnd_success,
        "random_return": rnd_return,
        "tools_only_success": tools_success,
        "tools_only_return": tools_return,
        "seconds": time.perf_counter() - start,
    }


def markdown(rows: Sequence[dict[str, Any]], episodes: int) -> str:
    """The README table."""
    out = [
        "| env | tools | observation | reward | tasks (train/test) | random success | reference success |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        tools = ", ".join(f"`{t}`" for t in r["tools"])
        rnd = f"{r['random_success']:.2f} / {r['tools_only_success']:.2f}"
        out.append(f"| {r['env']} | {tools} | {r['observation']} | {r['reward']} | {r['train']}/{r['test']} | {rnd} "
                   f"| {r['reference_success']:.2f} |")
    out.append(f"\nRandom success: uniform `action_space.sample()` / tools-only random (no `submit` before the last "
               f"step), {episodes} seeded episodes each; reference: every task's reference solution.")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Measure the chosen envs and print a detail table and the README table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--envs", nargs="+", default=list(BUNDLED_ENVS), choices=list(BUNDLED_ENVS))
    p.add_argument("--episodes", type=int, default=20, help="random episodes per policy")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-tasks", type=int, default=None, help="reference solutions of this many tasks (default all)")
    args = p.parse_args(argv)
    rows = []
    print(f"{'env':<8} {'ref succ':>8} {'ref ret':>8} {'rnd succ':>8} {'rnd ret':>8} {'tools succ':>10} "
          f"{'tools ret':>9} {'time':>6}")
    for name in args.envs:
        r = measure(name, args.episodes, args.seed, args.max_tasks)
        rows.append(r)
        print(f"{name:<8} {r['reference_success']:>8.2f} {r['reference_return']:>8.3f} {r['random_success']:>8.2f} "
              f"{r['random_return']:>8.3f} {r['tools_only_success']:>10.2f} {r['tools_only_return']:>9.3f} "
              f"{r['seconds']:>5.1f}s", flush=True)
    print()
    print(markdown(rows, args.episodes))
    return rows


if __name__ == "__main__":
    main()
