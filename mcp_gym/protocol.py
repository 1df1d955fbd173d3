"""mcp-gym's own wire protocol on top of MCP: its ``_meta`` keys, its hidden tools and its error kinds.

The bottom layer of the package: it imports nothing from ``mcp_gym``, and every side that speaks this protocol (the
server kit, the client host, the env, rewards, the cassette, drift, SFT export, recording) takes the names from here.

* Request ``_meta``: :data:`EPISODE_META_KEY`, :data:`TASK_META_KEY`, :data:`SEED_META_KEY` on every request the
  env sends, so one server process can serve many episodes and a replay server can match them.
* Result ``_meta``: :data:`CHANGES_META_KEY` (what changed during the call), :data:`REWARD_META_KEY` and
  :data:`DONE_META_KEY` (the reward convention for servers that cannot change their structured content).
* Tool ``_meta``: :data:`HIDDEN_META_KEY`; hidden tools :data:`RESET_TOOL` and :data:`STATE_TOOL`.
* Tool catalogues are compared (drift, recordings, the env's ``info["catalogue_hash"]``) by
  :func:`catalogue_fingerprint`, the one recipe.
* ``info["error"]`` of a failed step: a :class:`ToolCallError` as a dict; its ``kind`` is one of :data:`ERROR_KINDS`.
* A ``tools/call`` result a reader cannot take as one value (neither content nor ``structuredContent``, or the two
  disagreeing): :func:`result_problem`, the one rule of graders and recorders.
* Secrets: :func:`redact_url` is the one function every URL passes through before it is written or shown (specs,
  ``info["servers"]``, manifests, cassettes, reports, logs, error texts sent to an agent); :func:`redact_text` applies
  it to every URL inside a text.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

__all__ = [
    "result_problem",
    "REDACTED",
    "redact_url",
    "redact_text",
    "RedactUrls",
    "HTTP_LOGGERS",
    "redact_http_logs",
    "SUBMIT_SCHEMA",
    "SUBMIT_DESCRIPTION",
    "SUBMIT_RECORD",
    "openai_function",
    "openai_tools",
    "SUMMARY_KEY",
    "EPISODE_META_KEY",
    "TASK_META_KEY",
    "SEED_META_KEY",
    "HIDDEN_META_KEY",
    "CHANGES_META_KEY",
    "REWARD_META_KEY",
    "DONE_META_KEY",
    "RESET_TOOL",
    "STATE_TOOL",
    "TURN_TOOL",
    "HIDDEN_TOOLS",
    "ERROR_KINDS",
    "ACTION_ERROR_KINDS",
    "SERVER_ERROR_KINDS",
    "ToolCallError",
    "catalogue_fingerprint",
    "json_default",
]

# -- _meta keys -------------------------------------------------------------------------------------------------------
EPISODE_META_KEY: Final = "mcp-gym/episode"
"""Request ``_meta`` key carrying the episode id on every request mcp-gym sends."""
TASK_META_KEY: Final = "mcp-gym/task"
"""Request ``_meta`` key carrying the episode's task id (next to the episode id), e.g. for a replay server to match
episodes."""
SEED_META_KEY: Final = "mcp-gym/seed"
"""Request ``_meta`` key carrying the episode's reset seed."""
HIDDEN_META_KEY: Final = "mcp-gym/hidden"
"""Tool ``_meta`` flag: the env never offers this tool to the agent."""
CHANGES_META_KEY: Final = "mcp-gym/changes"
"""Result ``_meta`` key listing what changed during a tool call (``{"tools": true, "resources": [uris]}``), so the env
sees changes in the same step even when the notification itself arrives later (e.g. on the 2026 listen stream)."""
REWARD_META_KEY: Final = "mcp-gym/reward"
"""Result ``_meta`` key: the step reward, for servers that cannot put ``reward`` in their structured content."""
DONE_META_KEY: Final = "mcp-gym/done"
"""Result ``_meta`` key: ``true`` ends the episode (same convention as ``REWARD_META_KEY``)."""

# -- hidden tools -----------------------------------------------------------------------------------------------------
RESET_TOOL: Final = "mcp_gym_reset"
"""Name of the hidden reset tool: ``mcp_gym_reset(task_id, seed)`` makes the initial state of a task reproducibly."""
STATE_TOOL: Final = "mcp_gym_state"
"""Name of the hidden state-snapshot tool: ``mcp_gym_state()`` returns the JSON state task verifiers grade."""
TURN_TOOL: Final = "mcp_gym_turn"
"""Name of the hidden turn hook: ``mcp_gym_turn(turn)`` is called at the start of each user turn ``turn >= 1`` of a
multi-turn task (a server may add tools for that turn and send ``tools/list_changed``)."""
HIDDEN_TOOLS: Final = (RESET_TOOL, STATE_TOOL, TURN_TOOL)
"""The tools an mcp-gym server adds that the agent never sees."""

# -- error kinds (info["error"]["kind"]) ------------------------------------------------------------------------------
ACTION_ERROR_KINDS: Final = frozenset({"malformed", "unknown_tool", "invalid_arguments", "too_large"})
"""Kinds of an action refused before any call (the agent's fault; ``ToolCallSpace.validation_error``). ``too_large`` is
also the kind of a call whose answer from a stdio server was over its ``max_message_bytes`` (the message is dropped)."""
SERVER_ERROR_KINDS: Final = frozenset(
    {"server_dead", "timeout", "connection_lost", "jsonrpc", "invalid_result", "client_error", "verifier_error",
     "episode_over", "unrecordable"}
)
"""Kinds that are the infrastructure's fault, not the agent's (SFT export's ``drop_errors`` drops their episodes).
``connection_lost``: an HTTP connection broke after the call was sent (the call may or may not have run; the session
stays open). ``unrecordable``: the recorder could not take a step apart (its recorded row holds only unencodable
markers)."""
ERROR_KINDS: Final = ACTION_ERROR_KINDS | SERVER_ERROR_KINDS | {"tool_error", "parse_error", "exception", "budget"}
"""Every ``info["error"]["kind"]``: the above, plus ``tool_error`` (the tool answered ``isError``), ``parse_error``
(a text env could not parse the model's message into a tool call), ``exception`` (a recorded client call raised) and
``budget`` (a model reply past ``max_turns``, not executed)."""


# -- secrets out of what is written or shown -------------------------------------------------------------------
REDACTED = "<redacted>"
"""What a secret (a header value, a URL's user info or query value, an auth object) is replaced by wherever it would
be shown or saved."""


def redact_url(url: str) -> str:
    """``url`` with every place a secret hides masked by :data:`REDACTED`: the whole user info
    (``https://<redacted>@host/mcp``: a token is often the user name), every query value (``?api_key=<redacted>``) and
    the fragment's. Scheme, host, port, path and parameter names stay, so the server is still recognisable. The one
    function for every URL mcp-gym writes or shows (specs, manifests, recordings, reports, errors sent to an agent)."""
    try:
        parts = urlsplit(url)
    except ValueError:  # not parsable as a URL (e.g. a bad port): nothing of it is shown
        return REDACTED
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{REDACTED}@{netloc.rpartition('@')[2]}"
    return urlunsplit(parts._replace(netloc=netloc, query=_redact_params(parts.query),
                                     fragment=_redact_params(parts.fragment)))


def _redact_params(params: str) -> str:
    """``a=1&b=2`` as ``a=<redacted>&b=<redacted>``; a bare word (``?TOKEN``) is masked whole."""
    if not params:
        return params
    out = []
    for item in params.split("&"):
        name, eq, _ = item.partition("=")
        out.append(f"{name}={REDACTED}" if eq else (REDACTED if item else item))
    return "&".join(out)


_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s<>\"'`]+")


def redact_text(text: str) -> str:
    """``text`` (an error message, a command line) with every URL in it passed through :func:`redact_url`."""
    if "://" not in text:
        return text
    return _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), text)


class RedactUrls(logging.Filter):
    """A logging filter passing every record's message through :func:`redact_text`: HTTP clients log the URLs they
    request (httpx2 at INFO: ``HTTP Request: POST https://user:pw@host/mcp?api_key=...``), secrets included."""

    def filter(self, record: logging.LogRecord) -> bool:  # noqa: D102 - logging.Filter's
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a record that cannot be formatted is the handler's to report
            return True
        redacted = redact_text(message)
        if redacted != message:
            record.msg, record.args = redacted, ()
        return True


HTTP_LOGGERS: Final = ("httpx2", "httpx", "httpcore", "aiohttp.client", "aiohttp.internal", "urllib3.connectionpool",
                       "mcp.client.streamable_http", "mcp.client.sse", "mcp.shared._httpx_utils")
"""Loggers of the HTTP stacks mcp-gym reaches servers through (and their usual neighbours) that may log URLs."""


def redact_http_logs() -> None:
    """Put one :class:`RedactUrls` filter on each of :data:`HTTP_LOGGERS` (idempotent; the client layer calls it)."""
    for name in HTTP_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactUrls) for f in logger.filters):
            logger.addFilter(RedactUrls())


@dataclass(frozen=True)
class ToolCallError:
    """Why a step failed: the one shape of ``info["error"]`` (written with :meth:`as_dict`) and of recorded errors.

    Args:
        kind: one of :data:`ERROR_KINDS` (anything else raises ``ValueError``).
        message: one line naming the tool, server and argument at fault (URLs in it are redacted: user info and
            query values, see :func:`redact_url`).
        tool: the tool the agent named, if any.
        server: the server alias the call went to, if known.
        argument: path of the offending argument (``items[2].name``), for invalid arguments.
        code: the JSON-RPC error code (or a text env's parse status), if any.

    >>> ToolCallError("timeout", "no result in 5 s", tool="add").as_dict()
    {'kind': 'timeout', 'tool': 'add', 'server': None, 'argument': None, 'code': None, 'message': 'no result in 5 s'}
    """

    kind: str
    message: str
    tool: str | None = None
    server: str | None = None
    argument: str | None = None
    code: Any = None

    def __post_init__(self) -> None:
        if self.kind not in ERROR_KINDS:
            raise ValueError(f"unknown error kind {self.kind!r}; mcp_gym.protocol.ERROR_KINDS lists the known ones")
        object.__setattr__(self, "message", redact_text(self.message))  # it reaches agents, logs and recordings

    def as_dict(self) -> dict[str, Any]:
        """``{"kind", "tool", "server", "argument", "code", "message"}``, the JSON form in ``info`` and recordings."""
        return {"kind": self.kind, "tool": self.tool, "server": self.server, "argument": self.argument,
                "code": self.code, "message": self.message}


# -- tool catalogue fingerprint ---------------------------------------------------------------------------------------
def json_default(o: Any) -> Any:
    """JSON for values the json module does not know: numpy scalars/arrays, pydantic models, bytes, sets."""
    if hasattr(o, "model_dump"):
        return o.model_dump(mode="json", by_alias=True, exclude_none=True)
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, (bytes, bytearray)):
        return o.decode("utf-8", errors="replace")
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    return str(o)


def catalogue_fingerprint(tools: Sequence[Mapping[str, Any]]) -> str:
    """A 16-hex-digit fingerprint of a list of tool schemas (``mcp_gym.client.host.ToolEntry.to_record`` dicts): the
    one recipe behind the env's ``info["catalogue_hash"]`` and the recorded ``catalogue_hash`` column.

    >>> catalogue_fingerprint([{"name": "add", "input_schema": {"type": "object"}}])
    '18055b696d8bfd16'
    """
    blob = json.dumps(list(tools), sort_keys=True, ensure_ascii=False, default=json_default)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# -- the built-in final-answer tool and the episode summary ------------------------------------------------------------
SUBMIT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string", "description": "Your final answer."}},
    "required": ["answer"],
    "additionalProperties": False,
}
SUBMIT_DESCRIPTION = "Submit your final answer and end the episode. Call this once, when the task is done."
SUBMIT_RECORD: dict[str, Any] = {"name": "submit", "server": None, "server_tool": None,
                                 "description": SUBMIT_DESCRIPTION, "input_schema": SUBMIT_SCHEMA,
                                 "output_schema": None, "annotations": {}}
"""The built-in ``submit`` tool in the recorded form of a tool (``mcp_gym.client.host.ToolEntry.to_record``)."""


def openai_function(record: Mapping[str, Any]) -> dict[str, Any]:
    """The OpenAI function-calling schema (chat-completions ``tools=``) of a tool in its recorded form (``name``,
    ``description``, ``input_schema``): the one converter to that shape.

    >>> openai_function(SUBMIT_RECORD)["function"]["name"]
    'submit'
    """
    return {"type": "function", "function": {"name": record["name"], "description": record.get("description") or "",
                                             "parameters": record.get("input_schema") or {"type": "object"}}}


def openai_tools(records: Sequence[Mapping[str, Any]], *, submit: bool = True) -> list[dict[str, Any]]:
    """The ``tools`` of a chat-completions request: each tool's :func:`openai_function`, then the built-in ``submit``
    (:data:`SUBMIT_RECORD`) unless a tool of the catalogue is already named so (the env then routes ``submit`` to
    that tool). What the env offers (``MCPEnv.openai_tools``), the policies send and the SFT export writes.

    >>> [t["function"]["name"] for t in openai_tools([{"name": "add", "input_schema": {"type": "object"}}])]
    ['add', 'submit']
    """
    tools = [openai_function(r) for r in records]
    if submit and not any(r["name"] == "submit" for r in records):
        tools.append(openai_function(SUBMIT_RECORD))
    return tools


SUMMARY_KEY = "summary"
"""The ``info`` key of mcp-gym's episode summary (``return``, ``length``, ``termination``, ``turns``, ``tool_calls``) on
an episode's last step; ``info["episode"]`` is left to Gymnasium's ``RecordEpisodeStatistics``."""


# -- results that cannot be read as one value --------------------------------------------------------------------------
def _agrees(text: str, value: Any) -> bool:
    """Whether a text block agrees with the structured ``value`` it should serialise: equal as a string, or (a JSON
    text) equal as JSON; a text that is not JSON is a rendering and is not compared."""
    if isinstance(value, str) and text == value:
        return True
    try:
        shown = json.loads(text)
    except ValueError:
        return not isinstance(value, str)  # a rendering of a non-string; a string must be shown as itself
    return bool(shown == value)


def result_problem(result: Any) -> str | None:
    """Why a successful ``tools/call`` result (``isError`` absent or false) cannot be read as one value, or ``None``.

    * Neither ``content`` nor ``structuredContent``: the tool said nothing a grader or a reward could read.
    * ``structuredContent`` that disagrees with its text content: MCP asks a tool with structured output to return it
      serialised as text too, and the model is shown the text while a grader or a reward reads the structure. Text
      blocks are compared only where they are JSON (or the structure is a string): other text is a rendering. The MCP
      SDK's own forms agree: a dict as JSON, a wrapped value ``{"result": v}`` as ``v``, a wrapped list as one block
      per item.

    ``result`` is an ``mcp.types.CallToolResult`` (read by attribute: ``content``, ``structured_content``)."""
    content = list(getattr(result, "content", None) or ())
    structured = getattr(result, "structured_content", None)
    if not content and structured is None:
        return "returned neither content nor structuredContent"
    texts = [b.text for b in content
             if getattr(b, "type", None) == "text" and isinstance(getattr(b, "text", None), str)]
    if structured is None or not texts:
        return None
    joined = "\n".join(texts)
    if isinstance(structured, dict) and set(structured) == {"result"}:  # the SDK's wrapped value: shown as itself
        value = structured["result"]
        with contextlib.suppress(ValueError):
            if json.loads(joined) == structured:
                return None
        if isinstance(value, list) and len(value) == len(texts) and len(texts) > 1:  # one block per item
            agrees = all(map(_agrees, texts, value))
        else:
            agrees = _agrees(joined, value) or (isinstance(value, list) and len(value) == len(texts)
                                                and _agrees(texts[0], value[0]))
    else:
        agrees = _agrees(joined, structured)
    if agrees:
        return None
    return (f"returned structuredContent that disagrees with its text content (structuredContent "
            f"{json.dumps(structured, default=str)[:200]}, text {joined[:200]!r})")
