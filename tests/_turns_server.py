"""A multi-turn test server (an mcp-gym :class:`~mcp_gym.serverkit.EpisodeServer`, a real MCPServer): notes per
episode; ``count_notes`` appears only at user turn 1, through the hidden turn hook ``mcp_gym_turn`` and
``notifications/tools/list_changed``."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context

from mcp_gym.protocol import HIDDEN_META_KEY, TURN_TOOL
from mcp_gym.serverkit import EpisodeServer
from mcp_gym.tasks import Task

TASK = Task(id="conv-0", prompt="", answer="2", turns=(
    {"prompt": "Add a note 'milk'.", "solution": [{"tool": "add_note", "arguments": {"text": "milk"}}],
     "answer": "Added milk."},
    {"prompt": "Also add 'eggs', then tell me how many notes there are.",
     "solution": [{"tool": "add_note", "arguments": {"text": "eggs"}}, {"tool": "count_notes", "arguments": {}}],
     "answer": "2"},
))


def make_server() -> EpisodeServer[dict[str, Any]]:
    """The notes server with a turn hook."""
    es: EpisodeServer[dict[str, Any]] = EpisodeServer(
        "turns", lambda task_id, seed: {"notes": [], "turns": []}, snapshot=lambda s: {"notes": list(s["notes"]),
                                                                                       "turns": list(s["turns"])})

    @es.tool()
    def add_note(text: str) -> str:
        """Add a note."""
        es.state["notes"].append(text)
        return f"added {text!r}"

    @es.tool(read_only=True, hidden_until_shown=True)
    def count_notes() -> str:
        """How many notes there are (available from the second user turn on)."""
        return str(len(es.state["notes"]))

    async def mcp_gym_turn(turn: int, ctx: Context) -> str:
        """Start user turn ``turn`` (called by mcp-gym, not by agents)."""
        es.state["turns"].append(turn)
        if turn == 1:
            es.show_tool("count_notes")
            await es.notify_tools_changed(ctx)
        return "ok"

    es.mcp.add_tool(mcp_gym_turn, name=TURN_TOOL, meta={HIDDEN_META_KEY: True}, structured_output=False)
    return es


def grade_turns(ctx: Any) -> dict[str, Any]:
    """A Python grader reading the calls grouped by turn: each turn made the tools calls of its reference solution,
    every turn was reached, and the final answer is the task's."""
    calls = [[c["tool"] for c in t["calls"]] for t in ctx.turns]
    want = [[c["tool"] for c in t.get("solution") or ()] for t in ctx.task.turns]
    ok = calls == want and ctx.answer == ctx.task.answer
    return {"passed": ok, "score": float(ok), "reason": f"calls by turn {calls}, notes {ctx.state.get('notes')}"}

if __name__ == "__main__":  # a stdio server: python tests/_turns_server.py
    make_server().mcp.run()
