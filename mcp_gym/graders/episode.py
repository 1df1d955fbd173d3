"""Grading the env's current episode: which grader applies to its task, and the grade written into ``info``."""

from __future__ import annotations

import math
from typing import Any, Protocol

import anyio

from mcp_gym.client.host import MCPHost
from mcp_gym.episode import Episode, EpisodeState, StepInfo
from mcp_gym.graders import _shared
from mcp_gym.graders.base import Grade, GradeContext, GraderError
from mcp_gym.graders.session import SessionAccess
from mcp_gym.graders.spec import Grading
from mcp_gym.protocol import ToolCallError
from mcp_gym.tasks import Verifier

__all__ = ["is_graded", "grade_step_end", "grade_submit", "verifier_score"]


class _GradedEpisode(EpisodeState, Protocol):
    """What grading needs of an env (:class:`~mcp_gym.env.MCPEnv` has it)."""

    grading: Grading | None
    verifier: Verifier | None
    host: MCPHost
    call_timeout: float | None
    strict: bool
    success_threshold: float


def _current(env: _GradedEpisode) -> Episode:
    """The env's current episode (grading runs inside a step: there is one)."""
    assert env.episode is not None, "grading needs a running episode"
    return env.episode


def episode_grader(env: _GradedEpisode) -> Any:
    """The grader of the env's current task (``None``: the legacy ``verifier`` path, or ungraded; ``True``: a task
    with a broken grader spec, which :func:`grade_episode` reports)."""
    if env.grading is None or env.episode is None:
        return None
    try:
        return env.grading.for_task(env.episode.task)
    except GraderError:
        return True


def is_graded(env: _GradedEpisode) -> bool:
    """Whether the env's current episode gets a success verdict (a verifier or a grader applies)."""
    return env.verifier is not None if env.grading is None else episode_grader(env) is not None


async def grade_episode(env: _GradedEpisode, info: StepInfo, answer: str | None,
                        termination: str | None) -> float:
    """Grade the env's finished episode into ``info`` (``grade``, ``success``; ``error`` when grading failed) and
    the episode's ``grade``, within the grader's timeout (past it: a failed grade saying so); returns the score (0 on
    failure)."""
    ep = _current(env)
    assert env.grading is not None
    session = SessionAccess(env.host, env.call_timeout)
    ctx = GradeContext(ep.task, answer, ep.workspace, list(ep.transcript), env.state_snapshot,
                       session.call, session.read, tuple(env.host.connections), env.grading.task_dir, termination,
                       ep.turns_view(answer))
    try:
        grader = env.grading.for_task(ep.task)
        assert grader is not None
        limit = env.grading.limit(grader)
        with anyio.move_on_after(math.inf if limit is None else limit) as scope, _shared.grading(env):
            grade = await grader.grade(ctx)  # (what it uses of graders' shared resources is the env's: _shared)
        if scope.cancelled_caught:
            grade = Grade(0.0, False, f"grader timed out after {limit:g} s (grader_timeout)", grader.name,
                          grader.kind, details={"timed_out": True})
    except Exception as e:  # noqa: BLE001 - grading must not crash the loop; the episode is ungraded
        if env.strict:
            raise
        info["grade"], info["success"] = None, None
        why = str(e) if isinstance(e, GraderError) else f"{type(e).__name__}: {e}"
        info["error"] = info.get("error") or ToolCallError(
            "verifier_error", f"grading failed on task '{ep.task.id}': {why}").as_dict()
        return 0.0
    ep.grade = grade
    info["grade"], info["success"] = grade.to_dict(), grade.passed
    return grade.score


async def verifier_score(env: _GradedEpisode, answer: str | None) -> float:
    """The legacy ``verifier``'s score for the current server state (raises what the verifier raises)."""
    assert env.verifier is not None
    task = _current(env).task
    state = await env.state_snapshot()
    return float(env.verifier(task, answer, state))


async def grade_step_end(env: _GradedEpisode, info: StepInfo, terminated: bool) -> None:
    """Grade a tool step that ended the episode into ``info``: the grader when one applies, else the legacy
    ``verifier`` on termination (``success``; ``error`` when it failed)."""
    ep = _current(env)
    if ep.done and episode_grader(env) is not None:
        await grade_episode(env, info, None, info.get("termination"))
    elif terminated and env.verifier is not None:
        try:
            info["success"] = await verifier_score(env, None) >= env.success_threshold
        except Exception as e:  # noqa: BLE001 - a broken verifier must not crash the loop
            if env.strict:
                raise
            info["success"] = None
            info["error"] = info["error"] or ToolCallError(
                "verifier_error", f"verifier failed on task '{ep.task.id}': {type(e).__name__}: {e}").as_dict()


async def grade_submit(env: _GradedEpisode, answer: str | None) -> tuple[float, dict[str, Any] | None, StepInfo]:
    """Grade a ``submit``: ``(reward, error, graded)``, ``graded`` holding the grader's ``grade`` and ``success``
    (empty on the legacy ``verifier`` path or when nothing grades the episode)."""
    ep = _current(env)
    error = None
    reward = 0.0
    graded: StepInfo = {}
    if episode_grader(env) is not None:
        ep.end()
        ep.record_call("submit", {"answer": answer}, "")
        reward = await grade_episode(env, graded, answer, "submit")
        error = graded.pop("error", None)
    elif env.verifier is not None:
        try:
            reward = await verifier_score(env, answer)
        except Exception as e:  # noqa: BLE001 - a broken verifier must not crash the loop
            error = ToolCallError("verifier_error", f"verifier failed on task '{ep.task.id}': "
                                  f"{type(e).__name__}: {e}", tool="submit").as_dict()
            if env.strict:
                raise
    return reward, error, graded
