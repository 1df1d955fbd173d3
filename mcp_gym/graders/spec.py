"""Combinations (all / any / weighted), grader specs, and which grader grades which task."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mcp_gym.graders.answers import ExactGrader, NumericGrader, OneOfGrader, PythonGrader, RegexGrader, SetGrader
from mcp_gym.graders.base import DEFAULT_GRADER_TIMEOUT, Grade, GradeContext, Grader, GraderError
from mcp_gym.graders.judge import JudgeGrader, JudgeSettings
from mcp_gym.graders.state import FilesGrader, MCPGrader, SQLiteGrader
from mcp_gym.tasks import Task

__all__ = ["Grading"]


class CombinedGrader(Grader):
    """``all`` (every member passed; score the minimum), ``any`` (one passed; the maximum) or ``weighted`` (weighted
    mean score, passed at ``threshold``)."""

    def __init__(self, kind: str, members: Sequence[Grader], weights: Sequence[float] | None = None,
                 threshold: float = 1.0, name: str | None = None) -> None:
        if kind not in ("all", "any", "weighted"):
            raise ValueError(f"unknown combination {kind!r}")
        if not members:
            raise ValueError(f"'{kind}' grader needs at least one member (of: [...])")
        self.kind = kind
        super().__init__(name)
        self.members = list(members)
        self.weights = [float(w) for w in (weights or [1.0] * len(members))]
        if len(self.weights) != len(self.members) or min(self.weights) < 0 or sum(self.weights) <= 0:
            raise ValueError(f"'{kind}' grader: weights {self.weights} do not fit its {len(members)} members")
        self.threshold = float(threshold)
        self.reads_state = any(m.reads_state for m in members)

    async def grade(self, ctx: GradeContext) -> Grade:
        parts = tuple([await m.grade(ctx) for m in self.members])
        if self.kind == "all":
            passed, score = all(p.passed for p in parts), min(p.score for p in parts)
        elif self.kind == "any":
            passed, score = any(p.passed for p in parts), max(p.score for p in parts)
        else:
            score = sum(w * p.score for w, p in zip(self.weights, parts, strict=True)) / sum(self.weights)
            passed = score >= self.threshold - 1e-12
        n = sum(p.passed for p in parts)
        reason = f"{n}/{len(parts)} passed" + (f", weighted score {score:.3g}" if self.kind == "weighted" else "")
        return Grade(score, passed, reason, self.name, self.kind, parts)

    def spec(self) -> Any:
        return {**super().spec(), "of": [m.spec() for m in self.members], "weights": self.weights,
                "threshold": self.threshold}


# -- specs -----------------------------------------------------------------------------------------------------------
GRADER_KINDS: dict[str, type[Grader]] = {
    "exact": ExactGrader, "numeric": NumericGrader, "regex": RegexGrader, "one_of": OneOfGrader, "set": SetGrader,
    "python": PythonGrader, "files": FilesGrader, "sqlite": SQLiteGrader, "mcp": MCPGrader, "judge": JudgeGrader,
}
"""Grader kinds by spec name (plus the combinations ``all``, ``any``, ``weighted``)."""


def make_grader(spec: Any, judge: JudgeSettings | None = None, task_dir: Path | None = None,
                trusted: bool = True) -> Grader:
    """A grader from a spec: a :class:`Grader`, a callable verifier, a kind name, ``"module:function"``, a list (all
    of them) or a mapping ``{"kind": ..., **options}`` (``timeout``: the seconds it may take). ``judge``: the default
    settings of ``judge`` graders; ``task_dir``: the task file's folder, where ``module:function`` is looked up first
    (``trusted``: allowed to, else a module found there is refused).

    Raises ``ValueError`` naming the bad part of the spec."""
    if isinstance(spec, Grader):
        return spec
    if callable(spec):
        return PythonGrader(function=spec)
    if isinstance(spec, str):
        if ":" in spec:
            return PythonGrader(function=spec, task_dir=task_dir, trusted=trusted)
        spec = {"kind": spec}
    if isinstance(spec, (list, tuple)):
        spec = {"kind": "all", "of": list(spec)}
    if not isinstance(spec, Mapping) or "kind" not in spec:
        raise ValueError(f"grader spec {spec!r}: give a kind name, 'module:function', a list, or a mapping with 'kind'")
    options = dict(spec)
    kind = str(options.pop("kind"))
    timeout = options.pop("timeout", None)
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
        raise ValueError(f"grader spec {dict(spec)!r}: timeout must be a positive number of seconds")
    grader = _make(spec, kind, options, judge, task_dir, trusted)
    grader.timeout = float(timeout) if timeout is not None else None
    return grader


def _make(spec: Any, kind: str, options: dict[str, Any], judge: JudgeSettings | None, task_dir: Path | None,
          trusted: bool) -> Grader:
    if kind in ("all", "any", "weighted"):
        members = options.pop("of", None)
        if not isinstance(members, list):
            raise ValueError(f"grader spec {dict(spec)!r}: '{kind}' needs of: [...]")
        weights = [float(m.get("weight", 1.0)) if isinstance(m, Mapping) else 1.0 for m in members]
        graders = [make_grader({k: v for k, v in m.items() if k != "weight"} if isinstance(m, Mapping) else m, judge,
                               task_dir, trusted) for m in members]
        return CombinedGrader(kind, graders, weights, float(options.pop("threshold", 1.0)), options.pop("name", None))
    cls = GRADER_KINDS.get(kind)
    if cls is None:
        raise ValueError(f"grader spec {dict(spec)!r}: unknown kind {kind!r}; kinds: "
                         f"{', '.join([*GRADER_KINDS, 'all', 'any', 'weighted'])} or 'module:function'")
    if cls is JudgeGrader:
        options["settings"] = judge
    if cls is PythonGrader:
        options.update(task_dir=task_dir, trusted=trusted)
    try:
        return cls(**options)
    except TypeError as e:
        raise ValueError(f"grader spec {dict(spec)!r}: {e}") from None


class Grading:
    """Which grader grades which task: the task's own ``grader`` spec, else the default spec, else normalised exact
    match when the task has an ``answer`` (``None`` when nothing applies: the episode is ungraded).

    Args:
        default: The task set's grader spec (``env.grader``).
        judge: Settings of ``judge`` graders (``env.judge``).
        timeout: Seconds a grader may take (``env.grader_timeout``; a spec's own ``timeout`` wins); past it the
            grade is a failure saying so.
        task_dir: The task file's folder: graders see it (:attr:`~mcp_gym.graders.EpisodeContext.task_dir`) and
            ``module:function`` is looked up there first (for a task's own spec only when ``trust_task_code``).
        trust_task_code: A task's own ``grader`` may import a module from the task file's folder (a task file is
            data: only for a benchmark you trust; ``env.trust_task_code``).
    """

    def __init__(self, default: Any = None, judge: JudgeSettings | Mapping[str, Any] | None = None, *,
                 timeout: float | None = DEFAULT_GRADER_TIMEOUT, task_dir: str | Path | None = None,
                 trust_task_code: bool = False) -> None:
        self.judge = judge if isinstance(judge, JudgeSettings) else JudgeSettings.from_config(judge)
        self.timeout = float(timeout) if timeout is not None else None
        self.task_dir = Path(task_dir).resolve() if task_dir is not None else None
        self.trust_task_code = bool(trust_task_code)
        self.default = make_grader(default, self.judge, self.task_dir) if default is not None else None
        self._cache: dict[str, Grader] = {}

    def for_task(self, task: Task) -> Grader | None:
        """The grader of ``task`` (specs are built once and cached)."""
        if task.grader is not None:
            key = json.dumps(task.grader, sort_keys=True, default=str)
            grader = self._cache.get(key)
            if grader is None:
                try:
                    grader = self._cache[key] = make_grader(task.grader, self.judge, self.task_dir,
                                                            self.trust_task_code)
                except ValueError as e:
                    raise GraderError(f"task '{task.id}': {e}") from None
            return grader
        if self.default is not None:
            return self.default
        if task.answer is not None:
            return self._cache.setdefault("\0exact", ExactGrader())
        return None

    def limit(self, grader: Grader) -> float | None:
        """Seconds ``grader`` may take: its spec's ``timeout``, else the grading's."""
        return grader.timeout if grader.timeout is not None else self.timeout

    def describe(self) -> dict[str, Any]:
        """The run's grading as JSON-able config: the default spec, the timeout and the judge settings (no API key)."""
        return {"default": self.default.spec() if self.default is not None else "exact when the task has an answer",
                "timeout": self.timeout, "judge": self.judge.public()}
