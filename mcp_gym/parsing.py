"""The text-action layer: model output -> tool calls, with the raw text and a parse status for the record.

Language models emit tool calls in a few common shapes. :func:`parse_tool_calls` reads all of them from text, and
:func:`parse_message` from an OpenAI chat-completions assistant message::

    parse_tool_calls('<tool_call>{"name": "add", "arguments": {"amount": 2}}</tool_call>').calls
    # [ToolCall(name='add', arguments={'amount': 2})]

Recognised, in this order:

* OpenAI ``tool_calls`` on a message (``function.arguments`` is a JSON string on the wire);
* Hermes / Qwen ``<tool_call>{json}</tool_call>`` blocks (the closing tag may be missing at the end of the text);
* Llama 3.1 ``<|python_tag|>{json}`` and Mistral ``[TOOL_CALLS][{json}, ...]``;
* bare JSON anywhere in the text, also inside a Markdown code fence: ``{"name": ..., "arguments": {...}}``
  (``"parameters"`` for the arguments and ``"tool"`` for the name are accepted too), a list of those,
  ``{"tool_calls": [...]}`` or the OpenAI ``{"type": "function", "function": {...}}`` form.

Parsing never raises: text without a usable call gives a :class:`ParseResult` with no calls and a ``status`` saying
why (``no_tool_call``, ``invalid_json``, ``invalid_call``), which the env turns into an error observation and the
recorder stores next to the raw text. :func:`format_tool_calls` writes calls in the Hermes or JSON form; parsing its
output gives the same calls back.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "ToolCall",
    "ParseResult",
    "ParseStatus",
    "parse_tool_calls",
    "parse_message",
    "format_tool_calls",
]

ParseStatus = Literal["ok", "no_tool_call", "invalid_json", "invalid_call"]
"""``ok``: every call found was read; ``no_tool_call``: nothing that looks like a call; ``invalid_json``: a call
block is not valid JSON; ``invalid_call``: valid JSON but not a call (no name, arguments not an object, ...)."""

ACTION_EXTRA_KEYS = ("raw_text", "parse_status", "turn", "assistant_content")
"""Keys an action may carry besides ``tool`` and ``arguments`` (recorded, then stripped before the env sees it):
the model output, its parse status, the index of the model reply in the episode and the reply's own text as the chat
view shows it back (see :mod:`mcp_gym.chat`)."""

_HERMES_OPEN = "<tool_call>"
_HERMES_CLOSE = "</tool_call>"
_MARKERS = ("<|python_tag|>", "[TOOL_CALLS]")
_FENCE = re.compile(r"```[ \t]*(?:json|tool_call|tool_code)?[ \t]*\n(.*?)```", re.S | re.I)
_MAX_JSON_STARTS = 256  # bare-JSON candidates tried per text: keeps adversarial input (``{{{{…``) cheap
_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class ToolCall:
    """One tool call: a tool name and its arguments (a JSON object); ``id`` as the model gave it, if any."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    id: str | None = None

    def to_action(self) -> dict[str, Any]:
        """The env action ``{"tool": name, "arguments": {...}}``."""
        return {"tool": self.name, "arguments": dict(self.arguments)}

    def to_openai(self, index: int = 0) -> dict[str, Any]:
        """The OpenAI wire form (``arguments`` as a JSON string), as sent back in an assistant message."""
        return {
            "id": self.id or f"call_{index}",
            "type": "function",
            "function": {"name": self.name, "arguments": json.dumps(self.arguments, ensure_ascii=False)},
        }


@dataclass(frozen=True)
class ParseResult:
    """What :func:`parse_tool_calls` / :func:`parse_message` read from one model output.

    Attributes:
        calls: The calls read, in order (possibly some even when ``status`` reports a broken block).
        content: The text without tool-call markup (reasoning, prose, a final answer).
        status: ``ok`` or why a call could not be read (see :data:`ParseStatus`).
        error: A one-line explanation when ``status`` is not ``ok``.
        raw_text: The text the calls were parsed from.
    """

    calls: list[ToolCall]
    content: str
    status: ParseStatus
    error: str | None = None
    raw_text: str = ""

    @property
    def ok(self) -> bool:
        """At least one call was read and nothing was broken."""
        return self.status == "ok"


# -- reading one call object ------------------------------------------------------------------------------------------
class _BadCall(ValueError):
    """A JSON value that should be a call but is not one."""


def _as_call(obj: Any) -> ToolCall:
    """A :class:`ToolCall` from a decoded JSON object in any of the accepted shapes (raises :class:`_BadCall`)."""
    if not isinstance(obj, Mapping):
        raise _BadCall(f"a tool call must be a JSON object, got {type(obj).__name__}")
    call_id = obj.get("id")
    fn = obj.get("function")
    if isinstance(fn, Mapping):  # OpenAI {"type": "function", "function": {"name", "arguments"}}
        obj = fn
    name = obj.get("name", obj.get("tool"))
    if not isinstance(name, str) or not name:
        raise _BadCall("a tool call needs a non-empty string 'name'")
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # double-encoded arguments (the OpenAI wire form)
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError as e:
            raise _BadCall(f"arguments of '{name}' are not valid JSON: {e}") from None
    if args is None:
        args = {}
    if not isinstance(args, Mapping):
        raise _BadCall(f"arguments of '{name}' must be a JSON object, got {type(args).__name__}")
    return ToolCall(name, dict(args), call_id if isinstance(call_id, str) else None)


def _looks_like_call(obj: Any) -> bool:
    """Whether a bare JSON value is meant as a call (so other JSON in prose is left alone)."""
    if isinstance(obj, list):
        return bool(obj) and all(_looks_like_call(o) for o in obj)
    if not isinstance(obj, Mapping):
        return False
    if isinstance(obj.get("tool_calls"), list):
        return True
    if isinstance(obj.get("function"), Mapping):
        return True
    return ("name" in obj or "tool" in obj) and ("arguments" in obj or "parameters" in obj)


def _calls_of(obj: Any) -> list[ToolCall]:
    """Every call in a decoded value: a call, a list of calls or ``{"tool_calls": [...]}``."""
    if isinstance(obj, Mapping) and isinstance(obj.get("tool_calls"), list):
        obj = obj["tool_calls"]
    if isinstance(obj, list):
        return [_as_call(o) for o in obj]
    return [_as_call(obj)]


def _decode(text: str, start: int) -> tuple[Any, int]:
    """``json.JSONDecoder.raw_decode`` that turns every failure into ``ValueError``."""
    try:
        return _DECODER.raw_decode(text, start)
    except RecursionError:  # absurdly deep nesting
        raise ValueError("JSON nested too deeply") from None


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i


# -- the parser -------------------------------------------------------------------------------------------------------
class _Scan:
    """Accumulates calls, kept text and the first problem while scanning one text."""

    def __init__(self) -> None:
        self.calls: list[ToolCall] = []
        self.kept: list[str] = []
        self.status: ParseStatus = "ok"
        self.error: str | None = None

    def problem(self, status: ParseStatus, error: str) -> None:
        if self.error is None:
            self.status, self.error = status, error

    def take(self, obj: Any) -> None:
        try:
            self.calls.extend(_calls_of(obj))
        except _BadCall as e:
            self.problem("invalid_call", str(e))

    def result(self, raw: str) -> ParseResult:
        content = "".join(self.kept).strip()
        if not self.calls and self.error is None:
            self.problem("no_tool_call", "no tool call found in the model output")
        return ParseResult(self.calls, content, self.status, self.error, raw)


def _scan_hermes(text: str, scan: _Scan) -> bool:
    """Read ``<tool_call>`` blocks; False if the text has none."""
    if _HERMES_OPEN not in text:
        return False
    pos = 0
    while True:
        i = text.find(_HERMES_OPEN, pos)
        if i < 0:
            scan.kept.append(text[pos:])
            return True
        scan.kept.append(text[pos:i])
        body = i + len(_HERMES_OPEN)
        close = text.find(_HERMES_CLOSE, body)
        try:
            obj, end = _decode(text, _skip_ws(text, body))
        except ValueError as e:
            scan.problem("invalid_json", f"<tool_call> block is not valid JSON: {e}")
            if close < 0:
                return True  # the rest of the text is the broken block
            pos = close + len(_HERMES_CLOSE)
            continue
        scan.take(obj)
        end = _skip_ws(text, end)
        if text.startswith(_HERMES_CLOSE, end):
            end += len(_HERMES_CLOSE)
        elif end < len(text) and close >= 0:  # junk after the JSON inside the block
            scan.problem("invalid_json", "unexpected text after the JSON in a <tool_call> block")
            end = close + len(_HERMES_CLOSE)
        pos = end


def _scan_marker(text: str, scan: _Scan) -> bool:
    """Read a ``<|python_tag|>`` / ``[TOOL_CALLS]`` tail; False if the text has no marker."""
    hits = [(text.find(m), m) for m in _MARKERS if m in text]
    if not hits:
        return False
    i, marker = min(hits)
    scan.kept.append(text[:i])
    rest = text[i + len(marker):]
    start = _skip_ws(rest, 0)
    objs: list[Any] = []
    while start < len(rest):
        try:
            obj, end = _decode(rest, start)
        except ValueError as e:
            scan.problem("invalid_json", f"the call after {marker} is not valid JSON: {e}")
            break
        objs.append(obj)
        start = _skip_ws(rest, end)
        if rest.startswith(";", start):  # Llama 3.1 separates several calls with ';'
            start = _skip_ws(rest, start + 1)
    for obj in objs:
        scan.take(obj)
    return True


def _scan_bare(text: str, scan: _Scan) -> None:
    """Read JSON call objects anywhere in the text (fenced code first, then the text itself)."""
    fenced = list(_FENCE.finditer(text))
    for m in fenced:
        body = m.group(1).strip()
        try:
            obj, end = _decode(body, 0)
        except ValueError:
            continue
        if _skip_ws(body, end) == len(body) and _looks_like_call(obj):
            scan.take(obj)
    if scan.calls or scan.error:
        pos = 0
        for m in fenced:
            scan.kept.append(text[pos:m.start()])
            pos = m.end()
        scan.kept.append(text[pos:])
        return
    pos = 0
    starts = 0
    i = _next_json_start(text, 0)
    while i >= 0 and starts < _MAX_JSON_STARTS:
        starts += 1
        try:
            obj, end = _decode(text, i)
        except ValueError:
            i = _next_json_start(text, i + 1)
            continue
        if _looks_like_call(obj):
            scan.kept.append(text[pos:i])
            scan.take(obj)
            pos = end
        i = _next_json_start(text, end)
    scan.kept.append(text[pos:])
    if not scan.calls and scan.error is None and _broken_call_json(text):
        scan.problem("invalid_json", "the output looks like a JSON tool call but is not valid JSON")


def _next_json_start(text: str, i: int) -> int:
    a, b = text.find("{", i), text.find("[", i)
    return min(a, b) if a >= 0 and b >= 0 else max(a, b)


def _broken_call_json(text: str) -> bool:
    """Text that starts like a JSON call but did not decode (so the status says invalid_json, not no_tool_call)."""
    t = text.strip()
    return t[:1] in ("{", "[") and ('"name"' in t or '"tool"' in t)


def parse_tool_calls(text: str) -> ParseResult:
    """Read the tool calls in a model's text output (see the module docs for the formats). Never raises."""
    if not isinstance(text, str):
        return ParseResult([], "", "no_tool_call", f"expected text, got {type(text).__name__}", "")
    scan = _Scan()
    if _HERMES_OPEN in text or any(m in text for m in _MARKERS):
        bare = _Scan()  # markup only inside the JSON of bare calls (e.g. an argument "<tool_call>"): not markup
        _scan_bare(text, bare)
        kept = "".join(bare.kept)
        if bare.calls and bare.error is None and _HERMES_OPEN not in kept and not any(m in kept for m in _MARKERS):
            return bare.result(text)
    if not _scan_hermes(text, scan) and not _scan_marker(text, scan):
        _scan_bare(text, scan)
    return scan.result(text)


def parse_message(message: Mapping[str, Any]) -> ParseResult:
    """Read the tool calls of an OpenAI chat-completions assistant message (``tool_calls``, else its text).

    The raw text recorded is the message content, followed by the wire form of its ``tool_calls`` (if any), so the
    record shows exactly what the model produced. Never raises.
    """
    if not isinstance(message, Mapping):
        return ParseResult([], "", "no_tool_call", f"expected a message dict, got {type(message).__name__}", "")
    content = message.get("content")
    if isinstance(content, list):  # content parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, Mapping))
    content = content if isinstance(content, str) else ""
    raw_calls = message.get("tool_calls")
    if not raw_calls:
        return parse_tool_calls(content)
    raw = content + ("\n" if content else "") + json.dumps(raw_calls, ensure_ascii=False, default=str)
    scan = _Scan()
    scan.kept.append(content)
    if not isinstance(raw_calls, list):
        scan.problem("invalid_call", "tool_calls must be a list")
    else:
        for c in raw_calls:
            scan.take(c)
    return scan.result(raw)


def format_tool_calls(
    calls: Sequence[ToolCall], content: str = "", style: Literal["hermes", "json"] = "hermes"
) -> str:
    """Write calls as a model would: Hermes ``<tool_call>`` blocks or one bare JSON value, after ``content``.

    ``parse_tool_calls(format_tool_calls(calls)).calls`` gives ``calls`` back (ids aside).
    """
    objs = [{"name": c.name, "arguments": c.arguments} for c in calls]
    if style == "hermes":
        blocks = [f"{_HERMES_OPEN}\n{json.dumps(o, ensure_ascii=False)}\n{_HERMES_CLOSE}" for o in objs]
        body = "\n".join(blocks)
    elif style == "json":
        body = json.dumps(objs[0] if len(objs) == 1 else objs, ensure_ascii=False)
    else:
        raise ValueError(f"style must be 'hermes' or 'json', not {style!r}")
    return f"{content}\n{body}" if content else body


def split_action(action: Any) -> tuple[Any, dict[str, Any]]:
    """``(env_action, extras)``: the action without the :data:`ACTION_EXTRA_KEYS`, and those keys.

    Use it before stepping a bare :class:`~mcp_gym.env.MCPEnv` (the recording wrapper strips them itself).
    """
    if action.__class__ is dict and action.keys().isdisjoint(ACTION_EXTRA_KEYS):  # the common case, fast
        return action, {}
    if isinstance(action, Mapping) and any(k in action for k in ACTION_EXTRA_KEYS):
        extras = {k: action[k] for k in ACTION_EXTRA_KEYS if k in action}
        return {k: v for k, v in action.items() if k not in ACTION_EXTRA_KEYS}, extras
    return action, {}
