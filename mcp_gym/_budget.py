"""An episode's budgets beside ``max_steps``: ``max_turns`` (model replies) and ``max_tool_calls`` (calls that reached a
server), what an episode used of them, and the step a budget cuts off.

A *turn* is one model reply. Chat policies mark each action with the reply it came from (``turn``, one of
:data:`~mcp_gym.parsing.ACTION_EXTRA_KEYS`); :class:`~mcp_gym.recording.RecordTrajectories` hands that mark to the env
before the step (:attr:`Budget.turn_hint`). Without a mark (the ``oracle`` and ``random`` policies, a bare
``env.step``) every step is a turn of its own. Where replies are marked, the episode ends when a reply past
``max_turns`` begins: its first call is not executed (the env cannot know a reply's last call before the next one
arrives); unmarked, it ends after the ``max_turns``-th step.
"""

from __future__ import annotations

from typing import Any

from mcp_gym.protocol import ToolCallError

__all__ = ["Budget"]


class Budget:
    """The turn and tool-call budgets of an env's episodes (``None``: no limit) and their use in the current one."""

    def __init__(self, max_turns: int | None = None, max_tool_calls: int | None = None,
                 max_steps: int | None = None) -> None:
        """``max_steps`` is only checked here (the env counts steps): 0 or less ran one step, then cut the episode."""
        for name, value in (("max_turns", max_turns), ("max_tool_calls", max_tool_calls), ("max_steps", max_steps)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive integer or None, got {value!r}")
        self.max_turns = max_turns
        self.max_tool_calls = max_tool_calls
        self.turn_hint: Any = None
        """The reply the next action came from (set before each step by the recorder; consumed by the step)."""
        self.turns = 0
        self.tool_calls = 0
        self._last: Any = None
        self._refused = False

    def begin_step(self) -> dict[str, Any] | None:
        """Count the turn the step belongs to; the error of a step that begins a reply past ``max_turns`` (not to be
        executed), else ``None``."""
        hint, self.turn_hint = self.turn_hint, None
        new = hint is None or self.turns == 0 or not _same(hint, self._last)
        self._last = hint
        if not new:
            return None
        if self.max_turns is not None and self.turns >= self.max_turns:
            self._refused = True
            return ToolCallError("budget", f"the episode used its {self.max_turns} turns (max_turns): this reply's "
                                 "calls are not executed").as_dict()
        self.turns += 1
        return None

    def cut(self, steps: int, max_steps: int | None, tool_call: bool) -> str | None:
        """Count a step's call (``tool_call``: it reached a server); the budget the episode has used up after
        ``steps`` steps (``max_tool_calls``, ``max_turns``, ``max_steps``), else ``None``."""
        self.tool_calls += bool(tool_call)
        if self.max_tool_calls is not None and self.tool_calls >= self.max_tool_calls:
            return "max_tool_calls"
        if self._refused or (self.max_turns is not None and self._last is None and self.turns >= self.max_turns):
            return "max_turns"
        if max_steps is not None and steps >= max_steps:
            return "max_steps"
        return None

    def used(self) -> dict[str, int]:
        """What the current episode used: ``{"turns", "tool_calls"}``."""
        return {"turns": self.turns, "tool_calls": self.tool_calls}

    def limits(self) -> dict[str, int | None]:
        """The budgets: ``{"max_turns", "max_tool_calls"}``."""
        return {"max_turns": self.max_turns, "max_tool_calls": self.max_tool_calls}


def _same(a: Any, b: Any) -> bool:
    """``a == b`` for policy-supplied turn marks of any type (an array, a raising ``__eq__``: not equal)."""
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - a hostile mark is a new turn, never a crash
        return False
