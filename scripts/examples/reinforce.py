"""REINFORCE with a small numpy policy on the bundled Counter env (CleanRL-style: one readable file, no framework).

Counter (``mcp_gym.servers.counter``) asks the agent to move a counter to a target between -12 and 12 through the
real MCP tool ``add(amount)`` with ``amount`` in -5..5. The env observes the resource ``counter://state``
(``count=3 target=9``), so the policy's input is the distance ``target - count``; its actions are the 11 discrete
tool calls ``add(-5) .. add(5)``. Rewards (from the server): +1.0 on reaching the target (the episode terminates),
-0.01 for every other move; ``MAX_STEPS`` = 10 truncates.

The policy is a linear softmax over a one-hot encoding of the (clipped) distance -- a table of logits, trained by the
plain policy-gradient estimator with reward-to-go and a per-distance running-mean baseline, over batches of episodes.
It prints the success rate per batch (the initial, uniform policy reaches the target 10-25 % of the time in ~9
moves; after 25 updates ~90 %) and the greedy policy's success on the held-out test tasks (all of them, in ~2 moves).

    python scripts/examples/reinforce.py                      # defaults: 25 updates x 16 episodes, seed 0
    python scripts/examples/reinforce.py --updates 60 --lr 1.0
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

import mcp_gym

AMOUNTS = list(range(-5, 6))
"""Action index -> ``add(amount)``."""
MAX_DIST = 15
STATE_URI = "counter://state"
STATE_RE = re.compile(r"count=(-?\d+) target=(-?\d+)")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line flags (all have defaults, so the script runs as is)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--updates", type=int, default=25, help="policy-gradient updates")
    p.add_argument("--batch", type=int, default=16, help="episodes per update")
    p.add_argument("--lr", type=float, default=5.0, help="learning rate on the logits")
    p.add_argument("--gamma", type=float, default=1.0, help="discount of the reward-to-go")
    p.add_argument("--seed", type=int, default=0, help="seed of the policy's sampling and of the task draws")
    return p.parse_args(argv)


def features(obs: dict[str, Any]) -> int:
    """The state index: ``target - count`` from the observed resource, clipped to +-MAX_DIST and shifted to >= 0."""
    m = STATE_RE.search(obs["resources"][STATE_URI])
    if m is None:
        raise ValueError(f"unexpected {STATE_URI}: {obs['resources'][STATE_URI]!r}")
    count, target = int(m.group(1)), int(m.group(2))
    return int(np.clip(target - count, -MAX_DIST, MAX_DIST)) + MAX_DIST


def softmax(logits: np.ndarray) -> np.ndarray:
    """Numerically stable softmax of a 1-D array."""
    z = np.exp(logits - logits.max())
    return z / z.sum()


def run_episode(env: Any, theta: np.ndarray, rng: np.random.Generator, task_id: str,
                greedy: bool = False) -> dict[str, Any]:
    """Play one episode; returns the visited states, actions, rewards and whether the target was reached."""
    obs, _ = env.reset(options={"task_id": task_id})
    states, actions, rewards = [], [], []
    while True:
        s = features(obs)
        probs = softmax(theta[s])
        a = int(probs.argmax()) if greedy else int(rng.choice(len(AMOUNTS), p=probs))
        obs, reward, terminated, truncated, info = env.step({"tool": "add", "arguments": {"amount": AMOUNTS[a]}})
        states.append(s)
        actions.append(a)
        rewards.append(float(reward))
        if terminated or truncated:
            return {"states": states, "actions": actions, "rewards": rewards, "success": bool(terminated)}


def reward_to_go(rewards: list[float], gamma: float) -> np.ndarray:
    """``G_t = r_t + gamma * G_{t+1}`` for every step of an episode."""
    out, g = np.zeros(len(rewards)), 0.0
    for t in reversed(range(len(rewards))):
        g = rewards[t] + gamma * g
        out[t] = g
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Train, print the progress table and the greedy evaluation; return the numbers (used by the tests)."""
    args = parse_args(argv)
    rng = np.random.default_rng(args.seed)
    env = mcp_gym.make_env("Counter")  # in-process server, every task (train and test split)
    train_ids = [t.id for t in env.tasks if t.split == "train"]
    test_ids = [t.id for t in env.tasks if t.split == "test"]
    n_states = 2 * MAX_DIST + 1
    theta = np.zeros((n_states, len(AMOUNTS)))  # the policy: a table of logits
    baseline = np.zeros(n_states)  # running mean of the reward-to-go per state
    history: list[dict[str, float]] = []
    start = time.perf_counter()
    try:
        print(f"REINFORCE on Counter: {args.updates} updates x {args.batch} episodes, seed {args.seed}")
        print(f"{'update':>6} {'success':>8} {'return':>8} {'moves':>6}")
        for update in range(args.updates):
            tasks = rng.choice(train_ids, size=args.batch)
            episodes = [run_episode(env, theta, rng, task_id=str(t)) for t in tasks]
            grad = np.zeros_like(theta)
            for ep in episodes:
                returns = reward_to_go(ep["rewards"], args.gamma)
                for s, a, g in zip(ep["states"], ep["actions"], returns, strict=True):
                    advantage = g - baseline[s]
                    baseline[s] += 0.1 * (g - baseline[s])
                    grad_log_pi = -softmax(theta[s])
                    grad_log_pi[a] += 1.0  # d log softmax(theta_s)[a] / d theta_s
                    grad[s] += advantage * grad_log_pi
            theta += args.lr * grad / args.batch
            row = {"update": update + 1,
                   "success": float(np.mean([ep["success"] for ep in episodes])),
                   "return": float(np.mean([sum(ep["rewards"]) for ep in episodes])),
                   "moves": float(np.mean([len(ep["rewards"]) for ep in episodes]))}
            history.append(row)
            if update % 5 == 0 or update == args.updates - 1:
                print(f"{row['update']:>6} {row['success']:>8.2f} {row['return']:>8.3f} {row['moves']:>6.1f}")
        evals = [run_episode(env, theta, rng, task_id=t, greedy=True) for t in test_ids]
    finally:
        env.close()
    elapsed = time.perf_counter() - start
    greedy_success = float(np.mean([ep["success"] for ep in evals]))
    steps = sum(len(ep["rewards"]) for ep in evals) + sum(h["moves"] * args.batch for h in history)
    print(f"greedy policy on the {len(test_ids)} test tasks: success {greedy_success:.2f}, "
          f"{np.mean([len(ep['rewards']) for ep in evals]):.1f} moves on average")
    print(f"{int(steps)} MCP tool calls in {elapsed:.1f} s")
    return {"history": history, "greedy_success": greedy_success, "theta": theta, "seconds": elapsed}


if __name__ == "__main__":
    main()
