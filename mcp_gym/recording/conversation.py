"""A recorded episode back in the chat view: the messages the chat policies sent the model, rebuilt from the rows of
``steps`` and ``episodes`` (as :func:`mcp_gym.sft.export` writes them into its examples).

The rules of the view are :mod:`mcp_gym.chat`'s; this module only reads the recorded columns (``turn``,
``assistant_content``, ``raw_text``, ``parse_status``, ``observation``/``content``, ``resources``) and replays them into
a :class:`~mcp_gym.chat.ChatView`. Runs recorded before schema 1.1 (no ``turn``/``assistant_content``) still convert.
A multi-turn task's episode (schema 1.2 ``user_turn``) is one chat: a ``submit`` after which the user turn moves on
becomes the assistant's reply of that turn and the next user message (that step's observation) follows
(:meth:`ChatView.end_turn <mcp_gym.chat.ChatView.end_turn>`). A change of the offered tools (``catalogue_changes``)
ends the message answering the step that made it with :func:`mcp_gym.chat.tools_note`, as the view did live.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

from mcp_gym.chat import DEFAULT_SYSTEM_PROMPT, ChatView, no_call_feedback
from mcp_gym.parsing import ToolCall
from mcp_gym.protocol import openai_tools

__all__ = ["conversation", "turns"]


@functools.cache
def _content_blocks() -> Any:
    """The validator of recorded content blocks (the MCP SDK's types: imported only for a step recorded without the
    text the agent was shown, so that reading Gym-recorded runs does not import the MCP client)."""
    import mcp.types as mt
    from pydantic import TypeAdapter

    return TypeAdapter(list[mt.ContentBlock])


def _tool_content(step: Mapping[str, Any]) -> str:
    """What the agent was shown for a step (recorded observation, else the rendered content blocks)."""
    if step["observation"] is not None:
        observation: str = step["observation"]
        return observation
    blocks = json.loads(step["content"]) if step["content"] else []
    if not blocks and step["error"] is not None:
        message: str = json.loads(step["error"]).get("message", "unknown error")
        return "Error: " + message
    from mcp_gym.client.host import render_content

    return render_content(_content_blocks().validate_python(blocks))


def turns(steps: Sequence[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    """The steps grouped by the model reply they came from (recorded ``turn``; in runs recorded before it, by equal
    consecutive raw text; otherwise one step per reply)."""
    groups: list[list[Mapping[str, Any]]] = []
    last: Any = None
    for s in steps:
        if s["turn"] is not None:
            key: Any = ("turn", s["turn"])
        elif s["raw_text"] is not None and s["tool"]:
            key = ("raw", s["raw_text"])
        else:
            key = ("step", s["step_index"])
        if groups and key == last:
            groups[-1].append(s)
        else:
            groups.append([s])
        last = key
    return groups


def _assistant_content(step: Mapping[str, Any], assistant_text: Callable[[str], str] | None) -> str:
    """The reply's own text: recorded ``assistant_content``; else (older runs) the raw text of a reply without a call,
    or ``assistant_text`` of the raw text of a reply with calls (``None``: empty)."""
    if step["assistant_content"] is not None:
        content: str = step["assistant_content"]
        return content
    raw: str | None = step["raw_text"]
    if raw is None:
        return ""
    if not step["tool"]:
        return raw
    return assistant_text(raw) if assistant_text is not None else ""


def _loads(text: str) -> Any:
    """JSON of a recorded column: orjson, else the standard library (integers beyond 64 bits)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


class _Resources:
    """Decodes the steps' ``resources`` JSON, once per distinct value in a row (it rarely changes between steps)."""

    def __init__(self) -> None:
        self.last: tuple[str | None, dict[str, str]] = (None, {})

    def __call__(self, step: Mapping[str, Any]) -> dict[str, str]:
        text = step["resources"]
        if text != self.last[0]:
            self.last = (text, _loads(text) if text else {})
        return self.last[1]


def conversation(ep: Mapping[str, Any], steps: Sequence[Mapping[str, Any]], *,
                 system_prompt: str | None = DEFAULT_SYSTEM_PROMPT, final_answer: str = "tool_call",
                 assistant_text: Callable[[str], str] | None = None) -> list[dict[str, Any]]:
    """The messages of the episode's last model request (the chat view, :class:`mcp_gym.chat.ChatView`), then the
    final reply.

    Args:
        ep: The episode's row (``initial_observation``, ``task_prompt``, ``final_answer`` are read).
        steps: Its step rows in ``step_index`` order.
        system_prompt: The system message (``None``: none).
        final_answer: ``"tool_call"``: the final reply is the ``submit`` call; ``"message"``: a final reply that is
            only the ``submit`` call becomes a plain assistant message (its text, then the answer).
        assistant_text: For runs without ``assistant_content``: the assistant content of a recorded raw text with
            calls (``None``: empty).
    """
    initial = json.loads(ep["initial_observation"]) if ep["initial_observation"] else {}
    initial = initial if isinstance(initial, dict) else {}
    task = initial["task"] if isinstance(initial.get("task"), str) else (ep["task_prompt"] or "")  # as shown
    notice = initial["result"] if isinstance(initial.get("result"), str) else ""  # servers down at reset, as shown
    changes = _changes(ep)  # (most episodes: none, and no tools to track)
    view = ChatView(task, initial.get("resources") or {}, system_prompt=system_prompt, notice=notice,
                    tools=offered_tools(ep, None) if changes else None)
    _resources = _Resources()
    groups = turns(steps)
    ends = _turn_ends(steps)
    for k, group in enumerate(groups):
        last = k == len(groups) - 1
        first = group[0]
        content = _assistant_content(first, assistant_text)
        if not first["tool"]:  # a reply without a usable call
            view.reply(content, [])
            if not last:
                view.no_call(first["parse_status"], _resources(first), changes.get(first["step_index"]))
            continue
        calls = [ToolCall(s["tool"], _loads(s["arguments"])) for s in group]
        if (last and final_answer == "message" and [c.name for c in calls] == ["submit"]
                and ep["final_answer"] is not None):
            view.messages.append({"role": "assistant",
                                  "content": "\n\n".join(t for t in (content, ep["final_answer"]) if t)})
            break
        ids = view.reply(content, calls)
        if last:  # the final reply: what it produced was never shown to the model
            break
        for step, id in zip(group, ids, strict=True):
            if step["step_index"] in ends:  # a submit that ended a user turn: the turn's reply, the next user message
                answer = _loads(step["arguments"]).get("answer")
                view.end_turn(_tool_content(step), _resources(step), id=id,
                              answer=answer if answer is None or isinstance(answer, str) else json.dumps(answer),
                              tools=changes.get(step["step_index"]))
                break
            view.tool_result(id, step["tool"], _tool_content(step), _resources(step), changes.get(step["step_index"]))
    return view.messages


def _changes(ep: Mapping[str, Any]) -> dict[int, list[dict[str, Any]]]:
    """The tools offered after each step that changed them (``step_index`` -> OpenAI tools), from the recorded
    ``catalogue_changes``: the view notes each change in the message answering that step, as it did live."""
    text = ep.get("catalogue_changes")
    if not text:
        return {}
    return {change["step_index"]: offered_tools(ep, change["tools"]) for change in json.loads(text)
            if change["step_index"] is not None}


def _turn_ends(steps: Sequence[Mapping[str, Any]]) -> set[int]:
    """The ``step_index`` of each ``submit`` that ended a user turn: the next step is in a later turn (recorded
    ``user_turn``; rows of runs before schema 1.2 have none)."""
    out: set[int] = set()
    for step, after in zip(steps, steps[1:], strict=False):
        turn, next_turn = step.get("user_turn"), after.get("user_turn")
        if step["tool"] == "submit" and turn is not None and next_turn is not None and next_turn > turn:
            out.add(step["step_index"])
    return out


def catalogue_at(ep: Mapping[str, Any], before: int | None) -> tuple[int, list[dict[str, Any]] | None]:
    """``(change number, catalogue)`` in force before step ``before``: the last catalogue change recorded after an
    earlier step (``catalogue`` ``None`` and number -1: the episode's initial ``tools``)."""
    if not ep["catalogue_changes"] or before is None:
        return -1, None
    chosen: tuple[int, list[dict[str, Any]] | None] = (-1, None)
    for k, change in enumerate(json.loads(ep["catalogue_changes"])):
        if change["step_index"] is not None and change["step_index"] < before:
            chosen = (k, change["tools"])
    return chosen


def offered_tools(ep: Mapping[str, Any], catalogue: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The ``tools`` of the episode's last model request: its catalogue then, with ``submit`` (as the policies send
    them: :func:`mcp_gym.protocol.openai_tools`)."""
    if catalogue is None:
        catalogue = json.loads(ep["tools"]) if ep["tools"] else []
    return openai_tools(catalogue)


def tool_segments(ep: Mapping[str, Any], groups: Sequence[Sequence[Mapping[str, Any]]]
                  ) -> list[tuple[int, int, str | None]]:
    """The episode's model replies cut where the offered tools changed between two of them (a server's
    ``tools/list_changed``, e.g. at a user turn): per tool list, ``(its first reply's index in groups, the end of its
    last reply in steps, that reply's submitted answer)``. One entry when the tools never changed."""
    out: list[tuple[int, int, str | None]] = []
    if not ep["catalogue_changes"]:
        return out  # (most episodes: one tool list)
    last_tools: Any = object()
    cache: dict[int, str] = {}
    end = 0
    for k, group in enumerate(groups):
        change, catalogue = catalogue_at(ep, group[0]["step_index"])
        if change not in cache:
            cache[change] = json.dumps(offered_tools(ep, catalogue), sort_keys=True)
        if cache[change] != last_tools:
            out.append((k, 0, None))
            last_tools = cache[change]
        end += len(group)
        answer = next((json.loads(s["arguments"]).get("answer") for s in group if s["tool"] == "submit"), None)
        out[-1] = (out[-1][0], end, answer if answer is None or isinstance(answer, str) else json.dumps(answer))
    return out


def request_length(ep: Mapping[str, Any], steps: Sequence[Mapping[str, Any]], group: Sequence[Mapping[str, Any]],
                   system_prompt: str | None, assistant_text: Callable[[str], str] | None) -> int:
    """How many messages the model request that produced the reply ``group`` held (the reply is the last message of
    the conversation that ends with it)."""
    end = next(i for i, s in enumerate(steps) if s["step_index"] == group[-1]["step_index"]) + 1
    return len(conversation(ep, steps[:end], system_prompt=system_prompt, final_answer="tool_call",
                            assistant_text=assistant_text)) - 1


def chat_actions(messages: Sequence[Mapping[str, Any]], final_answer: str | None) -> list[dict[str, Any]]:
    """The env actions of a chat in the view's form: every tool call, a ``submit`` of the text reply that ended a user
    turn (an assistant message without calls followed by the next user message, not by the feedback on a reply
    without a call), then ``submit`` of ``final_answer`` unless the chat ends with a call."""
    feedback = tuple(no_call_feedback(status) for status in ("no_tool_call", "invalid_json", "invalid_call"))
    out: list[dict[str, Any]] = []
    for m, after in zip(messages, [*messages[1:], None], strict=True):
        if m.get("role") != "assistant":
            continue
        out += [{"tool": c["function"]["name"], "arguments": c["function"]["arguments"]}
                for c in m.get("tool_calls") or ()]
        if (not m.get("tool_calls") and after is not None and after.get("role") == "user"
                and not str(after.get("content") or "").startswith(feedback)):
            out.append({"tool": "submit", "arguments": {"answer": m.get("content") or ""}})
    last = messages[-1] if messages else {}
    if final_answer is not None and not (last.get("role") == "assistant" and last.get("tool_calls")):
        out.append({"tool": "submit", "arguments": {"answer": final_answer}})
    return out


def outside_text(ep: Mapping[str, Any], steps: Sequence[Mapping[str, Any]]) -> str:
    """The episode's recorded text that did not come from the model (task, reset observation, results, resources),
    joined: where control tokens from a server or task file would be (:func:`mcp_gym.chat.control_tokens`)."""
    texts = [ep["task_prompt"], ep["initial_observation"]]
    for step in steps:
        texts += [step["observation"], step["content"], step["resources"]]
    return "\x1e".join(t for t in texts if t)
