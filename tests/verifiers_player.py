"""Run in the verifiers venv by tests/test_verifiers.py (not a test module): verifiers' own OpenEnv bridge
(``OpenEnvEnv`` built from an ``OpenEnvEnvConfig`` naming its ``OpenEnvTaskset``, pointed at an mcp-gym OpenEnv
server by ``base_url``) plays each task's scripted replies. The player stands for verifiers' agent (model and
harness): it answers each turn's payload with the next reply and keeps what verifiers records on the trace.

    python verifiers_player.py TASKSET_JSON REPLIES_JSON   # the [env.taskset] table; one JSON result per task
"""

from __future__ import annotations

import asyncio
import json
import sys
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from verifiers.v1.tasksets.openenv import OpenEnvConfig, OpenEnvEnv, OpenEnvEnvConfig


@dataclass
class Trace:
    """The part of verifiers' ``Trace`` that ``OpenEnvEnv.run`` writes."""

    rewards: dict[str, float] = field(default_factory=dict)
    stop_condition: str | None = None

    def record_reward(self, name: str, value: float, weight: float = 1.0) -> None:
        self.rewards[name] = float(value)

    def stop(self, condition: str, override: bool = False) -> None:
        self.stop_condition = self.stop_condition or condition


@dataclass
class Segment:
    last_reply: str
    terminated: bool


class Interaction:
    """One rollout's exchange: ``turn(payload)`` is the user's turn, answered by the next scripted reply."""

    def __init__(self, replies: list[str]) -> None:
        self.replies, self.trace = list(replies), Trace()
        self.payloads: list[Any] = []

    async def turn(self, message: str) -> Segment:
        self.payloads.append(json.loads(message))
        if not self.replies:  # the script is over: the agent stops
            return Segment("", terminated=True)
        return Segment(self.replies.pop(0), terminated=False)


class Player:
    def __init__(self, replies: list[str]) -> None:
        self.replies = replies
        self.last: Interaction | None = None

    @asynccontextmanager
    async def interaction(self, task: Any) -> Any:
        self.last = Interaction(self.replies)
        yield self.last


@dataclass
class Agents:
    player: Player


async def main() -> None:
    taskset, replies = json.loads(sys.argv[1]), json.loads(sys.argv[2])
    env = OpenEnvEnv(OpenEnvEnvConfig(taskset=OpenEnvConfig(**taskset)))
    for task, texts in zip(env.taskset.load(), replies, strict=True):
        agents = Agents(Player(texts))
        await env.run(task, agents)
        interaction = agents.player.last
        assert interaction is not None
        print(json.dumps({"task": task.data.name, "reset": task.data.reset, "rewards": interaction.trace.rewards,
                          "stop": interaction.trace.stop_condition, "payloads": interaction.payloads}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
