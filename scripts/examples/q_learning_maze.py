"""Tabular Q-learning on the bundled Maze env (CleanRL-style: one readable file, no framework).

The Maze server (``mcp_gym.servers.maze``) is a key-and-door gridworld reached through real MCP tool calls. Its
``maze://state`` resource, observed on every step, ends with a status line such as::

    Status: position (3, 3); key: held; door: locked; goal: not reached

which identifies the full state of a fixed layout, so (task id, status line) is a hashable tabular state. The actions
are the five tool calls ``move(up|down|left|right)`` and ``unlock`` (``submit`` is left out: an episode ends when the
server reports ``done`` on reaching the goal, or is truncated after ``MAX_STEPS``). ``unlock`` is only offered once
the key is held; calling it earlier is an invalid action, which the env answers with an error observation and, here,
an ``error_penalty`` equal to the move cost. Rewards: -0.01 per move, +1.0 on reaching the goal.

Plain epsilon-greedy Q-learning with a linearly decaying epsilon, a fixed seed and a fixed episode budget; it prints
the success rate per block of episodes (random level at the start, >= 90 % at the end) and the greedy policy's result.

    python scripts/examples/q_learning_maze.py                       # defaults: maze-5x5-0006, 200 episodes
    python scripts/examples/q_learning_maze.py --task-id maze-5x5-0000 --task-id maze-5x5-0003 --plot curve.png
"""

from __future__ import annotations

import argparse
import random
import re
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import mcp_gym

ACTIONS: list[dict[str, Any]] = [
    *({"tool": "move", "arguments": {"direction": d}} for d in ("up", "down", "left", "right")),
    {"tool": "unlock", "arguments": {}},
]
"""The discrete action set: index -> tool call."""
ACTION_NAMES = ["up", "down", "left", "right", "unlock"]
STATE_URI = "maze://state"
STATUS_LINE = re.compile(r"^Status: (.+)$", re.MULTILINE)
DEFAULT_TASKS = ["maze-5x5-0006"]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line flags (all have defaults, so the script runs as is)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--episodes", type=int, default=200, help="training episodes (the fixed budget)")
    p.add_argument("--seed", type=int, default=0, help="seed of exploration, tie-breaking and the env")
    p.add_argument("--task-id", action="append", dest="task_ids", metavar="ID",
                   help=f"Maze task id to train on (repeatable; default {DEFAULT_TASKS[0]})")
    p.add_argument("--plot", metavar="PATH", help="save the learning curve as a PNG (matplotlib, Agg backend)")
    p.add_argument("--block", type=int, default=20, help="episodes per row of the progress table")
    p.add_argument("--alpha", type=float, default=0.5, help="learning rate")
    p.add_argument("--gamma", type=float, default=0.98, help="discount factor")
    p.add_argument("--eps-start", type=float, default=1.0, help="initial exploration rate")
    p.add_argument("--eps-end", type=float, default=0.02, help="final exploration rate")
    p.add_argument("--eps-fraction", type=float, default=0.5, help="fraction of the episodes over which epsilon decays")
    return p.parse_args(argv)


def state_key(task_id: str, obs: dict[str, Any]) -> tuple[str, str]:
    """The tabular state: the task (layout) and the status line of the observed ``maze://state`` resource."""
    m = STATUS_LINE.search(obs["resources"][STATE_URI])
    if m is None:
        raise ValueError(f"no status line in {STATE_URI}: {obs['resources'][STATE_URI]!r}")
    return task_id, m.group(1)


def epsilon_at(episode: int, args: argparse.Namespace) -> float:
    """Linear decay from ``eps_start`` to ``eps_end`` over the first ``eps_fraction`` of the episodes."""
    horizon = max(1.0, args.eps_fraction * args.episodes)
    return max(args.eps_end, args.eps_start + (args.eps_end - args.eps_start) * episode / horizon)


def greedy(q: list[float], rng: random.Random) -> int:
    """Argmax with random tie-breaking (unvisited actions all start at 0)."""
    best = max(q)
    return rng.choice([i for i, v in enumerate(q) if v == best])


def run_episode(
    env: Any, task_id: str, q: dict[tuple[str, str], list[float]], eps: float, rng: random.Random,
    args: argparse.Namespace, learn: bool = True, seed: int | None = None,
) -> tuple[bool, float, int]:
    """One episode of epsilon-greedy Q-learning (``learn=False``: just act). Returns (success, return, steps)."""
    obs, _ = env.reset(seed=seed, options={"task_id": task_id})
    s = state_key(task_id, obs)
    ret, steps, info = 0.0, 0, {}
    while True:
        a = rng.randrange(len(ACTIONS)) if rng.random() < eps else greedy(q[s], rng)
        obs, reward, terminated, truncated, info = env.step(ACTIONS[a])
        s2 = state_key(task_id, obs)
        ret, steps = ret + float(reward), steps + 1
        if learn:  # a time-limit truncation still bootstraps: the state itself is not terminal
            target = float(reward) + (0.0 if terminated else args.gamma * max(q[s2]))
            q[s][a] += args.alpha * (target - q[s][a])
        s = s2
        if terminated or truncated:
            return info.get("success") is True, ret, steps


def plot_curve(path: str, success: list[bool], returns: list[float], block: int) -> None:
    """Save success rate and return (moving averages over ``block`` episodes) against episodes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def moving(xs: Sequence[float]) -> list[float]:
        return [sum(xs[max(0, i - block + 1): i + 1]) / (i + 1 - max(0, i - block + 1)) for i in range(len(xs))]

    fig, ax1 = plt.subplots(figsize=(7, 4))
    ax1.plot(moving([float(x) for x in success]), color="tab:blue", label="success rate")
    ax1.set_xlabel("episode")
    ax1.set_ylabel(f"success rate (moving avg, {block} ep.)", color="tab:blue")
    ax1.set_ylim(-0.02, 1.02)
    ax2 = ax1.twinx()
    ax2.plot(moving(returns), color="tab:orange", label="return")
    ax2.set_ylabel("episode return (moving avg)", color="tab:orange")
    ax1.set_title("Tabular Q-learning on mcp_gym/Maze-v0")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Train, print the progress table and the greedy result; return the numbers (used by the tests)."""
    args = parse_args(argv)
    task_ids = args.task_ids or DEFAULT_TASKS
    rng = random.Random(args.seed)
    env = mcp_gym.make_env("Maze", error_penalty=0.01)  # in-process server; invalid calls cost like a move
    q: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0] * len(ACTIONS))
    success: list[bool] = []
    returns: list[float] = []
    lengths: list[int] = []
    blocks: list[dict[str, Any]] = []
    start = time.perf_counter()
    try:
        print(f"Q-learning on {', '.join(task_ids)}: {args.episodes} episodes, seed {args.seed}")
        print(f"{'episodes':>11} {'eps@end':>8} {'success':>8} {'return':>8} {'steps':>6}")
        for ep in range(args.episodes):
            eps = epsilon_at(ep, args)
            task_id = task_ids[ep % len(task_ids)]
            ok, ret, n = run_episode(env, task_id, q, eps, rng, args, seed=args.seed if ep == 0 else None)
            success.append(ok)
            returns.append(ret)
            lengths.append(n)
            if (ep + 1) % args.block == 0 or ep + 1 == args.episodes:
                lo = len(blocks) * args.block
                row = {"first": lo + 1, "last": ep + 1, "epsilon": eps,
                       "success": sum(success[lo:]) / len(success[lo:]),
                       "mean_return": sum(returns[lo:]) / len(returns[lo:]),
                       "mean_steps": sum(lengths[lo:]) / len(lengths[lo:])}
                blocks.append(row)
                print(f"{row['first']:>5}-{row['last']:<5} {eps:>8.2f} {row['success']:>8.2f} "
                      f"{row['mean_return']:>8.3f} {row['mean_steps']:>6.1f}")
        greedy_runs = {t: run_episode(env, t, q, 0.0, rng, args, learn=False) for t in task_ids}
    finally:
        env.close()
    elapsed = time.perf_counter() - start
    greedy_success = sum(ok for ok, _, _ in greedy_runs.values()) / len(greedy_runs)
    for t, (ok, ret, n) in greedy_runs.items():
        print(f"greedy policy on {t}: {'reached the goal' if ok else 'failed'} in {n} steps, return {ret:.2f}")
    print(f"{len(q)} states visited, {sum(lengths)} tool calls in {elapsed:.1f} s")
    if args.plot:
        plot_curve(args.plot, success, returns, args.block)
        print(f"learning curve saved to {args.plot}")
    return {"blocks": blocks, "success": success, "returns": returns, "lengths": lengths,
            "greedy_success": greedy_success, "states": len(q), "seconds": elapsed}


if __name__ == "__main__":
    main()
