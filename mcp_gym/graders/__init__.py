"""Graders: how an episode on any MCP server is scored, from a spec in the config or in the task.

A grader turns the end of an episode into a :class:`Grade` (score 0..1, passed, reason, per-grader breakdown). The env
runs one when an episode ends (``submit``, a server's ``done``, or truncation): ``info["grade"]`` holds the grade (the
recorder writes it into the final step's ``info`` column), ``info["success"]`` its ``passed``, and the ``submit``
step's reward its score.

Specs (``env.grader`` in a job config, ``grader=`` of :class:`~mcp_gym.env.MCPEnv`, or a task's own ``grader`` field,
which wins) are a kind name, a ``module:function`` import path, a dict with ``kind`` and options, or a list (all of
them). Without any spec a task with an ``answer`` is graded by normalised exact match.

Answer matchers (on the submitted answer and the task's ``answer``):

* ``exact``: equal after normalisation (Unicode NFKC, case-folded, whitespace collapsed, surrounding quotes and a
  trailing period dropped); a list ``answer`` accepts any of its items.
* ``numeric``: the answer (or the last number in it) within ``abs_tol`` (default 1e-6) / ``rel_tol`` of ``answer``
  (or ``value``).
* ``regex``: ``re.search`` of ``pattern`` (default: the task's ``answer``); ``ignore_case``. Matched with the ``regex``
  module within :data:`~mcp_gym._schema.PATTERN_TIMEOUT` (0.1 s, the bound of tool schemas' patterns: one bounded
  matcher, :func:`~mcp_gym._schema.bounded_search`, for both); a match that takes longer (a pattern that backtracks
  without end on this answer) is a failed grade saying so, never a frozen process. So is a ``files`` ``regex`` check.
* ``one_of``: the normalised answer is one of ``options`` (default: the task's list ``answer``).
* ``set``: the answer, a JSON list or comma/semicolon/newline separated, equals the task's list ``answer`` as a set
  (score: Jaccard overlap).

Python: ``{"kind": "python", "function": "module:function"}`` (or the bare import path; the module is looked up in
the task file's folder first) called with the :class:`EpisodeContext` (a function of one parameter: the filled task,
the answer, the workspace, the server aliases, the transcript, the task file's folder, how the episode ended, the
servers' ``mcp_gym_state`` snapshot) or, a function of three, as ``(task, answer, state)`` (the
:data:`~mcp_gym.tasks.Verifier` signature), returning a bool, a number (passed at ``threshold``, default 1), a
mapping with ``score``/``passed``/``reason`` or a :class:`Grade`. A sync function runs in a worker thread (never on
the event loop the episodes share); an ``async`` one is awaited.

Every grader is bounded by a timeout (:class:`Grading`'s ``timeout``, ``env.grader_timeout``, default
:data:`~mcp_gym.graders.base.DEFAULT_GRADER_TIMEOUT` = 60 s; a spec's own ``timeout`` wins): past it the grade is a
failure whose reason says so.

State checks read the world after the episode:

* ``files``: under ``dir`` (default ``{workspace}``), ``expect`` maps relative paths to their exact contents,
  ``{"contains": s}``, ``{"regex": p}`` or ``null`` (must not exist); ``globs`` maps patterns to a count or
  ``{"min": n, "max": m}``. Defaults: the task's ``data["files"]`` and ``data["globs"]``.
* ``sqlite``: ``query`` on the database ``db`` (opened read-only) returns ``rows`` (in any order unless
  ``ordered``). Defaults: the task's ``data["query"]`` / ``data["rows"]``.
* ``mcp``: a final ``tool`` call (with ``arguments``) or ``resource`` read on the episode's own session (``server``:
  the alias, needed with several servers), its structured content or JSON text compared with ``equals``, ``contains``
  (substrings of the text) or ``subset`` (every expected key/item present, recursively); ``path`` (JSONPath, via
  ``jsonpath-ng``) selects part of it first: the list of matches for a path with ``*``, ``..``, a filter or a slice,
  else the one matched value. Default expectation: the task's ``data["expect"]``.

LLM judge: ``{"kind": "judge"}`` asks an OpenAI-compatible chat-completions endpoint (``base_url``, ``model``,
``api_key``; defaults from the env's ``judge`` settings) to grade the answer and the trajectory against the task's
``rubric``; its reply must END with one JSON object ``{"verdict": "pass"|"fail", "score": 0..1, "reasoning": "..."}``
(bare or closing a fenced block, nothing after it), all recorded in the grade's ``details``. That object is the only
place a verdict is taken from: a verdict the agent planted in its answer, which the judge may quote while reasoning,
is not it. A reply that does not end with one (or gives a key twice, or a score outside 0..1) leaves the episode
ungraded; a verdict and score that disagree (``pass`` below the judge's ``threshold``, default 0.5, or ``fail`` at or
above it) are a failed grade, score 0, saying so: never paid.

Combinations: ``{"kind": "all", "of": [...]}`` (passed if all passed, score the minimum), ``any`` (any passed, the
maximum), ``weighted`` (``of`` items carry ``weight``; score the weighted mean, passed at ``threshold``, default 1).

``{workspace}`` in a grader's string options is the episode's workspace (see ``fixture`` in
:class:`~mcp_gym.tasks.Task`). A grader that cannot grade (a broken verifier, an unreachable judge, a failed final
call) raises :class:`~mcp_gym.graders.base.GraderError`: the env then records ``success=None`` and the error, never a
silent failure.
"""

from __future__ import annotations

from mcp_gym.graders.base import EpisodeContext, Grade
from mcp_gym.graders.judge import DEFAULT_JUDGE_PROMPT, DEFAULT_JUDGE_SYSTEM, JudgeSettings
from mcp_gym.graders.spec import Grading

__all__ = ["Grade", "EpisodeContext", "Grading", "JudgeSettings", "DEFAULT_JUDGE_SYSTEM", "DEFAULT_JUDGE_PROMPT"]
