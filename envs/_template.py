'''The files ``mcp-gym envs new NAME`` writes (:func:`mcp_gym.envs.packages.scaffold`).

Paths use ``{package}`` for the import package; contents use ``{{name}}`` (the env's name, ``demo-env``) and
``{{package}}`` (``demo_env``). The package holds what a bundled env has in ``envs/<env>/tasks.py`` (``tasks.py``:
tasks and verifier) and ``servers/<env>.py`` (``server.py``: the MCP server, runnable on its own).
'''

from __future__ import annotations

__all__ = ["FILES"]

PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{{name}}"
version = "0.1.0"
description = "{{name}}: an mcp-gym environment (an MCP server, tasks with reference solutions, a verifier)"
requires-python = ">=3.10"
dependencies = ["mcp-gym"]

[project.optional-dependencies]
test = ["pytest"]

# mcp-gym finds installed envs through this group: the name is the env's name (env={{name}},
# gymnasium.make("mcp_gym/{{name}}-v0")), the value its package (with tasks.py and server.py).
[project.entry-points."mcp_gym.envs"]
{{name}} = "{{package}}"

[tool.setuptools]
packages = ["{{package}}"]

[tool.setuptools.package-data]
"{{package}}" = ["tasks.jsonl"]
"""

README = """\
# {{name}}

An mcp-gym environment: a small MCP server (`{{package}}/server.py`), tasks with reference
solutions (`{{package}}/tasks.jsonl`) and a verifier (`{{package}}/tasks.py`).

```bash
pip install -e ".[test]"
mcp-gym envs list                              # {{name}} is listed
mcp-gym eval env={{name}} policy=oracle        # the reference solutions: 100 % success
python -m pytest                               # the same, as a test
python -m {{package}}.server                   # the server on its own, over stdio
```
"""

INIT = '''\
"""{{name}}: an mcp-gym environment (``server.py``: the MCP server, ``tasks.py``: tasks and verifier)."""
'''

SERVER = '''\
"""The {{name}} MCP server: one tool, ``multiply(a, b)``. Runs on its own over stdio: ``python -m {{package}}.server``.

It keeps no state, so every episode starts the same; a server with per-episode state can use
``mcp_gym.serverkit.EpisodeServer`` (as mcp-gym's bundled envs do) so mcp-gym resets it between episodes.
"""

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("{{name}}", instructions="Multiply numbers with multiply(a, b).", log_level="WARNING")


@server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
async def multiply(a: int, b: int) -> int:
    """Return a times b."""
    return a * b


if __name__ == "__main__":
    server.run()
'''

TASKS = '''\
"""The {{name}} tasks (``tasks.jsonl``: prompts, reference solutions, answers) and their verifier."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mcp_gym.tasks import Task, load_tasks

SERVER = "{{package}}"
"""The server's alias in the env."""
MAX_STEPS = 6
"""Steps per episode (tool calls and submit) before it is cut off."""
SUCCESS_THRESHOLD = 1.0
"""A verifier score at or above this is a success."""
OBSERVE_RESOURCES: list[str] = []
"""Resources shown in every observation."""


def generate_tasks(seed: int = 0) -> list[Task]:
    """The task set (fixed; ``seed`` is unused)."""
    return load_tasks(Path(__file__).with_name("tasks.jsonl"))


@functools.lru_cache(maxsize=1)
def _by_id() -> dict[str, Task]:
    return {t.id: t for t in generate_tasks()}


def task_by_id(task_id: str) -> Task:
    """The task with this id."""
    return _by_id()[task_id]


def verify(task: Task, answer: str | None, state: Mapping[str, Any]) -> float:
    """1.0 if the submitted answer is the task's answer, else 0."""
    return 1.0 if answer is not None and answer.strip() == task.answer else 0.0
'''


def _task_lines() -> str:
    import json

    lines = []
    for i, (a, b) in enumerate([(6, 7), (12, 12), (25, 4), (9, 11), (13, 17), (8, 125)]):
        lines.append(json.dumps({
            "id": f"{{{{name}}}}-{i:03d}", "prompt": f"What is {a} times {b}? Use the multiply tool, then submit.",
            "split": "test" if i % 3 == 2 else "train", "answer": str(a * b),
            "solution": [{"tool": "multiply", "arguments": {"a": a, "b": b}},
                         {"tool": "submit", "arguments": {"answer": str(a * b)}}]}))
    return "\n".join(lines) + "\n"


TEST = '''\
"""{{name}} runs in mcp-gym: the oracle (each task's reference solution) succeeds on every task."""

import gymnasium as gym
import pytest

import mcp_gym  # noqa: F401  (registers the installed envs with Gymnasium)


@pytest.mark.parametrize("transport", ["inprocess", "stdio"])
def test_the_oracle_solves_every_task(transport: str) -> None:
    env = gym.make("mcp_gym/{{name}}-v0", transport=transport)
    try:
        tasks = env.unwrapped.tasks
        assert tasks
        for task in tasks:
            obs, info = env.reset(options={"task_id": task.id})
            for call in task.solution:
                obs, reward, terminated, truncated, info = env.step(dict(call))
                if terminated or truncated:
                    break
            assert info["success"], (task.id, obs["result"])
    finally:
        env.close()
'''

FILES: dict[str, str] = {
    "pyproject.toml": PYPROJECT,
    "README.md": README,
    "{package}/__init__.py": INIT,
    "{package}/server.py": SERVER,
    "{package}/tasks.py": TASKS,
    "{package}/tasks.jsonl": _task_lines(),
    "tests/test_{package}.py": TEST,
}
"""Relative path -> contents."""
