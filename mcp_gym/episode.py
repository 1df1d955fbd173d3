"""The episode's home: :class:`StepInfo`, the ``info`` dict of :meth:`MCPEnv.step <mcp_gym.env.MCPEnv.step>`;
:class:`EpisodeState`, what per-episode code outside ``env.py`` (graders, workspace set-up) reads and writes of a
running env instead of its private attributes; :class:`ObservedResources`, the resources an episode observes."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Literal, Protocol, TypedDict

import mcp.types as mt
from mcp import MCPError

from mcp_gym.client.connection import ConnectionLost
from mcp_gym.client.host import MCPHost, render_content
from mcp_gym.tasks import Task

__all__ = ["StepInfo", "StepResult", "EpisodeState", "ObservedResources"]


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
    """The call failed (an error result or an ``error``)."""
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


StepResult = tuple[dict[str, Any], float, bool, bool, StepInfo]
"""What ``astep`` returns: ``(obs, reward, terminated, truncated, info)``."""


class EpisodeState(Protocol):
    """The per-episode state of an env (:class:`~mcp_gym.env.MCPEnv` has it) that code beside ``env.py`` reads and
    writes: the current task, its workspace and transcript, whether it is over, and the servers' set-up."""

    task: Task | None
    """The current episode's task (``None`` before the first reset)."""
    workspace: Path | None
    """The current episode's workspace directory, if a server command line names ``{workspace}``."""
    transcript: list[dict[str, Any]]
    """The episode's calls so far: ``{"tool", "arguments", "result"}`` (result text cut to 2,000 characters)."""
    done: bool
    """The episode is over (a ``reset`` is needed)."""

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
            try:
                uris.append(u.format(**data) if "{" in u else u)
            except (KeyError, IndexError, ValueError):
                continue  # a template this task cannot fill
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
