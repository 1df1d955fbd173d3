"""Rewards: the convention tool results use to carry a reward, and pluggable reward functions.

**The convention (for server authors).** A tool result carries a per-step reward in its structured content::

    {"reward": 0.8, "done": false, ...any other fields...}

``reward`` (a number) is added to the step reward; ``done: true`` ends the episode (``terminated``). A server that
cannot change its structured content may put the same keys under the result's ``_meta`` as ``"mcp-gym/reward"`` and
``"mcp-gym/done"``. Results without them give reward 0. Tool errors cost ``error_penalty`` (default 0). At the end of an
episode a task :data:`~mcp_gym.tasks.Verifier` grades the final answer and the server state; its score is the reward
of the ``submit`` step.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mcp_gym.protocol import DONE_META_KEY, REWARD_META_KEY

__all__ = ["RewardSignal", "StepContext", "RewardFn", "read_reward", "ConventionReward"]


@dataclass(frozen=True)
class RewardSignal:
    """What one tool result says about reward and termination."""

    reward: float | None = None
    done: bool = False


_NO_SIGNAL = RewardSignal()
"""What most results say (no reward, not done): one frozen instance."""


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def read_reward(
    structured: Mapping[str, Any] | None, meta: Mapping[str, Any] | None = None, text: str | None = None
) -> RewardSignal:
    """Read the reward convention from a result's structured content, ``_meta``, or (when the result has no
    structured content) a text block that is a JSON object with a ``reward`` key."""
    reward = None
    done = False
    if structured is None and text and text.startswith("{") and '"reward"' in text:
        with contextlib.suppress(ValueError):
            parsed = json.loads(text)
            structured = parsed if isinstance(parsed, dict) else None
    if structured is not None and isinstance(structured, Mapping):
        reward = _num(structured.get("reward"))
        done = structured.get("done") is True
    if meta is not None and isinstance(meta, Mapping):
        if reward is None:
            reward = _num(meta.get(REWARD_META_KEY))
        done = done or meta.get(DONE_META_KEY) is True
    return RewardSignal(reward, done) if reward is not None or done else _NO_SIGNAL


@dataclass
class StepContext:
    """Everything a reward function may look at for one step."""

    tool: str | None
    arguments: Mapping[str, Any]
    is_error: bool
    error: Mapping[str, Any] | None
    structured_content: Any
    text: str
    signal: RewardSignal
    step: int
    task: Any = None
    extra: dict[str, Any] = field(default_factory=dict)


RewardFn = Callable[[StepContext], float]
"""``(StepContext) -> float``: the reward of one tool step (the ``submit`` step is graded by the verifier)."""


@dataclass
class ConventionReward:
    """The default reward: the result's convention reward, minus ``error_penalty`` for a failed call."""

    error_penalty: float = 0.0

    def __call__(self, ctx: StepContext) -> float:
        return self.of(ctx.signal, ctx.is_error, ctx.error)

    def of(self, signal: RewardSignal, is_error: bool, error: Mapping[str, Any] | None) -> float:
        """The reward from what it reads of a step: the convention reward, the error flag and the error."""
        r = signal.reward or 0.0
        if is_error or error is not None:
            r -= self.error_penalty
        return float(r)
