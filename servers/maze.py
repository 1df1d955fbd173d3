"""Maze: a key-and-door gridworld as an MCP server.

Tools: ``move(direction)``, ``look()`` and ``unlock()`` — the latter hidden until the agent picks up the key in its
episode (then ``tools/list_changed`` is sent). Resource: ``maze://state`` (text rendering of the current episode,
``resources/updated`` after every change). ``move`` returns the reward convention ``{"reward", "done", ...}``:
-0.01 per move, +1.0 on reaching the goal. Layouts come from :mod:`mcp_gym.envs.maze.tasks`.

Run: ``python -m mcp_gym.servers.maze`` (stdio) or ``... --transport http --port 8000``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Literal

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field

from mcp_gym.envs.maze.tasks import Layout, Pos, generate_layout, step, task_by_id
from mcp_gym.serverkit import EpisodeServer

__all__ = ["server"]

STATE_URI = "maze://state"
STEP_COST = -0.01
GOAL_REWARD = 1.0
DEFAULT_SIZE = 5

Direction = Literal["up", "down", "left", "right"]


@dataclass
class MazeState:
    """The state of one episode: the layout and where the agent is, what it holds, what it opened."""

    layout: Layout
    task_id: str | None
    pos: Pos
    has_key: bool = False
    door_open: bool = False
    reached_goal: bool = False
    moves: int = 0
    total_reward: float = 0.0

    def cell(self, p: Pos) -> str:
        """What occupies cell ``p`` now: wall, floor, key, locked door, open door or goal."""
        lay = self.layout
        if not lay.inside(p) or p in lay.walls:
            return "wall"
        if p == lay.door:
            return "open door" if self.door_open else "locked door"
        if p == lay.key and not self.has_key:
            return "key"
        return "goal" if p == lay.goal else "floor"

    def surroundings(self) -> str:
        """What lies in each direction, e.g. ``"up: wall, down: floor, left: key, right: locked door"``."""
        return ", ".join(f"{d}: {self.cell(step(self.pos, d))}" for d in ("up", "down", "left", "right"))

    def status(self) -> str:
        """One line identifying the full state (position, key, door, goal)."""
        return (
            f"position ({self.pos[0]}, {self.pos[1]}); key: {'held' if self.has_key else 'not held'}; "
            f"door: {'open' if self.door_open else 'locked'}; goal: {'reached' if self.reached_goal else 'not reached'}"
        )

    def render(self) -> str:
        """The grid as text with a legend and the status line."""
        lay = self.layout
        symbol = {"wall": "#", "floor": ".", "key": "K", "locked door": "D", "open door": "/", "goal": "G"}
        rows = [
            " ".join("A" if (r, c) == self.pos else symbol[self.cell((r, c))] for c in range(lay.size))
            for r in range(lay.size)
        ]
        legend = "Legend: A you, # wall, . floor, K key, D locked door, / open door, G goal. Row 0 is the top."
        return f"Maze {lay.size}x{lay.size}\n" + "\n".join(rows) + f"\n{legend}\nStatus: {self.status()}\n"


def new_state(task_id: str | None, seed: int) -> MazeState:
    """The start of ``task_id``'s maze; without a task, a random 5x5 maze drawn from ``seed``."""
    if task_id is None:
        layout = generate_layout(random.Random(f"mcp-gym/maze/default/{seed}"), DEFAULT_SIZE)
    else:
        try:
            layout = Layout.from_rows(task_by_id(task_id).data["rows"])
        except KeyError as e:
            raise ToolError(str(e)) from None
    return MazeState(layout, task_id, layout.start)


def snapshot(s: MazeState) -> dict[str, Any]:
    """What the verifier needs: task, position, key, door, goal flag, move count and reward so far."""
    return {
        "task_id": s.task_id,
        "position": list(s.pos),
        "has_key": s.has_key,
        "door_open": s.door_open,
        "reached_goal": s.reached_goal,
        "moves": s.moves,
        "total_reward": round(s.total_reward, 6),
        "rows": s.layout.rows(),
    }


server: EpisodeServer[MazeState] = EpisodeServer(
    "mcp-gym-maze",
    new_state,
    snapshot=snapshot,
    on_reset=MazeState.render,
    instructions=(
        "A grid maze. Reach the goal G, which is behind a locked door D. Walk onto the key K to pick it up; this "
        "makes the `unlock` tool available. Stand next to the door, call `unlock`, then walk through to G. "
        f"Use `look` or read {STATE_URI} to see the grid."
    ),
)


class View(BaseModel):
    """Where the agent is and what it sees."""

    position: list[int] = Field(description="[row, column]; row 0 is the top, column 0 the left")
    has_key: bool
    door_open: bool
    done: bool = Field(description="True once the goal has been reached")
    surroundings: str = Field(description="What lies one step up, down, left and right")
    status: str = Field(description="One line with position, key, door and goal status")


class MoveResult(View):
    """Outcome of a move, with its reward."""

    moved: bool = Field(description="False if a wall or the locked door blocked the move")
    reward: float = Field(description="-0.01 per move, +1.0 when the goal is reached")
    message: str


class LookResult(View):
    """The full view: also the grid."""

    grid: str


class UnlockResult(View):
    """Outcome of unlocking."""

    message: str


def _view(s: MazeState) -> dict[str, Any]:
    return {
        "position": list(s.pos),
        "has_key": s.has_key,
        "door_open": s.door_open,
        "done": s.reached_goal,
        "surroundings": s.surroundings(),
        "status": s.status(),
    }


@server.tool(title="Move")
async def move(direction: Direction, ctx: Context) -> MoveResult:
    """Move one cell up, down, left or right. Walls and the locked door block you (you stay put but the move still
    costs -0.01). Stepping onto the key picks it up. Reaching the goal ends the episode with reward +1.0.

    Args:
        direction: "up" (row - 1), "down" (row + 1), "left" (column - 1) or "right" (column + 1).

    Returns your new position, the reward of this move, whether the episode is done, whether you hold the key,
    whether the door is open, and what surrounds you.
    """
    s = server.state
    if s.reached_goal:
        return MoveResult(**_view(s), moved=False, reward=0.0, message="You already reached the goal; submit now.")
    target = step(s.pos, direction)
    what = s.cell(target)
    reward, moved, got_key = STEP_COST, what not in ("wall", "locked door"), False
    if not moved:
        message = f"Blocked: there is a {what} {direction} of you."
    else:
        s.pos = target
        message = f"You moved {direction}."
        if what == "key":
            s.has_key = got_key = True
            server.show_tool("unlock")
            message += " You picked up the key: the `unlock` tool is now available."
        elif what == "goal":
            s.reached_goal = True
            reward = GOAL_REWARD
            message += " You reached the goal!"
    s.moves += 1
    s.total_reward += reward
    result = MoveResult(**_view(s), moved=moved, reward=reward, message=message)
    if got_key:
        await server.notify_tools_changed(ctx)
    await server.notify_resource_updated(ctx, STATE_URI)
    return result


@server.tool(read_only=True, idempotent=True, title="Look")
async def look() -> LookResult:
    """Look at the whole maze without moving: the grid (A = you, # wall, . floor, K key, D locked door, / open
    door, G goal), your position, key and door status, and your surroundings. Costs nothing."""
    s = server.state
    return LookResult(**_view(s), grid=s.render())


@server.tool(idempotent=True, hidden_until_shown=True, title="Unlock door")
async def unlock(ctx: Context) -> UnlockResult:
    """Unlock the door with the key you carry. Only available once you hold the key, and only works while you stand
    directly next to (up, down, left or right of) the door; after that you can walk through the door.

    Returns your status; fails if the door is not next to you.
    """
    s = server.state
    if not s.has_key:
        raise ToolError("You do not have the key; walk onto the key K first.")
    if s.door_open:
        return UnlockResult(**_view(s), message="The door is already open.")
    if s.layout.door not in s.layout.neighbours(s.pos):
        raise ToolError("There is no door next to you; move next to the door D first (see `look`).")
    s.door_open = True
    await server.notify_resource_updated(ctx, STATE_URI)
    return UnlockResult(**_view(s), message="The door is open: walk through it to the goal.")


@server.mcp.resource(STATE_URI, name="state", title="Maze state", mime_type="text/plain")
def maze_state() -> str:
    """The current episode's maze as text: the grid with your position, a legend and your status."""
    return server.state.render()


if __name__ == "__main__":
    from mcp_gym.envs.serve import main

    main("maze")
