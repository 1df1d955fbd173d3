"""The one chat view of an episode: what a chat model is shown, turn by turn, everywhere in mcp-gym.

The chat policies (``openai``, ``hf``), the batched text-step API (:mod:`mcp_gym.textenv`), the TRL adapter
(:mod:`mcp_gym.trl`) and the SFT export (:mod:`mcp_gym.sft`) all build their conversations here, so a model is trained
on exactly the messages it is shown at inference::

    view = ChatView(obs["task"], obs["resources"])          # [system, user]
    ids = view.reply("Let me add.", [ToolCall("add", {"amount": 2})])
    view.tool_result(ids[0], "add", obs["result"], obs["resources"])
    view.messages      # canonical form: tool-call arguments are JSON objects (what chat templates expect)
    view.wire()        # OpenAI chat-completions form: arguments as JSON strings

The rules:

* **System prompt**: :data:`DEFAULT_SYSTEM_PROMPT` unless the caller passes another one (``None``: no system message).
* **User turn**: the task prompt, then every observed resource as a ``[resource <uri>]`` block
  (:func:`render_resources`) — e.g. Maze's grid.
* **Assistant turn**: the model's own text as ``content`` (for an OpenAI ``tool_calls`` reply, the message's
  ``content``; for a text reply, the text without its tool-call markup, which the chat template writes back from
  ``tool_calls``) and its calls as ``tool_calls`` with deterministic ids ``call_<turn>_<i>`` (:func:`call_id`). A reply
  without a usable call keeps its whole text as ``content`` and has no ``tool_calls``.
* **Tool turn**: one ``tool`` message per executed call: the result text, then the resources that changed since the
  previous message, rendered as in the user turn.
* **A reply without a usable call** is answered by a ``user`` message: :func:`no_call_feedback` (wording by parse
  status) plus the resources that changed. It counts as a step (the env records an invalid action).
* **Control tokens**: text from outside the model (task, tool results, resources) has chat-template control tokens
  neutralised (:func:`neutralize_control_tokens`): a tool result holding ``<|im_end|>\n<|im_start|>assistant`` can
  not open a turn of its own, at inference or in the SFT data built from the recording (the same function, here).
* **Tools that change**: the request's ``tools`` are the env's tools at that moment, and the first message after a
  change of the offered tools (a tool message, the feedback on a reply without a call, or the next user message)
  ends with :func:`tools_note`: the tools added (with their schemas) and removed. A trainer that renders the tools
  once per trajectory (verl, SkyRL) shows the model the same note, so the note is the one place every face tells the
  model of a tool added mid-episode (Maze's ``unlock``, BFCL's held-back functions).
* **Final answer**: the model ends an episode by calling the ``submit`` tool, which is always in the tools
  (:func:`openai_tools`, from :mod:`mcp_gym.protocol`). Plain text is never a final answer; it is a reply without a
  usable call.
* **Conversations** (a task with several user turns): a ``submit`` that ends a user turn before the last becomes the
  assistant's text reply of that turn (:meth:`ChatView.end_turn`): the ``submit`` call leaves its message, whose
  content becomes its text then the answer (or, when the reply also made other calls, a new assistant message holds
  the answer after their results); the next user message follows (the turn's prompt, then the resources that
  changed).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from mcp_gym.parsing import ParseResult, ToolCall
from mcp_gym.protocol import openai_tools

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "ChatView",
    "call_id",
    "user_content",
    "result_content",
    "assistant_content",
    "env_tools",
    "tools_note",
    "to_wire",
    "neutralize_control_tokens",
    "control_tokens",
    "unhandled_special_tokens",
]

DEFAULT_SYSTEM_PROMPT = (
    "You are an agent that completes tasks by calling the provided tools. Call one tool at a time and read its result "
    "before the next call. When the task is done, call the `submit` tool with your final answer."
)
"""The system message of every conversation unless the caller passes another one."""

_NO_CALL_REASON = {
    "no_tool_call": "your reply contains no tool call",
    "invalid_json": "a tool call in your reply is not valid JSON",
    "invalid_call": "a tool call in your reply is malformed (it needs a \"name\" and \"arguments\" as a JSON object)",
}


def call_id(turn: int, index: int) -> str:
    """The id of the ``index``-th call of the ``turn``-th assistant reply of an episode (both 0-based)."""
    return f"call_{turn}_{index}"


def render_resources(resources: Mapping[str, str], previous: Mapping[str, str] | None = None) -> str:
    """Observed resources as ``[resource <uri>]`` text blocks (only those that differ from ``previous`` if given)."""
    return "\n\n".join(
        f"[resource {uri}]\n{text}" for uri, text in resources.items()
        if previous is None or previous.get(uri) != text
    )


_CONTROL = re.compile(
    r"<\|[^|<>\s]{1,64}\|>"  # ChatML <|im_start|>, Llama 3 <|eot_id|> <|start_header_id|>, <|endoftext|>, Phi
    r"|<\uff5c[^\uff5c<>\s]{1,64}\uff5c>"  # DeepSeek's full-width bars: <｜end▁of▁sentence｜>
    r"|\[/?(?:INST|SYSTEM_PROMPT|TOOL_CALLS|AVAILABLE_TOOLS|TOOL_RESULTS|TOOL_CONTENT)\]"  # Mistral
    r"|</?(?:s|start_of_turn|end_of_turn|bos|eos|tool_call|tool_response)>"  # Llama 2/Mistral, Gemma, Hermes/Qwen
)
"""Chat-template control tokens of the common template families (as text)."""
_BREAK = "\u200b"  # ZERO WIDTH SPACE after a token's first character: no tokenizer reads it as the special token


def control_tokens(text: str, extra: Sequence[str] = ()) -> int:
    """How many chat-template control tokens ``text`` holds (those :func:`neutralize_control_tokens` breaks, plus
    ``extra`` strings such as a tokenizer's own special tokens)."""
    return len(_CONTROL.findall(text)) + sum(text.count(t) for t in extra if t)


def neutralize_control_tokens(text: str) -> str:
    """``text`` with every chat-template control token (ChatML ``<|im_end|>``, Llama 3 ``<|eot_id|>``, Mistral
    ``[INST]``, Gemma ``<start_of_turn>``, ``<|endoftext|>``, Hermes ``<tool_call>``, ...) broken by a zero-width
    space after its first character: it reads the same but tokenizes as plain text, so text from a server cannot open
    or close a turn. Idempotent; applied by :class:`ChatView` to everything that does not come from the model."""
    return _CONTROL.sub(lambda m: m.group()[0] + _BREAK + m.group()[1:], text) if "<" in text or "[" in text \
        else text


def unhandled_special_tokens(tokenizer: Any = None, extra: Collection[str] = ()) -> list[str]:
    """The special tokens of ``tokenizer`` (an object, or a local path or name loaded with
    ``transformers.AutoTokenizer``, never downloaded) and ``extra`` that :func:`neutralize_control_tokens` does not
    break: text holding one was shown to the model as it is."""
    tokens = list(extra)
    if isinstance(tokenizer, (str, os.PathLike)):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(os.fspath(tokenizer), local_files_only=True)
    if tokenizer is not None:
        tokens += list(getattr(tokenizer, "all_special_tokens", ()) or ())
        decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
        tokens += [str(t) for t in decoder.values() if getattr(t, "special", False)]
    return sorted({t for t in tokens if t and not _CONTROL.fullmatch(t)})


def _join(*parts: str) -> str:
    return neutralize_control_tokens("\n\n".join(p for p in parts if p))


def user_content(task: str, resources: Mapping[str, str] | None = None, notice: str = "") -> str:
    """The user turn: the task prompt, the reset's notice (the first observation's ``result``: servers that are
    unavailable this episode; usually empty), then every observed resource."""
    return _join(task or "", notice or "", render_resources(resources or {}))


def result_content(result: str, resources: Mapping[str, str] | None = None,
                   previous: Mapping[str, str] | None = None) -> str:
    """A tool message's content: the result text, then the resources that differ from ``previous``."""
    return _join(result or "", render_resources(resources or {}, previous or {}))


def no_call_feedback(parse_status: str | None) -> str:
    """The user message answering a reply without a usable tool call (worded by its parse status)."""
    reason = _NO_CALL_REASON.get(parse_status or "", _NO_CALL_REASON["no_tool_call"])
    return (f"Error: {reason}. Reply with a tool call from the tools you were given; when the task is done, call "
            "`submit` with your final answer.")


def tools_note(before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]]) -> str:
    """The note that tells the model its tools changed, from the OpenAI ``tools`` it was offered ``before`` to those
    offered ``after`` (``""`` when they are equal): the tools added or changed, one JSON object per line (the
    ``function`` of each schema, keys sorted), in the order offered, then the names of those removed. Deterministic: the
    same two lists give the same text in every face and in the SFT export."""
    old = {t["function"]["name"]: t["function"] for t in before}
    new = {t["function"]["name"]: t["function"] for t in after}
    added = [f for name, f in new.items() if old.get(name) != f]
    removed = [name for name in old if name not in new]
    if not added and not removed:
        return ""
    lines = ["[tools changed] The tools you can call have changed."]
    if added:
        lines.append("New or changed tools (now callable):")
        lines += [json.dumps(f, sort_keys=True, ensure_ascii=False) for f in added]
    if removed:
        lines.append(f"Removed tools (no longer callable): {', '.join(removed)}")
    return "\n".join(lines)


def assistant_content(parsed: ParseResult) -> str:
    """The model's own text of a parsed reply: without tool-call markup when it has calls, else the whole text."""
    return parsed.content if parsed.calls else parsed.raw_text


def env_tools(env: Any) -> list[dict[str, Any]]:
    """The ``tools`` an env offers now (``env.tool_catalogue()`` plus ``submit``)."""
    return openai_tools(env.unwrapped.tool_catalogue() if hasattr(env, "unwrapped") else env.tool_catalogue())


def to_wire(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Messages in the OpenAI chat-completions wire form (tool-call ``arguments`` as JSON strings)."""
    out = []
    for m in messages:
        if m.get("tool_calls"):
            m = {**m, "tool_calls": [
                {**c, "function": {**c["function"], "arguments": json.dumps(c["function"]["arguments"],
                                                                            ensure_ascii=False)}}
                for c in m["tool_calls"]]}
        out.append(dict(m))
    return out


class ChatView:
    """One episode's conversation, built turn by turn (see the module docs for the rules).

    Args:
        task: The task prompt (``obs["task"]``).
        resources: The resources observed at reset (``obs["resources"]``).
        system_prompt: The system message (``None``: none).
        show_resources: Render observed resources into the user turn and changed ones into the answers.
        notice: The first observation's ``result`` (why some servers are unavailable; usually empty), shown after
            the task.
        tools: The OpenAI ``tools`` offered at reset (:func:`env_tools`): the view then ends the first message after
            a change of the tools (given as ``tools=`` to :meth:`tool_result`, :meth:`no_call` or :meth:`end_turn`)
            with :func:`tools_note`. ``None``: no note is ever added.
    """

    def __init__(self, task: str, resources: Mapping[str, str] | None = None, *,
                 system_prompt: str | None = DEFAULT_SYSTEM_PROMPT, show_resources: bool = True,
                 notice: str = "", tools: Sequence[Mapping[str, Any]] | None = None) -> None:
        self.show_resources = show_resources
        self.tools: list[Mapping[str, Any]] | None = None if tools is None else list(tools)
        """The tools the model was last told of (reset's, then each change's); ``None``: not tracked."""
        self.resources: dict[str, str] = dict(resources or {})
        self.messages: list[dict[str, Any]] = []
        """The conversation in canonical form (arguments as JSON objects)."""
        self.turn = 0
        """Assistant replies so far (the next reply's turn number)."""
        if system_prompt is not None:
            self.messages.append({"role": "system", "content": system_prompt})
        self.messages.append({"role": "user",
                              "content": user_content(task, self.resources if show_resources else {}, notice)})

    def reply(self, content: str, calls: Sequence[ToolCall]) -> list[str]:
        """Append an assistant reply (its own text and its calls); returns the calls' ids."""
        ids = [call_id(self.turn, i) for i in range(len(calls))]
        message: dict[str, Any] = {"role": "assistant", "content": content or ""}
        if calls:
            message["tool_calls"] = [
                {"id": i, "type": "function", "function": {"name": c.name, "arguments": dict(c.arguments)}}
                for c, i in zip(calls, ids, strict=True)]
        self.messages.append(message)
        self.turn += 1
        return ids

    def _changed(self, resources: Mapping[str, str] | None) -> Mapping[str, str]:
        """The resources to render into an answer (those changed), updating the last ones seen."""
        resources = dict(resources or {})
        previous, self.resources = self.resources, resources
        return {u: t for u, t in resources.items() if previous.get(u) != t} if self.show_resources else {}

    def _note(self, tools: Sequence[Mapping[str, Any]] | None) -> str:
        """The :func:`tools_note` for the tools offered now (``None``: unchanged), updating the last ones told."""
        if tools is None or self.tools is None:
            return ""
        note, self.tools = tools_note(self.tools, tools), list(tools)
        return note

    def tool_result(self, id: str, name: str, result: str, resources: Mapping[str, str] | None = None,
                    tools: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
        """Append the tool message answering call ``id``: the result, then the resources that changed, then (when
        ``tools``, those offered now, differ from the last ones told) :func:`tools_note`."""
        message = {"role": "tool", "tool_call_id": id, "name": name,
                   "content": _join(result_content(result, self._changed(resources)), self._note(tools))}
        self.messages.append(message)
        return message

    def no_call(self, parse_status: str | None, resources: Mapping[str, str] | None = None,
                tools: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
        """Append the user message answering a reply without a usable call, plus the resources that changed (and
        :func:`tools_note`, as in :meth:`tool_result`)."""
        message = {"role": "user",
                   "content": _join(no_call_feedback(parse_status), render_resources(self._changed(resources)),
                                    self._note(tools))}
        self.messages.append(message)
        return message

    def end_turn(self, prompt: str, resources: Mapping[str, str] | None = None, *, id: str | None = None,
                 answer: str | None = None, tools: Sequence[Mapping[str, Any]] | None = None
                 ) -> list[dict[str, Any]]:
        """A user turn ended with ``submit``: the call ``id`` of the last reply (``None``: the reply was a text the
        caller submitted, already in the view) becomes the assistant's text reply ``answer``, and the next user
        message (``prompt``, then the resources that changed, then :func:`tools_note` as in :meth:`tool_result`)
        follows. Returns the messages appended."""
        added: list[dict[str, Any]] = []
        if id is not None:
            message = next(m for m in reversed(self.messages) if m["role"] == "assistant")
            calls = message.get("tool_calls") or []
            kept = calls[:next((k for k, c in enumerate(calls) if c["id"] == id), len(calls))]
            if kept:  # calls before the submit ran: the answer follows their results
                message["tool_calls"] = kept
                added.append({"role": "assistant", "content": answer or ""})
                self.messages.append(added[-1])
            else:
                message.pop("tool_calls", None)
                if answer and not message["content"].endswith(answer):  # (a text reply submitted is its own answer)
                    message["content"] = _join(message["content"], answer)
        added.append({"role": "user", "content": _join(user_content(prompt, self._changed(resources)),
                                                       self._note(tools))})
        self.messages.append(added[-1])
        return added

    def wire(self) -> list[dict[str, Any]]:
        """The conversation in OpenAI wire form (see :func:`to_wire`)."""
        return to_wire(self.messages)
