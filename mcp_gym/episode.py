"""The episode's home: :class:`Episode`, one episode's state (its task, counters, budget use, workspace, transcript,
grade), made by each reset; :class:`StepInfo`, the ``info`` dict of :meth:`MCPEnv.step <mcp_gym.env.MCPEnv.step>`;
:class:`EpisodeState`, what per-episode code outside ``env.py`` (graders, workspace set-up) uses of a running env
instead of its private attributes; :class:`ObservedResources`, the resources an episode observes."""

from __future__ import annotations

import re
import shutil
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Generic, Literal, Protocol, TypedDict, TypeVar, overload

import mcp.types as mt
from mcp import MCPError

from mcp_gym._budget import Budget
from mcp_gym.client.connection import ConnectionLost
from mcp_gym.client.host import MCPHost, render_content
from mcp_gym.protocol import TURN_TOOL, ToolCallError
from mcp_gym.tasks import Task

__all__ = ["Episode", "FromEpisode", "StepInfo", "StepResult", "EpisodeState", "ObservedResources"]

TRANSCRIPT_CHARS = 2000
"""How much of a result's text the transcript keeps."""


class StepInfo(TypedDict, total=False):
    """The ``info`` of :meth:`MCPEnv.step <mcp_gym.env.MCPEnv.step>` (a plain dict at run time; every step has the
    first six keys, a tool or ``submit`` step the next nine, the last step of an episode ``summary``)."""

    episode_id: str | None
    """The episode's id (as the reset's ``info``)."""
    task_id: str | None
    """The current task's id."""
    step: int
    """1-based index of this step in the episode."""
    error: dict[str, Any] | None
    """What went wrong (``kind``, ``tool``, ``server``, ``argument``, ``code``, ``message``), or ``None``."""
    tools_changed: bool
    """The tool catalogue changed during the step (``notifications/tools/list_changed``)."""
    logs: list[dict[str, Any]]
    """Servers' log messages since the last step."""
    tool: str | None
    """The tool called (the name the policy used; ``"submit"`` for a final answer)."""
    server: str | None
    """The alias of the server that served it."""
    server_tool: str | None
    """The tool's name on that server (without the alias prefix)."""
    is_error: bool
    """The call failed (an error result, a result whose text matches ``error_text``, or an ``error``)."""
    content: list[dict[str, Any]]
    """All content blocks of the result as JSON (images included)."""
    structured_content: Any
    """The result's ``structuredContent``, if any."""
    duration: float
    """Seconds the call took."""
    progress: list[Any]
    """Progress notifications received during the call."""
    termination: str | None
    """Why the episode ended at this step (``done``, ``submit``, ``max_steps``, ``max_turns``, ``max_tool_calls``,
    ``servers_dead``), else ``None``."""
    servers: dict[str, dict[str, Any]]
    """Per-server status (when the catalogue changed or every server is dead)."""
    success: bool | None
    """The episode's verdict at its end (``None``: unknown, nothing graded it)."""
    summary: dict[str, Any]
    """At the end: ``return``, ``length``, ``termination``, ``turns`` and ``tool_calls`` used."""
    grade: dict[str, Any] | None
    """The grader's grade (``score``, ``passed``, ``reason``, ...) when a grader graded the episode."""
    final_answer: str | None
    """A ``submit`` step's answer (JSON text for a non-string answer)."""
    verifier_reward: float
    """A ``submit`` step's reward from the verifier or grader."""
    turn: int
    """A multi-turn task's user turn the episode is in now (0-based; after a ``submit`` that ended a turn, the new
    one)."""
    turns: int
    """A multi-turn task's number of user turns."""
    turn_answer: str | None
    """A ``submit`` that ended a user turn (not the last): its answer (the agent's reply of that turn)."""


StepResult = tuple[dict[str, Any], float, bool, bool, StepInfo]
"""What ``astep`` returns: ``(obs, reward, terminated, truncated, info)``."""


class Episode:
    """One episode of an env: made by its ``reset`` (the env's :attr:`~mcp_gym.env.MCPEnv.episode`), so nothing of
    an earlier episode (counters, budget use, transcript, grade, workspace) can leak into it; a reference to an old
    episode changes nothing of the new one.

    Graders and workspace set-up use it through :meth:`record_call`, :meth:`end` and :attr:`workspace`; the env
    counts steps and the return."""

    def __init__(self, task: Task, seed: int, budget: Budget) -> None:
        self.id: str = uuid.uuid4().hex
        """The episode's id (``info["episode_id"]``, sent to servers in ``_meta``)."""
        self.task: Task = task
        """The episode's task (``{workspace}`` filled in once the workspace exists)."""
        self.seed: int = seed
        """The seed the servers were reset with (``info["seed"]`` of the reset)."""
        self.budget: Budget = budget
        """The turn and tool-call budgets, and what this episode used of them (a fresh count per episode)."""
        self.steps: int = 0
        """Steps taken (tool calls, ``submit`` and invalid actions alike)."""
        self.episode_return: float = 0.0
        """The sum of the step rewards so far."""
        self.done: bool = False
        """The episode is over (a ``reset`` is needed)."""
        self.workspace: Path | None = None
        """The episode's workspace directory, if a server command line names ``{workspace}``."""
        self.transcript: list[dict[str, Any]] = []
        """The calls so far: ``{"tool", "arguments", "result"}`` (result text cut to :data:`TRANSCRIPT_CHARS`)."""
        self.grade: Any = None
        """The episode's :class:`~mcp_gym.graders.Grade` once a grader graded it, else ``None``."""
        self.catalogue_changes: list[dict[str, Any]] = []
        """``{"step", "tools", "hash"}`` for each change of the tool catalogue during the episode."""
        self.last_text: str = task.prompt
        """The last observation's text (``render()``)."""
        self.turn: int = 0
        """The user turn the episode is in (0-based; always 0 for a single-turn task)."""
        self.turn_answers: list[str | None] = []
        """The answers (``submit``) that ended each finished user turn, in order."""

    @property
    def turn_count(self) -> int:
        """How many user turns the task has (1 for a single-turn task)."""
        return max(1, len(self.task.turns))

    @property
    def last_turn(self) -> bool:
        """The episode is in its task's last user turn (always, for a single-turn task)."""
        return self.turn >= self.turn_count - 1

    def turn_prompt(self, turn: int | None = None) -> str:
        """The user message of ``turn`` (default: the current one)."""
        i = self.turn if turn is None else turn
        return str(self.task.turns[i]["prompt"]) if self.task.turns else self.task.prompt

    def record_call(self, tool: str | None, arguments: Mapping[str, Any], result: str) -> None:
        """Add a call to the transcript (its result text cut to :data:`TRANSCRIPT_CHARS` characters; in a multi-turn
        task each entry also has its ``turn``)."""
        entry: dict[str, Any] = {"tool": tool, "arguments": dict(arguments), "result": result[:TRANSCRIPT_CHARS]}
        if self.task.turns:
            entry["turn"] = self.turn
        self.transcript.append(entry)

    async def next_turn(self, answer: str | None, host: MCPHost, timeout: float | None) -> dict[str, Any] | None:
        """End the current user turn with ``answer`` (recorded as its ``submit``) and start the next: every ready
        server that lists the hidden :data:`~mcp_gym.protocol.TURN_TOOL` is called with ``{"turn": i}``. Returns the
        first hook failure as an ``info["error"]`` dict, else ``None``."""
        self.record_call("submit", {"answer": answer}, "")
        self.turn_answers.append(answer)
        self.turn += 1
        error = None
        for alias, conn in list(host.connections.items()):
            if conn.status == "ready" and host.has_tool(alias, TURN_TOOL):
                out = await host.call_server(alias, TURN_TOOL, {"turn": self.turn}, timeout=timeout)
                if error is None and (out.error or (out.result is not None and out.result.is_error)):
                    error = out.error or ToolCallError(
                        "tool_error", f"tool '{TURN_TOOL}' on server '{alias}' returned an error: " + render_content(
                            out.result.content if out.result else [], 500), tool=TURN_TOOL, server=alias).as_dict()
        return error

    def turns_view(self, final_answer: str | None = None) -> list[dict[str, Any]]:
        """The episode's calls grouped by user turn, for graders: one ``{"turn", "prompt", "calls", "answer"}`` per
        turn reached (``calls``: the transcript entries of that turn without its ``submit``; ``answer``: the
        ``submit`` that ended it, ``final_answer`` for the current turn, ``None`` if it did not end with one)."""
        out: list[dict[str, Any]] = []
        for i in range(self.turn + 1):
            calls = [dict(c) for c in self.transcript if c.get("turn", 0) == i and c.get("tool") != "submit"]
            answer = self.turn_answers[i] if i < len(self.turn_answers) else final_answer
            out.append({"turn": i, "prompt": self.turn_prompt(i), "calls": calls, "answer": answer})
        return out

    def end(self) -> None:
        """Mark the episode over (a ``submit`` graded it, or a budget or the server ended it)."""
        self.done = True

    def drop_workspace(self) -> None:
        """Remove the episode's workspace directory, if any."""
        if self.workspace is not None:
            shutil.rmtree(self.workspace, ignore_errors=True)
            self.workspace = None


_T = TypeVar("_T")


class FromEpisode(Generic[_T]):
    """A read-only attribute of an env that reads its current episode's ``attr`` (``default`` without an episode: a
    value, or a callable making a fresh one). Setting it raises: the state belongs to the :class:`Episode`."""

    def __init__(self, attr: str, default: _T | Callable[[], _T], doc: str) -> None:
        self.attr = attr
        self.default = default
        self.__doc__ = doc
        self.name = attr

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> FromEpisode[_T]: ...

    @overload
    def __get__(self, obj: object, objtype: type | None = None) -> _T: ...

    def __get__(self, obj: object, objtype: type | None = None) -> Any:
        if obj is None:
            return self
        ep = obj.episode  # type: ignore[attr-defined]  # the env this is an attribute of has one
        if ep is not None:
            return getattr(ep, self.attr)
        return self.default() if callable(self.default) else self.default

    def __set__(self, obj: object, value: Any) -> None:
        raise AttributeError(f"'{self.name}' is the current episode's state (env.episode.{self.attr}); reset() starts "
                             "a new episode")


class EpisodeState(Protocol):
    """What code beside ``env.py`` (graders, workspace set-up) uses of an env (:class:`~mcp_gym.env.MCPEnv` has it):
    its current :class:`Episode` and the servers' set-up."""

    @property
    def episode(self) -> Episode | None:
        """The current episode (``None`` before the first reset, and while a reset prepares the next one)."""
        ...

    @property
    def server_templates(self) -> Mapping[str, Any]:
        """The servers' specs as given (``{workspace}`` unfilled), by alias."""
        ...

    @property
    def workspace_servers(self) -> frozenset[str]:
        """The aliases of the servers whose command line or environment names ``{workspace}``."""
        ...

    async def state_snapshot(self) -> dict[str, Any]:
        """The servers' ``mcp_gym_state`` now: the one server's, else ``{alias: snapshot}``."""
        ...


_URI_FIELD = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}|[{}]")


def _fill_uri(template: str, data: Mapping[str, Any]) -> str | None:
    """``template`` with each ``{name}`` replaced by ``data[name]`` (``{{`` and ``}}`` stand for braces), or ``None``
    when a name is missing or a brace holds anything else. A task's templates and data are untrusted: unlike
    ``str.format``, no format spec (``{n:>2000000000}`` built a 2 GB string) and no attribute or index
    (``{n.__class__}``) is ever evaluated."""
    missing = False

    def one(m: re.Match[str]) -> str:
        nonlocal missing
        text = m.group(0)
        if text in ("{{", "}}"):
            return text[0]
        if m.group(1) is None or m.group(1) not in data:
            missing = True
            return ""
        return str(data[m.group(1)])

    out = _URI_FIELD.sub(one, template)
    return None if missing else out


class ObservedResources:
    """The resources an episode observes (``observe_resources`` and the task's ``resources``) and their latest texts
    (``texts``: what each observation's ``resources`` shows), re-read when a server says one was updated.

    ``waiting_on(*aliases)`` marks the servers a reset waits on (a reset timeout fails them)."""

    def __init__(self, host: MCPHost, waiting_on: Callable[..., AbstractContextManager[None]]) -> None:
        self.host = host
        self.waiting_on = waiting_on
        self.uris: dict[str, None] = {}
        """The URIs observed this episode (task templates filled), in order."""
        self.texts: dict[str, str] = {}
        """Each observed URI's text (an ``[error reading resource ...]`` text when it could not be read)."""
        self.server_of: dict[str, str] = {}
        """The server alias that served each URI."""

    async def setup(self, task: Task, observe: Sequence[str] | Literal["all"] | None, timeout: float | None,
                    max_chars: int | None) -> None:
        """Start the episode's observation: list (``"all"``) or take the URIs, fill the task's templates, subscribe
        and read them."""
        wanted: list[str] = []
        if observe == "all":
            for alias, conn in self.host.connections.items():
                if conn.status == "ready":
                    try:
                        with self.waiting_on(alias):
                            listed = await conn.list_resources(timeout=timeout)
                        for r in listed:
                            self.server_of[str(r.uri)] = alias
                            wanted.append(str(r.uri))
                    except Exception:  # noqa: BLE001 - a broken listing only loses that server's resources
                        pass
        elif observe:
            wanted.extend(observe)
        wanted.extend(task.resources)
        uris = []
        data = {k: v for k, v in dict(task.data).items() if isinstance(v, (str, int, float))}
        for u in dict.fromkeys(wanted):
            filled = _fill_uri(u, data) if "{" in u else u
            if filled is not None:  # None: a template this task cannot fill
                uris.append(filled)
        self.uris = {u: None for u in uris}
        self.texts = {}
        for alias, conn in self.host.connections.items():
            conn.events.updated.clear()
            if conn.status == "ready" and uris:
                with self.waiting_on(alias):
                    await conn.subscribe(uris, timeout=timeout)
        for u in uris:
            self.texts[u] = await self.read(u, timeout, max_chars)

    async def read(self, uri: str, timeout: float | None, max_chars: int | None) -> str:
        """``uri``'s text now (from the server that served it, else the first that can), or an error text."""
        aliases = [self.server_of[uri]] if uri in self.server_of else list(self.host.connections)
        last = "not found"
        for alias in aliases:
            conn = self.host.connections[alias]
            if conn.status != "ready":
                last = f"server '{alias}' is {conn.status}"
                continue
            try:
                with self.waiting_on(alias):
                    res = await conn.read_resource(uri, self.host.meta, timeout=timeout)
            except (ConnectionLost, MCPError) as e:
                last = str(e)
                continue
            except Exception as e:  # noqa: BLE001 - e.g. a result that is not a valid ReadResourceResult
                last = f"invalid result from server '{alias}': {type(e).__name__}"
                continue
            self.server_of[uri] = alias
            return render_content([mt.EmbeddedResource(type="resource", resource=c) for c in res.contents], max_chars)
        return f"[error reading resource {uri}: {last}]"

    async def refresh(self, timeout: float | None, max_chars: int | None) -> None:
        """Re-read the observed resources the servers said were updated since the last refresh."""
        dirty: set[str] = set()
        for conn in self.host.connections.values():
            if conn.events.updated:
                dirty |= conn.events.updated
                conn.events.updated = set()
        for u in self.uris:
            if u in dirty:
                self.texts[u] = await self.read(u, timeout, max_chars)

    def timed_out(self) -> None:
        """The reset timed out: the URIs not read yet say so."""
        for u in self.uris:
            self.texts.setdefault(u, f"[error reading resource {u}: reset timed out]")
