"""The settings of an :class:`~mcp_gym.env.MCPEnv`, in three groups: :class:`Limits` (budgets, timeouts, sizes),
:class:`Scoring` (verifier, graders, rewards, success) and :class:`Connection` (how the env treats its servers)::

    env = MCPEnv(servers, tasks, limits=Limits(max_steps=10, call_timeout=60), scoring=Scoring(error_penalty=0.1),
                 connection=Connection(reset_mode="restart"))

A field left ``None`` is not set: the env's default applies (a bundled env's own ``max_steps``, verifier and success
threshold under ``gymnasium.make``; else the default each field names). Every setting is also a keyword of its own
(``MCPEnv(servers, tasks, max_steps=10)``, the older form, unchanged); giving one setting both ways is a
``TypeError`` naming it. The groups are frozen, comparable and picklable (when their values are), so they travel in
``gymnasium.make`` kwargs, an env's ``spec`` and to the worker processes of a vector env.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypedDict

if TYPE_CHECKING:
    from mcp_gym.client.host import ElicitationFn, SamplingFn
    from mcp_gym.rewards import RewardFn
    from mcp_gym.tasks import Verifier

__all__ = ["Limits", "Scoring", "Connection", "ResetMode", "EnvSettings"]

ResetMode = Literal["auto", "tool", "restart", "none"]
"""Between episodes: the server's hidden reset tool if it has one (``auto``), always it (``tool``), a reconnect that
restarts stdio servers (``restart``), or nothing (``none``)."""


@dataclass(frozen=True, kw_only=True)
class Limits:
    """How long an episode may run and how much a step may carry (``None``: the default named here).

    Attributes:
        max_steps: Truncate after this many steps: tool calls, ``submit`` and invalid actions alike (default 20; a
            bundled env's own ``MAX_STEPS`` under ``gymnasium.make``).
        max_turns: Truncate after this many model replies (default: no limit; see :mod:`mcp_gym._budget`).
        max_tool_calls: Truncate after this many calls that reached a server (default: no limit).
        call_timeout: Seconds per tool call, also bounding each re-listing of tools and each resource read (default
            30; ``math.inf``: no limit).
        reset_timeout: Seconds for all of a reset's server work (default 120; ``math.inf``: no limit). Past it the
            reset returns with a ``timeout`` error in ``info["reset_errors"]`` and the servers it waited on restart at
            the next reset.
        max_argument_bytes: Largest accepted JSON arguments of an action (default 1,000,000).
        max_observation_chars: Longest result or resource text in an observation; the full content stays in
            ``info`` (default 20,000).
    """

    max_steps: int | None = None
    max_turns: int | None = None
    max_tool_calls: int | None = None
    call_timeout: float | None = None
    reset_timeout: float | None = None
    max_argument_bytes: int | None = None
    max_observation_chars: int | None = None


@dataclass(frozen=True, kw_only=True)
class Scoring:
    """How steps are rewarded and episodes graded (``None``: the default named here).

    Attributes:
        verifier: ``(task, answer, state) -> reward`` grading ``submit``; ``state`` is the servers' ``mcp_gym_state``
            (default none; a bundled env's own under ``gymnasium.make``).
        grader: A grader spec or :class:`~mcp_gym.graders.Grading` grading every episode's end; a task's own
            ``grader`` wins (default without a verifier: normalised exact match for tasks with an ``answer``).
        judge: Settings of LLM-judge graders (:class:`~mcp_gym.graders.JudgeSettings` fields).
        reward_fn: Per-step reward (default :class:`~mcp_gym.rewards.ConventionReward` with ``error_penalty``).
        error_penalty: Subtracted from the reward of a failed step: bad action, tool error, timeout (default 0).
        error_text: A regular expression (case-insensitive): a tool result with ``isError`` false whose text matches
            it is a tool error all the same, as servers that report failures as text (``mcp-server-sqlite``'s
            ``Error: ...``) need (default ``None``: ``isError`` alone decides; :func:`compile_error_text`).
        success_threshold: Success is a verifier's score at or above it; without a grader or verifier, an episode
            the server ends with ``done`` succeeds when its return reaches it (default 1.0).
    """

    verifier: Verifier | None = None
    grader: Any = None
    judge: Mapping[str, Any] | None = None
    reward_fn: RewardFn | None = None
    error_penalty: float | None = None
    success_threshold: float | None = None
    error_text: str | None = None


@dataclass(frozen=True, kw_only=True)
class Connection:
    """How the env treats its servers: what the client offers them, which tools it shows, how it resets them
    (``None``: the default named here).

    Attributes:
        roots: Root URIs or paths advertised to the servers (default none).
        sampling: Answers the servers' sampling requests (default: a clear refusal).
        elicitation: Answers elicitation requests (default: decline; omitted fields get the schema's defaults).
        prefix_tools: Name tools ``{server}__{tool}`` (default: only with several servers).
        block_destructive: Hide and refuse tools that may be destructive (default ``False``).
        include_tools: Show the agent only these tools (exact names as the env lists them: ``{server}__{tool}``
            when prefixed); the others are hidden and refused (default ``None``: all). ``submit`` always stays.
        exclude_tools: Hide and refuse these tools (exact names as the env lists them; default none).
        reset_mode: Between episodes: ``auto`` (the default), ``tool``, ``restart`` or ``none`` (:data:`ResetMode`).
        spare_servers: ``{workspace}`` servers started ahead of the next resets (default 1; ``0``: off).
    """

    roots: Sequence[str] | None = None
    sampling: SamplingFn | None = None
    elicitation: ElicitationFn | None = None
    prefix_tools: bool | None = None
    block_destructive: bool | None = None
    include_tools: Sequence[str] | None = None
    exclude_tools: Sequence[str] | None = None
    reset_mode: ResetMode | None = None
    spare_servers: int | None = None


class EnvSettings(TypedDict, total=False):
    """The grouped settings as keywords of their own (``MCPEnv(servers, tasks, max_steps=10)``): each is the field of
    the same name of :class:`Limits`, :class:`Scoring` or :class:`Connection`, except that ``None`` keeps its meaning
    of the keyword form (no limit, none, automatic)."""

    max_steps: int
    max_turns: int | None
    max_tool_calls: int | None
    call_timeout: float | None
    reset_timeout: float | None
    max_argument_bytes: int
    max_observation_chars: int
    verifier: Verifier | None
    grader: Any
    judge: Mapping[str, Any] | None
    reward_fn: RewardFn | None
    error_penalty: float
    success_threshold: float
    error_text: str | None
    roots: Sequence[str] | None
    sampling: SamplingFn | None
    elicitation: ElicitationFn | None
    prefix_tools: bool | None
    block_destructive: bool
    include_tools: Sequence[str] | None
    exclude_tools: Sequence[str] | None
    reset_mode: ResetMode
    spare_servers: int


DEFAULTS: dict[str, Any] = {
    "max_steps": 20, "max_turns": None, "max_tool_calls": None, "call_timeout": 30.0, "reset_timeout": 120.0,
    "max_argument_bytes": 1_000_000, "max_observation_chars": 20_000,
    "verifier": None, "grader": None, "judge": None, "reward_fn": None, "error_penalty": 0.0, "success_threshold": 1.0,
    "error_text": None,
    "roots": None, "sampling": None, "elicitation": None, "prefix_tools": None, "block_destructive": False,
    "include_tools": None, "exclude_tools": None, "reset_mode": "auto", "spare_servers": 1,
}
"""Each grouped setting's default in :class:`~mcp_gym.env.MCPEnv` (``None`` for a timeout: no limit)."""

GROUPS: dict[str, type[Limits] | type[Scoring] | type[Connection]] = {
    "limits": Limits, "scoring": Scoring, "connection": Connection}
"""The group keywords of :class:`~mcp_gym.env.MCPEnv` and their classes."""

_GROUP_OF = {f.name: keyword for keyword, cls in GROUPS.items() for f in dataclasses.fields(cls)}
_TIMEOUTS = ("call_timeout", "reset_timeout")


def _as_group(keyword: str, value: Any) -> Limits | Scoring | Connection | None:
    cls = GROUPS[keyword]
    if value is None or isinstance(value, cls):
        return value
    if isinstance(value, Mapping):  # a config's mapping (Hydra, a trainer's YAML)
        try:
            return cls(**{str(k): v for k, v in value.items()})
        except TypeError as e:
            raise TypeError(f"{keyword}=: {e}") from None
    raise TypeError(f"{keyword}= takes an mcp_gym.{cls.__name__} (or a mapping of its fields), "
                    f"got {type(value).__name__}")


def split_settings(kwargs: Mapping[str, Any], where: str = "MCPEnv()") -> tuple[dict[str, Any], dict[str, Any]]:
    """``kwargs`` of :class:`~mcp_gym.env.MCPEnv` split into the grouped settings they set (flat, by name: the
    keywords given and the groups' fields that are not ``None``) and the other keywords.

    Raises:
        TypeError: a setting given both as a keyword and in its group (naming it), or a group of the wrong type.
    """
    rest = {k: v for k, v in kwargs.items() if k not in GROUPS and k not in _GROUP_OF}
    given = {k: v for k, v in kwargs.items() if k in _GROUP_OF}
    for keyword in GROUPS:
        group = _as_group(keyword, kwargs.get(keyword))
        if group is None:
            continue
        for f in dataclasses.fields(group):
            value = getattr(group, f.name)
            if value is None:
                continue
            if f.name in given:
                raise TypeError(f"{where} got {f.name} twice: as {f.name}={given[f.name]!r} and in {keyword}="
                                f"{type(group).__name__}({f.name}={value!r}); give it once")
            given[f.name] = value
    for name in _TIMEOUTS:  # math.inf: no limit, as None is in the keyword form
        if given.get(name) == math.inf:
            given[name] = None
    return given, rest


def resolve_settings(given: Mapping[str, Any]) -> dict[str, Any]:
    """Every grouped setting's value: ``given`` (from :func:`split_settings`) over :data:`DEFAULTS`."""
    return {**DEFAULTS, **given}


def compile_error_text(pattern: Any, key: str = "error_text") -> re.Pattern[str] | None:
    """``error_text`` (of :class:`Scoring`; the jobs' ``env.error_text`` and ``generator.error_text``) compiled
    case-insensitive, or ``None`` when it is ``None`` or empty (off: ``isError`` alone decides).

    Raises:
        TypeError: ``pattern`` is not a string (the message names ``key``).
        ValueError: ``pattern`` is not a regular expression (the message names ``key`` and says why).
    """
    if pattern is None or pattern == "":
        return None
    if not isinstance(pattern, str):
        raise TypeError(f"{key} must be a regular expression or null, not {pattern!r}")
    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error as e:
        raise ValueError(f"{key} is not a regular expression ({e}): {pattern!r}") from None
