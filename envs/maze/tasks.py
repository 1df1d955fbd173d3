"""Maze environment: a key-and-door gridworld served by ``mcp_gym.servers.maze``.

Each task is one layout (5x5 to 7x7) generated from the task's own random stream and always solvable: the goal ``G``
sits behind a locked door ``D`` (its only way in); the key ``K`` is reachable from the start ``S`` without passing
the door. Stepping on the key picks it up and reveals the ``unlock`` tool; ``unlock`` next to the door opens it.
Small enough for tabular RL: the state is (position, has_key, door_open).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mcp_gym.envs._common import call, split_of, submit, task_lookup, task_rng
from mcp_gym.tasks import Task

__all__ = ["SERVER", "MAX_STEPS", "SUCCESS_THRESHOLD", "OBSERVE_RESOURCES", "generate_tasks", "verify"]

SERVER = "maze"
MAX_STEPS = 60
SUCCESS_THRESHOLD = 1.0
OBSERVE_RESOURCES: list[str] = ["maze://state"]
N_TASKS = 120
SIZES = (5, 6, 7)
WALL_DENSITY = 0.25
MAX_SOLUTION_MOVES = 40

Pos = tuple[int, int]
DIRECTIONS: dict[str, Pos] = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}


@dataclass(frozen=True)
class Layout:
    """A maze: ``size`` x ``size`` cells, wall cells and the start, key, door and goal positions (row, column)."""

    size: int
    walls: frozenset[Pos]
    start: Pos
    key: Pos
    door: Pos
    goal: Pos

    def rows(self) -> list[str]:
        """The layout as text rows: ``#`` wall, ``.`` floor, ``S`` start, ``K`` key, ``D`` door, ``G`` goal."""
        marks = {self.start: "S", self.key: "K", self.door: "D", self.goal: "G"}
        return [
            "".join(marks.get((r, c), "#" if (r, c) in self.walls else ".") for c in range(self.size))
            for r in range(self.size)
        ]

    @classmethod
    def from_rows(cls, rows: Sequence[str]) -> Layout:
        """Inverse of :meth:`rows`."""
        found: dict[str, Pos] = {}
        walls = set()
        for r, row in enumerate(rows):
            for c, ch in enumerate(row):
                if ch == "#":
                    walls.add((r, c))
                elif ch in "SKDG":
                    found[ch] = (r, c)
        return cls(len(rows), frozenset(walls), found["S"], found["K"], found["D"], found["G"])

    def inside(self, p: Pos) -> bool:
        """Whether ``p`` lies on the grid."""
        return 0 <= p[0] < self.size and 0 <= p[1] < self.size

    def neighbours(self, p: Pos) -> list[Pos]:
        """On-grid neighbours of ``p`` (up, down, left, right order)."""
        return [q for q in (step(p, d) for d in DIRECTIONS) if self.inside(q)]


def step(p: Pos, direction: str) -> Pos:
    """The cell one step from ``p`` in ``direction``."""
    dr, dc = DIRECTIONS[direction]
    return (p[0] + dr, p[1] + dc)


def shortest_path(layout: Layout, src: Pos, targets: Iterable[Pos], blocked: Iterable[Pos] = ()) -> list[str] | None:
    """Directions of a shortest walk from ``src`` to any of ``targets`` avoiding walls and ``blocked`` cells."""
    goals, avoid = set(targets), set(blocked) | layout.walls
    prev: dict[Pos, tuple[Pos, str] | None] = {src: None}
    queue = deque([src])
    while queue:
        p = queue.popleft()
        if p in goals:
            path: list[str] = []
            while prev[p] is not None:
                p, d = prev[p]  # type: ignore[misc]  # not None: the loop's condition
                path.append(d)
            return path[::-1]
        for d in DIRECTIONS:
            q = step(p, d)
            if layout.inside(q) and q not in avoid and q not in prev:
                prev[q] = (p, d)
                queue.append(q)
    return None


def solve(layout: Layout) -> list[dict[str, Any]] | None:
    """Reference tool calls (without ``submit``): walk to the key, then next to the door, unlock, enter, reach goal."""
    locked = (layout.door, layout.goal)
    to_key = shortest_path(layout, layout.start, [layout.key], locked)
    if to_key is None:
        return None
    beside_door = [q for q in layout.neighbours(layout.door) if q != layout.goal]
    to_door = shortest_path(layout, layout.key, beside_door, locked)
    if to_door is None:
        return None
    here = layout.key
    for d in to_door:
        here = step(here, d)
    enter = next(d for d in DIRECTIONS if step(here, d) == layout.door)
    last = next(d for d in DIRECTIONS if step(layout.door, d) == layout.goal)
    moves = [call("move", direction=d) for d in to_key + to_door]
    return [*moves, call("unlock"), call("move", direction=enter), call("move", direction=last)]


def generate_layout(rng: random.Random, size: int) -> Layout:
    """A random solvable layout whose reference solution has between ``size`` and :data:`MAX_SOLUTION_MOVES` moves."""
    cells = [(r, c) for r in range(size) for c in range(size)]
    while True:
        goal = rng.choice(cells)
        probe = Layout(size, frozenset(), goal, goal, goal, goal)
        around = probe.neighbours(goal)
        door = rng.choice(around)
        walls = {p for p in cells if rng.random() < WALL_DENSITY} | (set(around) - {door})
        walls -= {goal, door}
        free = [p for p in cells if p not in walls and p not in (goal, door)]
        if len(free) < 2:
            continue
        start, key = rng.sample(free, 2)
        layout = Layout(size, frozenset(walls), start, key, door, goal)
        moves = solve(layout)
        if moves is not None and size <= len(moves) - 1 <= MAX_SOLUTION_MOVES:
            return layout


def _prompt(size: int) -> str:
    return (
        f"Find the way through a {size}x{size} maze to the goal G. The goal is behind a locked door D: first walk "
        "onto the key K to pick it up (this unlocks the `unlock` tool), then stand next to the door and call "
        "`unlock`, then walk through the door to the goal. Move with `move` (up/down/left/right); `look` or the "
        "resource maze://state shows the grid. Submit 'done' once you have reached the goal."
    )


def generate_tasks(seed: int = 0) -> list[Task]:
    """:data:`N_TASKS` maze layouts (sizes cycling 5, 6, 7), reproducible from ``seed``; every 5th task is "test"."""
    tasks = []
    for i in range(N_TASKS):
        size = SIZES[i % len(SIZES)]
        layout = generate_layout(task_rng(SERVER, seed, i), size)
        solution = (*solve(layout), submit("done"))  # type: ignore[misc]  # generated layouts are solvable
        data = {"rows": layout.rows()}
        tasks.append(Task(f"maze-{size}x{size}-{i:04d}", _prompt(size), split_of(i), solution, None, data))
    return tasks


task_by_id = task_lookup(generate_tasks)


def verify(task: Task, answer: str | None, state: Mapping[str, Any]) -> float:
    """1.0 iff the episode of this task reached the goal (from the server snapshot), else 0.0; the answer is not
    graded."""
    same_task = state.get("task_id", task.id) == task.id
    return 1.0 if same_task and state.get("reached_goal") is True else 0.0
