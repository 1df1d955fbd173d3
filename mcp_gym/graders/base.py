"""The grader interface: :class:`Grade`, :class:`EpisodeContext` (what a Python grader receives),
:class:`GradeContext`, :class:`Grader` (answers are compared through :func:`mcp_gym.tasks.normalise_answer`,
re-exported here)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp_gym.errors import MCPGymError
from mcp_gym.tasks import Task, normalise_answer

__all__ = ["Grade", "EpisodeContext", "DEFAULT_GRADER_TIMEOUT", "normalise_answer"]

DEFAULT_GRADER_TIMEOUT = 60.0
"""Seconds a grader may take by default (``grader_timeout``); past it the grade is a failure saying so."""


class GraderError(MCPGymError):
    """A grader could not grade the episode (its message names the grader and the task)."""


@dataclass(frozen=True)
class Grade:
    """The outcome of a grader.

    Attributes:
        score: 0..1.
        passed: Whether the episode counts as a success.
        reason: One line saying why.
        grader: The grader's name (its ``name`` option, else its kind).
        kind: The grader's kind (``exact``, ``judge``, ``all``, ...).
        parts: The grades of a combination's members.
        details: Kind-specific facts (a judge's verdict, score and reasoning; a final call's value, ...).
    """

    score: float
    passed: bool
    reason: str
    grader: str
    kind: str
    parts: tuple[Grade, ...] = ()
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (what ``info["grade"]`` holds)."""
        d: dict[str, Any] = {"grader": self.grader, "kind": self.kind, "score": self.score, "passed": self.passed,
                             "reason": self.reason}
        if self.details:
            d["details"] = dict(self.details)
        if self.parts:
            d["parts"] = [p.to_dict() for p in self.parts]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Grade:
        """Inverse of :meth:`to_dict`."""
        return cls(float(d["score"]), bool(d["passed"]), str(d.get("reason", "")), str(d["grader"]), str(d["kind"]),
                   tuple(cls.from_dict(p) for p in d.get("parts") or ()), dict(d.get("details") or {}))

    def flat(self) -> dict[str, Grade]:
        """Every grade in the tree by path (``"all"``, ``"all/exact"``, ``"all/judge"``, ...; repeated names get
        ``#2``...)."""
        out: dict[str, Grade] = {}

        def walk(g: Grade, prefix: str) -> None:
            path = f"{prefix}/{g.grader}" if prefix else g.grader
            n, key = 1, path
            while key in out:
                n += 1
                key = f"{path}#{n}"
            out[key] = g
            for p in g.parts:
                walk(p, key)

        walk(self, "")
        return out


@dataclass(frozen=True)
class EpisodeContext:
    """What a Python grader of one parameter receives: the finished episode.

    Attributes:
        task: The task as the episode played it (``{workspace}`` replaced by the real path).
        answer: The submitted answer (``None``: the episode ended without ``submit``).
        workspace: The episode's workspace directory (``None`` when no server command line names ``{workspace}``);
            the world after the episode, for state checks.
        servers: The aliases of the episode's servers (``env.servers`` keys).
        transcript: The episode's steps, ``{"tool", "arguments", "result"}`` (result text shortened to 2,000 chars).
        task_dir: The folder of the task file (``None`` for tasks not loaded from a file).
        termination: How the episode ended: ``submit``, ``done``, ``max_steps``, ``max_turns``, ...
        state: The servers' ``mcp_gym_state`` snapshot (``{}`` when none has the tool).
        turns: The calls grouped by user turn: ``{"turn", "prompt", "calls", "answer"}`` per turn the episode reached
            (one for a single-turn task; see ``docs/conversations.md``).
    """

    task: Task
    answer: str | None
    workspace: Path | None
    servers: tuple[str, ...]
    transcript: tuple[Mapping[str, Any], ...]
    task_dir: Path | None
    termination: str | None
    state: Mapping[str, Any]
    turns: tuple[Mapping[str, Any], ...] = ()

    @property
    def data(self) -> Mapping[str, Any]:
        """The task's ``data``."""
        return self.task.data

    def path(self, value: str | Path) -> Path:
        """A path named by the task (e.g. a ``data`` value): ``{workspace}`` replaced, a relative path taken from the
        task file's folder (as ``fixture`` is)."""
        return task_path(value, self.task, self.workspace, self.task_dir)


def task_path(value: str | Path, task: Task, workspace: Path | None, task_dir: Path | None) -> Path:
    """``value`` as a path: ``{workspace}`` replaced, a relative path taken from ``task_dir`` (the task file's
    folder) when there is one."""
    text = str(value)
    if "{workspace}" in text:
        if workspace is None:
            raise GraderError(f"{text!r} names {{workspace}} but task '{task.id}' has no workspace")
        text = text.replace("{workspace}", str(workspace))
    path = Path(text).expanduser()
    return task_dir / path if not path.is_absolute() and task_dir is not None else path


@dataclass
class GradeContext:
    """What a grader may look at: the task, the submitted answer, the episode's workspace and transcript, and (through
    the env) the servers' state snapshot and the episode's own sessions."""

    task: Task
    answer: str | None
    workspace: Path | None = None
    transcript: Sequence[Mapping[str, Any]] = ()
    """The episode's steps: ``{"tool", "arguments", "result"}`` (result text, shortened)."""
    state_fn: Callable[[], Awaitable[Mapping[str, Any]]] | None = None
    call_fn: Callable[[str | None, str, Mapping[str, Any]], Awaitable[Any]] | None = None
    read_fn: Callable[[str | None, str], Awaitable[Any]] | None = None
    servers: tuple[str, ...] = ()
    task_dir: Path | None = None
    termination: str | None = None
    turns: Sequence[Mapping[str, Any]] = ()
    """The calls grouped by user turn: ``{"turn", "prompt", "calls", "answer"}`` per turn reached, ``calls`` being
    that turn's transcript entries without its ``submit`` and ``answer`` the ``submit`` that ended it."""
    _state: Mapping[str, Any] | None = None

    async def episode(self) -> EpisodeContext:
        """The :class:`EpisodeContext` Python graders receive (the state snapshot read now)."""
        return EpisodeContext(self.task, self.answer, self.workspace, tuple(self.servers), tuple(self.transcript),
                              self.task_dir, self.termination, await self.state(), tuple(self.turns))

    async def state(self) -> Mapping[str, Any]:
        """The servers' ``mcp_gym_state`` snapshot (``{}`` when none has the tool); read once."""
        if self._state is None:
            self._state = await self.state_fn() if self.state_fn is not None else {}
        return self._state

    async def call_tool(self, tool: str, arguments: Mapping[str, Any], server: str | None = None) -> Any:
        """Call a tool on the episode's own session; returns the structured content, else the JSON or text of the
        result. Raises :class:`GraderError` when the call fails."""
        if self.call_fn is None:
            raise GraderError("no MCP session to call tools on")
        return await self.call_fn(server, tool, arguments)

    async def read_resource(self, uri: str, server: str | None = None) -> Any:
        """Read a resource on the episode's own session (JSON if its text is JSON, else the text)."""
        if self.read_fn is None:
            raise GraderError("no MCP session to read resources from")
        return await self.read_fn(server, uri)

    def path(self, value: str | Path) -> Path:
        """A path option (``db``, ``dir``): ``{workspace}`` replaced, a relative path taken from the task file's
        folder."""
        return task_path(value, self.task, self.workspace, self.task_dir)

    def fill(self, value: Any) -> Any:
        """``value`` with ``{workspace}`` replaced in its strings (recursively)."""
        if isinstance(value, str):
            if "{workspace}" in value:
                if self.workspace is None:
                    raise GraderError(f"'{value}' names {{workspace}} but task '{self.task.id}' has no workspace "
                                      "(no server command line mentions {workspace})")
                return value.replace("{workspace}", str(self.workspace))
            return value
        if isinstance(value, Mapping):
            return {k: self.fill(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.fill(v) for v in value]
        return value


class Grader:
    """Base class: ``await grader.grade(ctx) -> Grade``. ``name`` labels it in breakdowns (default: its kind)."""

    kind = "grader"
    reads_state = False
    """It reads the world after the episode (files, a database, the servers): episodes must not share sessions."""
    timeout: float | None = None
    """Seconds this grader may take (a spec's ``timeout``); ``None``: the grading's ``grader_timeout``."""

    def __init__(self, name: str | None = None) -> None:
        self.name = name or self.kind

    async def grade(self, ctx: GradeContext) -> Grade:
        """Grade one finished episode."""
        raise NotImplementedError

    def _grade(self, passed: bool, reason: str, score: float | None = None, **details: Any) -> Grade:
        s = (1.0 if passed else 0.0) if score is None else max(0.0, min(1.0, float(score)))
        return Grade(s, bool(passed), reason, self.name, self.kind, (), details)

    def spec(self) -> Any:
        """A JSON-able description (recorded in the run's config)."""
        return {"kind": self.kind, "name": self.name, **({"timeout": self.timeout} if self.timeout else {})}
