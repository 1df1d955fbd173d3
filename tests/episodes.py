"""Test helpers for the trainer faces: one scripted chat policy through ``MCPEnv`` directly, and a recorded episode
reduced to what must not depend on the face that drove it (messages, tool calls, rewards, outcome)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mcp_gym import sft
from mcp_gym.client.runtime import default_runtime
from mcp_gym.parsing import ParseResult, parse_tool_calls
from mcp_gym.policies import ChatPolicy
from mcp_gym.recording import RecordTrajectories, load
from mcp_gym.vector import EpisodeSpec, VectorMCPEnv

STEP_COLUMNS = ("tool", "arguments", "reward", "terminated", "truncated", "is_error", "observation", "resources",
                "raw_text", "parse_status", "turn", "assistant_content")
"""Step columns that must be equal whichever face drove the episode (ids, times and durations differ)."""
EPISODE_COLUMNS = ("env_id", "task_id", "task_prompt", "total_reward", "success", "length", "termination",
                   "final_answer", "tools", "initial_observation")
"""Episode columns that must be equal whichever face drove the episode."""


def hermes(*calls: tuple[str, dict[str, Any]], text: str = "") -> str:
    """A model reply with Hermes ``<tool_call>`` blocks (after ``text``)."""
    blocks = "\n".join(f'<tool_call>\n{json.dumps({"name": n, "arguments": a})}\n</tool_call>' for n, a in calls)
    return f"{text}\n{blocks}" if text else blocks


class TextPolicy(ChatPolicy):
    """A chat policy whose model replies with scripted texts (the chat agent's real code path, without HTTP)."""

    name = "text"

    def __init__(self, texts: Sequence[str]) -> None:
        self.texts = list(texts)
        self.requests: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]] = []

    async def respond(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], seed: int) -> ParseResult:
        self.requests.append((copy.deepcopy(messages), copy.deepcopy(tools)))
        return parse_tool_calls(self.texts[len(self.requests) - 1])


def run_policy(make_env: Callable[[], Any], task_id: str, texts: Sequence[str], run: Path, seed: int = 5
               ) -> TextPolicy:
    """Play ``texts`` as a chat model through ``MCPEnv`` directly (the chat policy), recording into ``run``."""
    policy = TextPolicy(texts)

    async def go() -> None:
        async with VectorMCPEnv(lambda i: RecordTrajectories(make_env(), run), 1) as vec:
            await vec.run(policy, [EpisodeSpec(f"{task_id}#0", task_id, seed)])

    default_runtime().call(go)
    return policy


def recorded_episode(run: Path) -> dict[str, Any]:
    """The run's only episode: its face-independent columns, its steps' and its SFT conversation (``messages``)."""
    rec = load(run)
    assert rec.episodes.num_rows == 1, f"{run}: expected one recorded episode, got {rec.episodes.num_rows}"
    ep = rec.episodes[0]
    steps = [{k: s[k] for k in STEP_COLUMNS} for s in rec.episode_steps(ep["episode_id"])]
    (example,) = sft.build(run, success_only=False, drop_errors=False)
    return {**{k: ep[k] for k in EPISODE_COLUMNS}, "steps": steps, "messages": example["messages"],
            "sft_tools": example["tools"]}


MAZE_TEXTS = ["I should look around first.", hermes(("look", {})), hermes(("move", {"direction": "up"})),
              hermes(("move", {"direction": "left"}), ("move", {"direction": "down"}), text="<think>Two.</think>"),
              '<tool_call>{"name": "move", "arguments": {"direction": </tool_call>',
              hermes(("submit", {"answer": "x"}))]
"""Replies to Maze task ``maze-5x5-0000`` in every shape: no call, a call, two calls with reasoning, broken JSON, the
final ``submit``."""


def per_task_tools_env() -> Any:
    """An env whose tools depend on the task (as BFCL's tasks offer their own classes' functions): task ``b``'s reset
    shows a tool ``extra`` that task ``a`` lacks."""
    from mcp_gym import InProcess, MCPEnv
    from mcp_gym.serverkit import EpisodeServer

    es: EpisodeServer[dict[str, Any]] = EpisodeServer(
        "pertask", lambda task_id, seed: {"task": task_id},
        on_reset=lambda state: es.show_tool("extra") if state["task"] == "b" else None)

    @es.tool()
    def base() -> str:
        """Every task's tool."""
        return "base"

    @es.tool(hidden_until_shown=True)
    def extra() -> str:
        """Task b's tool."""
        return "extra"

    return MCPEnv({"pertask": InProcess(es.mcp)}, [{"id": "a", "prompt": "A."}, {"id": "b", "prompt": "B."}],
                  env_id="pertask")
