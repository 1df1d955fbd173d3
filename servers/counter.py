"""The Counter server: a tiny environment, plus diagnostic tools that exercise every MCP feature mcp-gym handles.

Environment tools: ``add(amount)`` moves a per-episode counter toward the task's target (reward 1 and ``done`` when it
gets there, a small step cost otherwise) and ``get_count()`` reads it; ``counter://state`` is a resource that changes
with every ``add`` (``resources/updated`` is sent).

Diagnostic tools, only when started with ``--diagnostics`` (or ``make_server(diagnostics=True)``): ``echo``,
``fail`` (an ``isError`` result), ``rpc_error`` (a JSON-RPC error), ``slow`` (sleeps, reporting progress), ``crash``
(the process exits), ``image`` (non-text content), ``ask_llm`` (a sampling request), ``ask_user`` (elicitation),
``log`` (a logging notification), ``unlock_bonus`` (adds the gated ``bonus`` tool with ``tools/list_changed``).
"""

from __future__ import annotations

import base64
import os
import sys
from dataclasses import dataclass
from typing import Annotated, Any

import anyio
import mcp.types as mt
from mcp import MCPError
from mcp.server.mcpserver import Context, Resolve
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.resolve import Elicit, Sample
from pydantic import BaseModel, Field

from mcp_gym.serverkit import EpisodeServer

__all__ = ["server", "make_server"]

STATE_URI = "counter://state"
# A 1x1 transparent PNG.
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


@dataclass
class Counter:
    """Per-episode state."""

    target: int = 3
    count: int = 0
    reached: bool = False


class AddResult(BaseModel):
    """What ``add`` returns (the reward convention: ``reward`` and ``done``)."""

    count: int
    target: int
    reward: float
    done: bool


class Name(BaseModel):
    """Elicited answer."""

    name: str


def _question(prompt: str) -> Sample:
    msg = mt.SamplingMessage(role="user", content=mt.TextContent(type="text", text=prompt))
    return Sample([msg], max_tokens=50)


def _ask_name() -> Elicit[Name]:
    return Elicit("What is your name?", Name)


def _new_state(task_id: str | None, seed: int) -> Counter:
    from mcp_gym.envs.counter.tasks import task_by_id

    try:
        return Counter(target=int(task_by_id(task_id).data["target"])) if task_id else Counter()
    except KeyError:  # not one of the bundled tasks: the default counter
        return Counter()


def make_server(diagnostics: bool = False) -> EpisodeServer[Counter]:
    """Build a Counter server (a new, independent server object)."""
    srv: EpisodeServer[Counter] = EpisodeServer(
        "mcp-gym-counter",
        _new_state,
        snapshot=lambda s: {"count": s.count, "target": s.target, "reached": s.reached},
        version="1.0.0",
        instructions="Move the counter to the target number with add(amount). get_count() tells where it is.",
        max_episodes=16_384,  # a few hundred bytes each: room for 10,000 concurrent episodes (scripts/bench/scale.py)
    )

    @srv.tool(title="Add to the counter")
    async def add(amount: Annotated[int, Field(ge=-5, le=5, description="How much to add, -5..5")], ctx: Context) -> (
        AddResult
    ):
        """Add `amount` (between -5 and 5) to the counter. Reaching the target ends the episode with reward 1;
        every other move costs 0.01."""
        s = srv.state
        s.count += amount
        s.reached = s.count == s.target
        await srv.notify_resource_updated(ctx, STATE_URI)
        return AddResult(count=s.count, target=s.target, reward=1.0 if s.reached else -0.01, done=s.reached)

    @srv.tool(read_only=True, idempotent=True)
    async def get_count() -> int:
        """Read the counter's current value without changing it."""
        return srv.state.count

    @srv.mcp.resource(STATE_URI, mime_type="text/plain")
    async def state() -> str:
        """The counter and its target."""
        s = srv.state
        return f"count={s.count} target={s.target}"

    if diagnostics:
        _add_diagnostics(srv)
    return srv


def _add_diagnostics(srv: EpisodeServer[Counter]) -> None:
    @srv.tool(read_only=True, idempotent=True)
    async def echo(text: str) -> str:
        """Return `text` unchanged."""
        return text

    @srv.tool(read_only=True)
    async def fail(message: str = "it failed") -> str:
        """Always fails with `message` (an isError result)."""
        raise ToolError(message)

    @srv.tool(read_only=True)
    async def rpc_error() -> str:
        """Answers with a JSON-RPC error instead of a result."""
        raise MCPError(code=-32602, message="rpc_error always answers with a JSON-RPC error")

    @srv.tool(read_only=True)
    async def slow(seconds: float, ctx: Context) -> str:
        """Sleep `seconds`, reporting progress every 0.05 s."""
        steps = max(1, int(seconds / 0.05))
        for i in range(steps):
            await ctx.report_progress(i + 1, steps, f"step {i + 1}")
            await anyio.sleep(seconds / steps)
        return f"slept {seconds}"

    @srv.tool(destructive=True)
    async def crash() -> str:
        """Kill the server process (for testing crash handling; over stdio or HTTP only)."""
        sys.stdout.flush()
        os._exit(3)

    @srv.tool(read_only=True, idempotent=True)
    async def image() -> list[Any]:
        """Return a tiny PNG image and a text block."""
        return [
            mt.ImageContent(type="image", data=base64.b64encode(PIXEL).decode(), mime_type="image/png"),
            mt.TextContent(type="text", text="a 1x1 pixel"),
        ]

    @srv.tool(read_only=True)
    async def ask_llm(prompt: str, reply: Annotated[mt.CreateMessageResult, Resolve(_question)]) -> str:
        """Ask the client's LLM (sampling) and return its reply."""
        content = reply.content
        return "LLM said: " + (content.text if isinstance(content, mt.TextContent) else str(content))

    @srv.tool(read_only=True)
    async def ask_user(answer: Annotated[Name, Resolve(_ask_name)]) -> str:
        """Ask the user for their name (elicitation)."""
        return f"hello {answer.name}"

    @srv.tool(read_only=True)
    async def log(message: str, ctx: Context) -> str:
        """Send `message` as a logging notification (level info)."""
        await ctx.info(message)
        return "logged"

    @srv.tool()
    async def unlock_bonus(ctx: Context) -> str:
        """Make the `bonus` tool available in this episode (sends tools/list_changed)."""
        srv.show_tool("bonus")
        await srv.notify_tools_changed(ctx)
        return "bonus unlocked"

    @srv.tool(hidden_until_shown=True, read_only=True)
    async def bonus() -> dict[str, Any]:
        """A tool that exists only after unlock_bonus; gives reward 0.5."""
        return {"reward": 0.5, "done": False}


server = make_server(diagnostics=os.environ.get("MCP_GYM_DIAGNOSTICS") == "1")
"""The default Counter server (diagnostic tools when ``MCP_GYM_DIAGNOSTICS=1``)."""

if __name__ == "__main__":
    if "--diagnostics" in sys.argv:
        sys.argv.remove("--diagnostics")
        server = make_server(diagnostics=True)
        import mcp_gym.servers.counter as _self

        _self.server = server
    from mcp_gym.envs.serve import main

    main("testing")
